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
        if let counter = notifications[provider]?[result] {
            counter.increment()
        } else {
            counter("claw_notifications_total", ("provider", provider), ("result", result)).increment()
        }
    }

    /// Replies to players, by provider and result (`sent`, `failed`, `overflow`, `logged`).
    static func reply(provider: String, result: String) {
        counter("claw_im_replies_total", ("provider", provider), ("result", result)).increment()
    }

    /// HTTP requests by route and status.
    static func httpRequest(route: String, status: Int) {
        counter("claw_http_requests_total", ("route", route), ("status", String(status))).increment()
    }

    /// What a notification can become: made up front, read without a lock.
    private static let notifications: [String: [String: Counter]] = {
        let results =
            ["unauthorized", "malformed", "address_check", "ignored", "duplicate", "replayed", "forwarded", "queued", "offered", "accepted", "declined", "left"]
            + ErrorCode.allCases.map(\.rawValue)
        return Dictionary(
            uniqueKeysWithValues: ["netease", "generic"].map { provider in
                (
                    provider,
                    Dictionary(
                        uniqueKeysWithValues: results.map { result in
                            (result, Counter(label: "claw_notifications_total", dimensions: [("provider", provider), ("result", result)]))
                        })
                )
            })
    }()

    private struct Key: Hashable {
        var label: String
        var first: String
        var second: String
    }

    private static let counters = Mutex<[Key: Counter]>([:])

    /// The counter with this label and these two dimensions, made on first use.
    private static func counter(_ label: String, _ first: (String, String), _ second: (String, String)) -> Counter {
        let key = Key(label: label, first: first.1, second: second.1)
        return counters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = Counter(label: label, dimensions: [first, second])
            counters[key] = counter
            return counter
        }
    }
}
