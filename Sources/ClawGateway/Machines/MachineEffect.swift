import Protocol

/// What a transition of a machine's game decided should happen outside it.
///
/// Transitions (``MachineState``) do no I/O: they return these, and the
/// machine (``Machine``) carries them out after its lock is released, in the
/// order they were decided. Commands to the PC go out at once, except a
/// coin (1001) and what is decided behind it (``MachineOutbox``); everything
/// that tells a player or an operator something waits until the transition's
/// writes (``Step/writes``) are durable.
enum MachineEffect: Sendable {
    /// A command to the machine's PC (`control`) or camera switch (`camera`):
    /// QoS 0, never retained, never queued for later.
    case command(WireMessage, camera: Bool)
    /// One event: counted in the metrics, and published on `claw/<m>/events`
    /// (and to the observers) when `published` (``GameSettings/publishes(_:)``).
    case event(GameEvent, published: Bool = true)
    /// The retained snapshot on `claw/<m>/queue`.
    case snapshot(QueueSnapshot)
    /// A reply to a player through their IM provider.
    case reply(PlayerReply)
    /// The PC's result numbered `serial` is taken and durable: confirmed on
    /// `claw/<m>/result/ack` (SPEC §4), so that the PC stops repeating it.
    case confirmResult(serial: Int64)
    /// A game's debit asked of the chain's ledger (SPEC §11), once the ask
    /// is durable: its answer comes back as ``MachineState/debitAnswered(_:_:)``.
    case askDebit(ChainWalletAsk)
    /// Retired by a reload and free at last: its retained snapshot is
    /// cleared and the arcade lets it go (SPEC §13).
    case gone
}

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

/// The result of one transition: what it answers, and what must happen
/// because of it.
struct Step<Outcome: Sendable>: Sendable {
    var outcome: Outcome
    /// In the order they were decided.
    var effects: [MachineEffect]
    /// Written to storage in one transaction, before any telling effect runs.
    var writes: [StoreChange]
}

/// The inputs of a transition besides the request itself.
struct TransitionContext: Sendable {
    var now: Moment
    /// Whether commands can reach the broker right now: a command is refused
    /// with `gateway_unavailable` rather than lost when it cannot.
    var brokerConnected = true
    /// Whether storage takes writes: queue changes are refused with
    /// `gateway_unavailable` while it does not.
    var storageWritable = true
    /// The players' balances when games cost credits (SPEC §11), read under
    /// the wallets' lock, which is held for the whole transition; nil when
    /// games are free.
    var wallets: WalletBook? = nil
    /// In a chain whose games cost credits: the chain's ledger debits them
    /// (SPEC §11), asked over the site's link; nil otherwise.
    var chainLedger: ChainLedgerContext? = nil
}

/// How a transition reaches the chain's ledger (SPEC §11).
struct ChainLedgerContext: Sendable {
    /// `chain.wallet_timeout`: an accept whose debit is not answered within
    /// it is refused `gateway_unavailable`, and the offer stands.
    var timeout: Duration
    /// Whether the site's link to the chain is up: an accept is refused at once while it is not.
    var reachable: Bool
}
