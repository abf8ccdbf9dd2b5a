/// The state a machine is in, as shown in snapshots, events and the read API (SPEC §3).
public enum MachineStatus: String, Sendable, Codable, CaseIterable {
    case idle
    case offered
    case playing
    case awaitingResult = "awaiting_result"
    case offline
}

/// The retained snapshot on `claw/<m>/queue` (SPEC §4).
public struct QueueSnapshot: Sendable, Equatable, Codable {
    public var machine: String
    /// Increases with every change; durable across gateway restarts.
    public var seq: Int64
    public var state: MachineStatus
    public var online: Bool
    /// Set by an operator: the queue is kept and no turn is offered.
    public var paused: Bool
    /// The player offered the turn or playing; null otherwise.
    public var player: CurrentPlayer?
    public var waiting: [WaitingPlayer]
    /// The number waiting (the length of ``waiting``).
    public var length: Int

    public init(
        machine: String, seq: Int64, state: MachineStatus, online: Bool, paused: Bool,
        player: CurrentPlayer?, waiting: [WaitingPlayer]
    ) {
        self.machine = machine
        self.seq = seq
        self.state = state
        self.online = online
        self.paused = paused
        self.player = player
        self.waiting = waiting
        self.length = waiting.count
    }

    private enum CodingKeys: String, CodingKey {
        case machine, seq, state, online, paused, player, waiting, length
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(machine, forKey: .machine)
        try container.encode(seq, forKey: .seq)
        try container.encode(state, forKey: .state)
        try container.encode(online, forKey: .online)
        try container.encode(paused, forKey: .paused)
        // `player` is always present: null says nobody holds the machine.
        try container.encode(player, forKey: .player)
        try container.encode(waiting, forKey: .waiting)
        try container.encode(length, forKey: .length)
    }
}

/// The player who holds the machine: offered the turn, playing, or awaiting the result.
public struct CurrentPlayer: Sendable, Equatable, Codable {
    public var accid: String
    public var nick: String
    public var session: String
    /// When the current timer (accept, play or result) runs out, ISO 8601 UTC.
    public var deadline: String?

    public init(accid: String, nick: String, session: String, deadline: String?) {
        self.accid = accid
        self.nick = nick
        self.session = session
        self.deadline = deadline
    }
}

/// A player in the waiting list.
public struct WaitingPlayer: Sendable, Equatable, Codable {
    public var accid: String
    public var nick: String

    public init(accid: String, nick: String) {
        self.accid = accid
        self.nick = nick
    }
}
