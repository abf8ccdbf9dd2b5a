/// The state a machine is in, as shown in snapshots, events and the read API (SPEC §3).
public enum MachineStatus: String, Sendable, Codable, CaseIterable {
    case idle
    case offered
    case playing
    case awaitingResult = "awaiting_result"
    case offline
    /// Out of play (SPEC §12): its board reported a fault, or an operator
    /// took it out; the queue is kept, no turn is offered.
    case maintenance
    /// Its stock of prizes is counted and at 0 (SPEC §15): the queue is
    /// kept and may be joined, no turn is offered until a restock.
    case outOfStock = "out_of_stock"
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
    /// The PC missed `game.suspect_after` acks in a row: no new turn is
    /// offered until an ack or a fresh `online` from it.
    public var suspect: Bool
    /// The player offered the turn or playing; null otherwise.
    public var player: CurrentPlayer?
    public var waiting: [WaitingPlayer]
    /// The number waiting (the length of ``waiting``).
    public var length: Int
    /// In maintenance because its board reported this fault (SPEC §12);
    /// absent otherwise.
    public var fault: MachineFault?
    /// Taken out of play by an operator, saying why (SPEC §12); absent
    /// otherwise. Present while the game in progress finishes, before the
    /// state says `maintenance`.
    public var reason: String?
    /// The prizes left in the machine (SPEC §15), when its stock is
    /// counted; absent otherwise.
    public var stock: Int64?
    /// Games left before the next full-power grab (SPEC §16), when the
    /// machine has a `guarantee_after`; absent otherwise. Shown to players:
    /// the odds are not hidden. 0 from the strong game on until a win.
    public var playsUntilGuarantee: Int?

    public init(
        machine: String, seq: Int64, state: MachineStatus, online: Bool, paused: Bool, suspect: Bool = false,
        player: CurrentPlayer?, waiting: [WaitingPlayer], fault: MachineFault? = nil, reason: String? = nil, stock: Int64? = nil,
        playsUntilGuarantee: Int? = nil
    ) {
        self.machine = machine
        self.seq = seq
        self.state = state
        self.online = online
        self.paused = paused
        self.suspect = suspect
        self.player = player
        self.waiting = waiting
        self.length = waiting.count
        self.fault = fault
        self.reason = reason
        self.stock = stock
        self.playsUntilGuarantee = playsUntilGuarantee
    }

    private enum CodingKeys: String, CodingKey {
        case machine, seq, state, online, paused, suspect, player, waiting, length, fault, reason, stock
        case playsUntilGuarantee = "plays_until_guarantee"
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(machine, forKey: .machine)
        try container.encode(seq, forKey: .seq)
        try container.encode(state, forKey: .state)
        try container.encode(online, forKey: .online)
        try container.encode(paused, forKey: .paused)
        try container.encode(suspect, forKey: .suspect)
        // `player` is always present: null says nobody holds the machine.
        try container.encode(player, forKey: .player)
        try container.encode(waiting, forKey: .waiting)
        try container.encode(length, forKey: .length)
        // Only while they apply: a machine in play shows neither.
        try container.encodeIfPresent(fault, forKey: .fault)
        try container.encodeIfPresent(reason, forKey: .reason)
        try container.encodeIfPresent(stock, forKey: .stock)
        try container.encodeIfPresent(playsUntilGuarantee, forKey: .playsUntilGuarantee)
    }
}

/// The player who holds the machine: offered the turn, playing, or awaiting the result.
public struct CurrentPlayer: Sendable, Equatable, Codable {
    public var accid: String
    /// The IM provider of the account (`netease`, `generic`): a player is
    /// the pair, so the same account on two providers is two players.
    public var provider: String
    public var nick: String
    public var session: String
    /// When the current timer (accept, play or result) runs out, ISO 8601 UTC.
    public var deadline: String?
    /// The turn is a continue (SPEC §3): offered first to the player whose
    /// game just ended. Written only when true.
    public var isContinue: Bool

    enum CodingKeys: String, CodingKey {
        case accid, provider, nick, session, deadline
        case isContinue = "continue"
    }

    public init(accid: String, provider: String, nick: String, session: String, deadline: String?, isContinue: Bool = false) {
        self.accid = accid
        self.provider = provider
        self.nick = nick
        self.session = session
        self.deadline = deadline
        self.isContinue = isContinue
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        accid = try container.decode(String.self, forKey: .accid)
        provider = try container.decode(String.self, forKey: .provider)
        nick = try container.decode(String.self, forKey: .nick)
        session = try container.decode(String.self, forKey: .session)
        deadline = try container.decodeIfPresent(String.self, forKey: .deadline)
        isContinue = try container.decodeIfPresent(Bool.self, forKey: .isContinue) ?? false
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(accid, forKey: .accid)
        try container.encode(provider, forKey: .provider)
        try container.encode(nick, forKey: .nick)
        try container.encode(session, forKey: .session)
        try container.encodeIfPresent(deadline, forKey: .deadline)
        if isContinue { try container.encode(true, forKey: .isContinue) }
    }
}

/// A player in the waiting list.
public struct WaitingPlayer: Sendable, Equatable, Codable {
    public var accid: String
    /// The IM provider of the account, as in ``CurrentPlayer/provider``.
    public var provider: String
    public var nick: String

    public init(accid: String, provider: String, nick: String) {
        self.accid = accid
        self.provider = provider
        self.nick = nick
    }
}

extension QueueSnapshot {
    /// The snapshot as JSON, keys in the order of SPEC §4 (`player` always
    /// present, null when nobody holds the machine). Written by hand, like
    /// events: the same state always gives the same bytes.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(160 + waiting.count * 40)
        out.append(contentsOf: #"{"machine":"#.utf8)
        JSONText.appendString(machine, to: &out)
        JSONText.appendField("seq", integer: seq, to: &out)
        JSONText.appendField("state", string: state.rawValue, to: &out)
        JSONText.appendField("online", bool: online, to: &out)
        JSONText.appendField("paused", bool: paused, to: &out)
        JSONText.appendField("suspect", bool: suspect, to: &out)
        out.append(contentsOf: #","player":"#.utf8)
        if let player {
            out.append(contentsOf: #"{"accid":"#.utf8)
            JSONText.appendString(player.accid, to: &out)
            JSONText.appendField("provider", string: player.provider, to: &out)
            JSONText.appendField("nick", string: player.nick, to: &out)
            JSONText.appendField("session", string: player.session, to: &out)
            if let deadline = player.deadline { JSONText.appendField("deadline", string: deadline, to: &out) }
            if player.isContinue { JSONText.appendField("continue", bool: true, to: &out) }
            out.append(UInt8(ascii: "}"))
        } else {
            out.append(contentsOf: "null".utf8)
        }
        out.append(contentsOf: #","waiting":["#.utf8)
        for (index, entry) in waiting.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: #"{"accid":"#.utf8)
            JSONText.appendString(entry.accid, to: &out)
            JSONText.appendField("provider", string: entry.provider, to: &out)
            JSONText.appendField("nick", string: entry.nick, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        out.append(UInt8(ascii: "]"))
        JSONText.appendField("length", integer: Int64(length), to: &out)
        // Only while they apply: a machine in play shows neither.
        if let fault {
            out.append(contentsOf: #","fault":{"code":"#.utf8)
            JSONText.appendString(fault.code, to: &out)
            JSONText.appendField("text", string: fault.text, to: &out)
            JSONText.appendField("at", string: fault.at, to: &out)
            out.append(UInt8(ascii: "}"))
        }
        if let reason { JSONText.appendField("reason", string: reason, to: &out) }
        if let stock { JSONText.appendField("stock", integer: stock, to: &out) }
        out.append(UInt8(ascii: "}"))
        return out
    }
}

extension JSONText {
    static func appendField(_ key: String, bool: Bool, to out: inout [UInt8]) {
        out.append(UInt8(ascii: ","))
        appendString(key, to: &out)
        out.append(UInt8(ascii: ":"))
        out.append(contentsOf: (bool ? "true" : "false").utf8)
    }
}
