import Protocol

/// A player: the account and the IM provider it is an account of (SPEC §5).
/// `alice` on NetEase and `alice` on the generic webhook are two players,
/// with their own queue places, budgets and replies; replies go back
/// through the provider.
struct PlayerAddress: Sendable, Equatable, Hashable {
    var accid: String
    var provider: String
}

extension GameEvent {
    /// Names the player of the event: account and provider.
    mutating func set(_ player: PlayerAddress?) {
        self.player = player?.accid
        provider = player?.provider
    }
}

/// A reply on its way to a player.
struct PlayerReply: Sendable, Equatable {
    enum Priority: Int, Sendable, Comparable {
        /// Refusals (command 9) and relayed acks: useful, but never ahead of a turn.
        case normal = 0
        /// Turn offers (11), results (4) and queue positions (8): a player
        /// waits on these to play.
        case high = 1

        static func < (a: Priority, b: Priority) -> Bool { a.rawValue < b.rawValue }
    }

    var to: PlayerAddress
    var message: WireMessage
    var priority: Priority
    /// On the game clock: past this, the reply is worthless (an offer after
    /// its accept deadline) and is dropped rather than sent.
    var expires: Duration?
}

/// How replies reach players (commands 4, 5, 8, 9, 11). Sending never blocks
/// the game: an implementation hands the reply to its own delivery.
protocol PlayerChannel: Sendable {
    /// Sends `reply` from the machine's IM account through the reply's provider.
    func send(_ reply: PlayerReply, from machine: MachineConfig)
}
