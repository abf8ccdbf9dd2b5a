/// The gateway's event `config_reloaded` on `claw/gateway/events` (SPEC §13):
/// a reload of `gateway.yaml` was applied, and what it changed.
public struct ConfigReloaded: Codable, Sendable, Equatable {
    public var type = "config_reloaded"
    /// Of the gateway's events; increases within one run.
    public var seq: Int64
    public var ts: String
    /// Machines that started.
    public var added: [String]
    /// Machines taken out: each finishes its game in progress, then is gone.
    public var removed: [String]
    /// Machines whose config or game settings changed.
    public var changed: [String]
    /// Keys that changed in the file but apply only at the next start.
    public var needsRestart: [String]
    /// Machines the file puts back while they still finish the game of
    /// their removal: not back until a reload after they are gone.
    public var stillLeaving: [String]

    public init(
        seq: Int64, ts: String, added: [String], removed: [String], changed: [String], needsRestart: [String],
        stillLeaving: [String]
    ) {
        self.seq = seq
        self.ts = ts
        self.added = added
        self.removed = removed
        self.changed = changed
        self.needsRestart = needsRestart
        self.stillLeaving = stillLeaving
    }

    enum CodingKeys: String, CodingKey {
        case type, seq, ts, added, removed, changed
        case needsRestart = "needs_restart"
        case stillLeaving = "still_leaving"
    }
}
