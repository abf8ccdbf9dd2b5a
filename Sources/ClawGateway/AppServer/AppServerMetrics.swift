import Prometheus

/// The app server's and the chatroom mirror's families on `/metrics`, every
/// series made with the first use of any, so that a scrape shows them at 0
/// before anything happened.
enum AppServerMetrics {
    static let touristsCreated = tourists("created")
    static let touristsReturning = tourists("returning")
    static let touristsRateLimited = tourists("rate_limited")
    static let touristsFailed = tourists("failed")
    /// A sid that is no live tourist's (SPEC §8: counted per address).
    static let touristsBadSid = tourists("bad_sid")

    static let touristsExpired = GatewayMetrics.registry.makeCounter(
        descriptor: MetricNameDescriptor(
            namespace: "claw", metricName: "app_server_tourists_expired", unitName: "total",
            helpText: "Expired tourists deleted, their IM token refreshed first so that the old one stops working."))
    static let touristsRefreshFailed = GatewayMetrics.registry.makeCounter(
        descriptor: MetricNameDescriptor(
            namespace: "claw", metricName: "app_server_token_refreshes_failed", unitName: "total",
            helpText: "Expired tourists whose IM token NetEase did not refresh: kept, and tried again at the next sweep."))

    static let onlineCountsOK = onlineCount("ok")
    static let onlineCountsFailed = onlineCount("failed")

    /// Calls of the mirror by NetEase action and result.
    static let offerOK = mirrorCall("queueOffer", "ok")
    static let offerFailed = mirrorCall("queueOffer", "failed")
    static let pollOK = mirrorCall("queuePoll", "ok")
    static let pollFailed = mirrorCall("queuePoll", "failed")
    static let listOK = mirrorCall("queueList", "ok")
    static let listFailed = mirrorCall("queueList", "failed")

    static let repairs = GatewayMetrics.registry.makeCounter(
        descriptor: MetricNameDescriptor(
            namespace: "claw", metricName: "chatroom_mirror_repairs", unitName: "total",
            helpText: "Chatroom queues read back with queueList and repaired: at start and after a failed call."))
    static let skipped = GatewayMetrics.registry.makeCounter(
        descriptor: MetricNameDescriptor(
            namespace: "claw", metricName: "chatroom_mirror_skipped", unitName: "total",
            helpText: "Chatroom queue keys NetEase refused (a 4xx code): left out of the chatroom queue while their player waits, the rest mirrored."))
    static let coalesced = GatewayMetrics.registry.makeCounter(
        descriptor: MetricNameDescriptor(
            namespace: "claw", metricName: "chatroom_mirror_coalesced", unitName: "total",
            helpText: "Queue snapshots replaced by a newer one of the same machine before the mirror got to them."))

    /// Makes every series; the wiring calls it once.
    static func prepare() {
        _ = [touristsCreated, touristsReturning, touristsRateLimited, touristsFailed, touristsBadSid, onlineCountsOK, onlineCountsFailed]
        _ = [touristsExpired, touristsRefreshFailed]
        _ = [offerOK, offerFailed, pollOK, pollFailed, listOK, listFailed, repairs, coalesced, skipped]
    }

    private static func tourists(_ result: String) -> Counter {
        GatewayMetrics.registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "claw", metricName: "app_server_tourists", unitName: "total",
                helpText: "Calls of the app server's tourist route, by result (created, returning, rate_limited, failed), and sids refused on any route (bad_sid)."),
            labels: [("result", result)])
    }

    private static func onlineCount(_ result: String) -> Counter {
        GatewayMetrics.registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "claw", metricName: "app_server_online_counts", unitName: "total",
                helpText: "Chatroom online counts asked of chatroom/get.action for the room list, by result."),
            labels: [("result", result)])
    }

    private static func mirrorCall(_ call: String, _ result: String) -> Counter {
        GatewayMetrics.registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "claw", metricName: "chatroom_mirror_calls", unitName: "total",
                helpText: "Calls of the chatroom queue mirror to NetEase's server API, by call and result."),
            labels: [("call", call), ("result", result)])
    }
}
