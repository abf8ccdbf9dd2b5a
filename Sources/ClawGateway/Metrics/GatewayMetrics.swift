import CoreMetrics

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

    /// HTTP requests by route and status.
    static func httpRequest(route: String, status: Int) {
        Counter(label: "claw_http_requests_total", dimensions: [("route", route), ("status", String(status))]).increment()
    }
}
