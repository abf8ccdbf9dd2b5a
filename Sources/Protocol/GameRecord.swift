/// A game as SPEC §5 shows it (`/v1/games`, the chain's records, the
/// recorder's history).
public struct GameRecord: Sendable, Equatable, Codable {
    public var id: String
    public var machine: String
    public var player: String
    /// The IM provider of `player`'s account: the player is the pair.
    public var provider: String
    public var nick: String
    public var outcome: GameOutcome?
    public var offeredAt: String
    public var startedAt: String?
    public var endedAt: String?
    public var commands: Int
    /// The game's clips (SPEC §14), once cut; nil when evidence is not kept.
    public var evidence: [EvidenceClip]?
    /// The cameras without a clip of the game, and why.
    public var evidenceMissing: [EvidenceGap]?
    /// The prize a won game made (SPEC §15), as it was made: what a chain's
    /// records carry to the recorder. Nil for a game that made none.
    public var prize: WonPrize?
    /// An operator's decision over the machine's word (SPEC §16): the
    /// record keeps `outcome` as the machine said and gains this. Nil for a
    /// game never corrected.
    public var corrected: GameCorrection?
    /// Its coin was the full-power grab (`guarantee_after`): for the
    /// fairness figures (SPEC §16). Written only when true.
    public var strong = false

    /// The outcome the figures count: the operator's when corrected.
    public var countedOutcome: GameOutcome? { corrected?.outcome ?? outcome }

    public init(
        id: String, machine: String, player: String, provider: String, nick: String, outcome: GameOutcome?, offeredAt: String,
        startedAt: String?, endedAt: String?, commands: Int
    ) {
        self.id = id
        self.machine = machine
        self.player = player
        self.provider = provider
        self.nick = nick
        self.outcome = outcome
        self.offeredAt = offeredAt
        self.startedAt = startedAt
        self.endedAt = endedAt
        self.commands = commands
    }

    enum CodingKeys: String, CodingKey {
        case id, machine, player, provider, nick, outcome
        case offeredAt = "offered_at"
        case startedAt = "started_at"
        case endedAt = "ended_at"
        case commands, evidence, prize, corrected, strong
        case evidenceMissing = "evidence_missing"
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        machine = try container.decode(String.self, forKey: .machine)
        player = try container.decode(String.self, forKey: .player)
        provider = try container.decode(String.self, forKey: .provider)
        nick = try container.decode(String.self, forKey: .nick)
        outcome = try container.decodeIfPresent(GameOutcome.self, forKey: .outcome)
        offeredAt = try container.decode(String.self, forKey: .offeredAt)
        startedAt = try container.decodeIfPresent(String.self, forKey: .startedAt)
        endedAt = try container.decodeIfPresent(String.self, forKey: .endedAt)
        commands = try container.decode(Int.self, forKey: .commands)
        evidence = try container.decodeIfPresent([EvidenceClip].self, forKey: .evidence)
        evidenceMissing = try container.decodeIfPresent([EvidenceGap].self, forKey: .evidenceMissing)
        prize = try container.decodeIfPresent(WonPrize.self, forKey: .prize)
        corrected = try container.decodeIfPresent(GameCorrection.self, forKey: .corrected)
        // A record of a gateway from before the fairness figures: not strong.
        strong = try container.decodeIfPresent(Bool.self, forKey: .strong) ?? false
    }

    /// Every field of SPEC §5's shape, `null` where there is no value yet: the
    /// synthesized encoding leaves nil fields out, which a client reading
    /// `game.outcome === null` takes for something else.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(machine, forKey: .machine)
        try container.encode(player, forKey: .player)
        try container.encode(provider, forKey: .provider)
        try container.encode(nick, forKey: .nick)
        try container.encode(outcome, forKey: .outcome)
        try container.encode(offeredAt, forKey: .offeredAt)
        try container.encode(startedAt, forKey: .startedAt)
        try container.encode(endedAt, forKey: .endedAt)
        try container.encode(commands, forKey: .commands)
        try container.encodeIfPresent(evidence, forKey: .evidence)
        try container.encodeIfPresent(evidenceMissing, forKey: .evidenceMissing)
        try container.encodeIfPresent(prize, forKey: .prize)
        try container.encodeIfPresent(corrected, forKey: .corrected)
        if strong { try container.encode(true, forKey: .strong) }
    }
}

/// A game's result as an operator corrected it (SPEC §16): the outcome
/// decided, by whom, when (RFC 3339) and why.
public struct GameCorrection: Sendable, Equatable, Codable {
    public var outcome: GameOutcome
    public var by: String
    public var at: String
    public var reason: String

    public init(outcome: GameOutcome, by: String, at: String, reason: String) {
        self.outcome = outcome
        self.by = by
        self.at = at
        self.reason = reason
    }
}

/// A prize as its won game made it (SPEC §15): its own id (the one a
/// player ships or exchanges by), the machine's prize it is one of, and
/// what that prize was worth then.
public struct WonPrize: Sendable, Equatable, Codable {
    /// The prize's own id, unique in the chain.
    public var id: String
    /// The machine's prize (`machines[].prize.id`), e.g. `pikachu-30cm`.
    public var prize: String
    public var name: String
    /// What one costs the operator, in credits (for the figures).
    public var cost: Int64
    /// The credits a player may take instead; 0: not offered.
    public var exchange: Int64
    public var wonAt: String
    /// Won when the machine's stock was already 0.
    public var oversold: Bool

    public init(id: String, prize: String, name: String, cost: Int64, exchange: Int64, wonAt: String, oversold: Bool) {
        self.id = id
        self.prize = prize
        self.name = name
        self.cost = cost
        self.exchange = exchange
        self.wonAt = wonAt
        self.oversold = oversold
    }

    enum CodingKeys: String, CodingKey {
        case id, prize, name, cost, exchange, oversold
        case wonAt = "won_at"
    }
}

/// One camera's clip of a game (SPEC §14).
public struct EvidenceClip: Sendable, Equatable, Codable {
    public var camera: String
    public var path: String
    public var durationSeconds: Double

    public init(camera: String, path: String, durationSeconds: Double) {
        self.camera = camera
        self.path = path
        self.durationSeconds = durationSeconds
    }

    enum CodingKeys: String, CodingKey {
        case camera, path
        case durationSeconds = "duration_s"
    }
}

/// A camera without a clip of a game, and why (its stream was down, …).
public struct EvidenceGap: Sendable, Equatable, Codable {
    public var camera: String
    public var reason: String

    public init(camera: String, reason: String) {
        self.camera = camera
        self.reason = reason
    }
}
