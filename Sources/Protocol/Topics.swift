/// The MQTT topic names of SPEC §4, all in one place.
///
/// Every machine topic is `<prefix>/<machine>/<kind>`; the gateway's own
/// presence is `<prefix>/gateway/state`, which is why `gateway` is not a
/// machine id.
public struct Topics: Sendable, Equatable {
    public let prefix: String

    /// The machine id that can never be configured: its topics are the gateway's.
    public static let reservedMachineID = "gateway"
    public static let defaultPrefix = "claw"

    public init(prefix: String = Topics.defaultPrefix) {
        self.prefix = prefix
    }

    public func machine(_ machine: String, _ kind: MachineTopic) -> String {
        "\(prefix)/\(machine)/\(kind.rawValue)"
    }

    /// Retained `online`/`offline` presence of the gateway.
    public var gatewayState: String { "\(prefix)/\(Self.reservedMachineID)/state" }

    /// The gateway's ``GatewayStatsReport``, every `gateway.stats_interval`.
    public var gatewayStats: String { "\(prefix)/\(Self.reservedMachineID)/stats" }

    /// The gateway's own events (``ConfigReloaded``), like a machine's `events`.
    public var gatewayEvents: String { "\(prefix)/\(Self.reservedMachineID)/events" }

    /// The machine and kind of a topic under this prefix, or nil.
    public func parse(_ topic: String) -> (machine: String, kind: MachineTopic)? {
        var parts = topic.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        // The one kind of two levels: `result/ack`.
        if parts.count >= 4, parts.suffix(2).joined(separator: "/") == MachineTopic.resultAck.rawValue {
            parts.removeLast()
            parts[parts.count - 1] = MachineTopic.resultAck.rawValue
        }
        guard parts.count >= 3, let kind = MachineTopic(rawValue: parts[parts.count - 1]) else { return nil }
        let head = parts[0..<(parts.count - 2)].joined(separator: "/")
        guard head == prefix else { return nil }
        return (parts[parts.count - 2], kind)
    }
}

/// The per-machine topics.
public enum MachineTopic: String, Sendable, CaseIterable {
    /// Gateway → PC: moves, grabs, add-coins. QoS 0, never retained.
    case control
    /// Gateway → camera switch: camera changes. QoS 0, never retained.
    case camera
    /// PC → gateway: command 5 acknowledging a gateway serial.
    case ack
    /// PC → gateway: command 4, numbered by the PC (`serial`), repeated until confirmed.
    case result
    /// Gateway → PC, QoS 1, never retained: ``ResultConfirmation``, once
    /// the result with that serial is on disk (SPEC §4).
    case resultAck = "result/ack"
    /// PC → gateway, retained, will `offline`: ``Presence``.
    case state
    /// PC → gateway, QoS 1, never retained: a fault its board reported,
    /// ``MachineFaultReport`` (SPEC §12).
    case fault
    /// Gateway, retained: the ``QueueSnapshot``.
    case queue
    /// Gateway: one ``GameEvent`` per message.
    case events
    /// Gateway, every `gateway.stats_interval`, not retained, expiring after
    /// one interval: the ``MachineStatsReport``.
    case stats
}

/// The payload of the retained `state` topics.
public enum Presence: String, Sendable {
    case online
    case offline
}
