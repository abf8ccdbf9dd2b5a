import CoreMetrics
import Protocol
import Synchronization

/// The names and labels of everything the gateway counts, in one place
/// (exported on `/metrics`, see docs/OPERATIONS.md). Handles are made once
/// and kept: a lookup in the metrics factory per request costs a lock and
/// dictionaries in the registry.
enum GatewayMetrics {
    /// Notifications received, by provider and what became of them.
    static func notification(provider: String, result: String) {
        counter("claw_notifications_total", [("provider", provider), ("result", result)]).increment()
    }

    /// Replies to players, by provider and result (`sent`, `failed`, `overflow`, `logged`).
    static func reply(provider: String, result: String) {
        counter("claw_im_replies_total", [("provider", provider), ("result", result)]).increment()
    }

    /// HTTP requests by route and status.
    static func httpRequest(route: String, status: Int) {
        counter("claw_http_requests_total", [("route", route), ("status", String(status))]).increment()
    }

    private struct Key: Hashable {
        var label: String
        var dimensions: [String]
    }

    private static let counters = Mutex<[Key: Counter]>([:])

    /// The counter with this label and these dimensions, made on first use.
    private static func counter(_ label: String, _ dimensions: [(String, String)]) -> Counter {
        let key = Key(label: label, dimensions: dimensions.flatMap { [$0.0, $0.1] })
        return counters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = Counter(label: label, dimensions: dimensions)
            counters[key] = counter
            return counter
        }
    }
}
