import CoreMetrics
import Protocol

/// The names and labels of everything the gateway counts, in one place
/// (exported on `/metrics`, see docs/OPERATIONS.md).
enum GatewayMetrics {
    /// Notifications received, by provider and what became of them.
    static func notification(provider: String, result: String) {
        Counter(label: "claw_notifications_total", dimensions: [("provider", provider), ("result", result)]).increment()
    }

    /// Replies to players, by provider and result (`sent`, `failed`, `overflow`, `logged`).
    static func reply(provider: String, result: String) {
        Counter(label: "claw_im_replies_total", dimensions: [("provider", provider), ("result", result)]).increment()
    }

    /// What a machine's events say, counted: commands forwarded and dropped,
    /// ack latency and timeouts, games by outcome.
    static func record(_ event: GameEvent) {
        switch event.type {
        case .command:
            Counter(label: "claw_commands_forwarded_total", dimensions: [("machine", event.machine)]).increment()
        case .dropped:
            Counter(
                label: "claw_commands_dropped_total", dimensions: [("machine", event.machine), ("reason", event.reason ?? "unknown")]).increment()
        case .ack:
            if let latency = event.latencyMs {
                CoreMetrics.Timer(label: "claw_ack_latency_seconds", preferredDisplayUnit: .seconds)
                    .recordNanoseconds(Int64(latency * 1_000_000))
            }
        case .ackTimeout:
            Counter(label: "claw_ack_timeouts_total", dimensions: [("machine", event.machine)]).increment()
        case .gameEnded:
            Counter(label: "claw_games_total", dimensions: [("outcome", event.outcome?.rawValue ?? "unknown")]).increment()
        default:
            break
        }
    }

    /// HTTP requests by route and status.
    static func httpRequest(route: String, status: Int) {
        Counter(label: "claw_http_requests_total", dimensions: [("route", route), ("status", String(status))]).increment()
    }
}
