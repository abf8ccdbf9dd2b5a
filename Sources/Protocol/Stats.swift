/// Ack latency over one statistics interval, in milliseconds: zeros when
/// no ack came.
public struct LatencySummary: Sendable, Equatable, Codable {
    public var p50: Double
    public var p99: Double
    public var max: Double

    public init(p50: Double, p99: Double, max: Double) {
        self.p50 = p50
        self.p99 = p99
        self.max = max
    }

    public static let zero = LatencySummary(p50: 0, p99: 0, max: 0)
}

/// One machine's figures for the last `gateway.stats_interval`, published
/// on `claw/<m>/stats` (SPEC §4). Idle machines report zeros.
public struct MachineStatsReport: Sendable, Equatable, Codable {
    public var machine: String
    /// When the interval ended, ISO 8601 UTC.
    public var ts: String
    public var intervalSeconds: Double
    public var online: Bool
    public var state: MachineStatus
    public var queueLength: Int
    /// Messages published to the machine (moves, grabs, camera switches,
    /// coins) in the interval.
    public var commands: Int
    /// Player requests for the machine refused in the interval, by error code.
    public var dropped: [String: Int]
    public var acks: Int
    public var ackTimeouts: Int
    public var ackLatencyMs: LatencySummary
    /// Since local midnight of the gateway's host: games started, games won.
    public var gamesToday: Int
    public var winsToday: Int

    enum CodingKeys: String, CodingKey {
        case machine, ts, online, state, commands, dropped, acks
        case intervalSeconds = "interval_s"
        case queueLength = "queue_length"
        case ackTimeouts = "ack_timeouts"
        case ackLatencyMs = "ack_latency_ms"
        case gamesToday = "games_today"
        case winsToday = "wins_today"
    }

    public init(
        machine: String, ts: String, intervalSeconds: Double, online: Bool, state: MachineStatus, queueLength: Int,
        commands: Int, dropped: [String: Int], acks: Int, ackTimeouts: Int, ackLatencyMs: LatencySummary,
        gamesToday: Int, winsToday: Int
    ) {
        self.machine = machine
        self.ts = ts
        self.intervalSeconds = intervalSeconds
        self.online = online
        self.state = state
        self.queueLength = queueLength
        self.commands = commands
        self.dropped = dropped
        self.acks = acks
        self.ackTimeouts = ackTimeouts
        self.ackLatencyMs = ackLatencyMs
        self.gamesToday = gamesToday
        self.winsToday = winsToday
    }

    /// The JSON of SPEC §4, keys in its order, `dropped` sorted by code.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(320)
        out.append(contentsOf: #"{"machine":"#.utf8)
        JSONText.appendString(machine, to: &out)
        JSONText.appendField("ts", string: ts, to: &out)
        JSONText.appendField("interval_s", number: intervalSeconds, to: &out)
        JSONText.appendField("online", bool: online, to: &out)
        JSONText.appendField("state", string: state.rawValue, to: &out)
        JSONText.appendField("queue_length", integer: Int64(queueLength), to: &out)
        JSONText.appendField("commands", integer: Int64(commands), to: &out)
        out.append(contentsOf: #","dropped":"#.utf8)
        JSONText.appendCounts(dropped, to: &out)
        JSONText.appendField("acks", integer: Int64(acks), to: &out)
        JSONText.appendField("ack_timeouts", integer: Int64(ackTimeouts), to: &out)
        out.append(contentsOf: #","ack_latency_ms":{"p50":"#.utf8)
        JSONText.appendNumber(ackLatencyMs.p50, to: &out)
        JSONText.appendField("p99", number: ackLatencyMs.p99, to: &out)
        JSONText.appendField("max", number: ackLatencyMs.max, to: &out)
        out.append(UInt8(ascii: "}"))
        JSONText.appendField("games_today", integer: Int64(gamesToday), to: &out)
        JSONText.appendField("wins_today", integer: Int64(winsToday), to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}

/// The gateway's own figures for the last `gateway.stats_interval`,
/// published on `claw/gateway/stats` (SPEC §4).
public struct GatewayStatsReport: Sendable, Equatable, Codable {
    public var gateway: String
    public var ts: String
    public var intervalSeconds: Double
    public var uptimeSeconds: Int
    /// Notifications received in the interval, by provider (`netease`,
    /// `generic`), then by what became of them (`forwarded`, `queued`, an
    /// error code, `unauthorized`, …). Both providers are always present.
    public var notifications: [String: [String: Int]]
    /// Replies to players in the interval by result: `sent` and `failed`
    /// always, `overflow`, `expired` and `logged` when they happened.
    public var replies: [String: Int]
    /// Connections to the broker made in the interval after the first one.
    public var mqttReconnects: Int

    enum CodingKeys: String, CodingKey {
        case gateway, ts, notifications, replies
        case intervalSeconds = "interval_s"
        case uptimeSeconds = "uptime_s"
        case mqttReconnects = "mqtt_reconnects"
    }

    public init(
        gateway: String, ts: String, intervalSeconds: Double, uptimeSeconds: Int, notifications: [String: [String: Int]],
        replies: [String: Int], mqttReconnects: Int
    ) {
        self.gateway = gateway
        self.ts = ts
        self.intervalSeconds = intervalSeconds
        self.uptimeSeconds = uptimeSeconds
        self.notifications = notifications
        self.replies = replies
        self.mqttReconnects = mqttReconnects
    }

    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        out.append(contentsOf: #"{"gateway":"#.utf8)
        JSONText.appendString(gateway, to: &out)
        JSONText.appendField("ts", string: ts, to: &out)
        JSONText.appendField("interval_s", number: intervalSeconds, to: &out)
        JSONText.appendField("uptime_s", integer: Int64(uptimeSeconds), to: &out)
        out.append(contentsOf: #","notifications":{"#.utf8)
        for (index, provider) in notifications.keys.sorted().enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONText.appendString(provider, to: &out)
            out.append(UInt8(ascii: ":"))
            JSONText.appendCounts(notifications[provider] ?? [:], to: &out)
        }
        out.append(UInt8(ascii: "}"))
        out.append(contentsOf: #","replies":"#.utf8)
        JSONText.appendCounts(replies, to: &out)
        JSONText.appendField("mqtt_reconnects", integer: Int64(mqttReconnects), to: &out)
        out.append(UInt8(ascii: "}"))
        return out
    }
}

extension JSONText {
    /// `{"a":1,"b":2}`, keys sorted: the same counts always give the same bytes.
    static func appendCounts(_ counts: [String: Int], to out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        for (index, key) in counts.keys.sorted().enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            JSONText.appendString(key, to: &out)
            out.append(UInt8(ascii: ":"))
            JSONText.appendInteger(Int64(counts[key] ?? 0), to: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    /// A non-negative figure with at most three decimals, as `0.8`, `12`,
    /// `2.125`: enough for milliseconds to the microsecond. Anything not
    /// finite or negative is written 0.
    static func appendNumber(_ value: Double, to out: inout [UInt8]) {
        guard value.isFinite, value > 0 else {
            out.append(UInt8(ascii: "0"))
            return
        }
        let thousandths = Int64(min(value * 1000, 9e15).rounded())
        appendInteger(thousandths / 1000, to: &out)
        var fraction = thousandths % 1000
        guard fraction > 0 else { return }
        out.append(UInt8(ascii: "."))
        var divisor: Int64 = 100
        while fraction > 0 {
            out.append(UInt8(ascii: "0") + UInt8(fraction / divisor))
            fraction %= divisor
            divisor /= 10
        }
    }
}
