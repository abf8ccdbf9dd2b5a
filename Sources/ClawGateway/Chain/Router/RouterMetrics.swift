import Prometheus
import Synchronization

/// The router's series on `/metrics`, in the process-wide registry
/// (``GatewayMetrics/registry``), every one with its HELP and, where its
/// labels are known in advance, at 0 from the first scrape. Sites come and
/// go with their directories, so `routed` has a series from a site's first copy.
enum RouterMetrics {
    /// Why the router answered a copy without a site's receipt.
    enum Refusal: String, CaseIterable, Sendable {
        /// A bad signature, checksum or timestamp: 401.
        case unauthorized
        /// A signed body that is not what the provider sends: 400.
        case malformed
        /// `to` is nobody's: the player is told `unknown_machine`.
        case unknownMachine = "unknown_machine"
        /// `to` is claimed by two sites: answered as nobody's.
        case disputed
        /// The owner's heartbeat is 3 s old or more: the player is told `gateway_unavailable`.
        case gatewayUnavailable = "gateway_unavailable"
        /// Not published: the router is not connected to the cluster (503).
        case busUnavailable = "bus_unavailable"
        /// Published, but no receipt within `router.receipt_timeout` (503).
        case noReceipt = "no_receipt"
    }

    /// Copies the router answers itself, as a gateway does.
    enum Local: String, CaseIterable, Sendable {
        case addressCheck = "address_check"
        /// Events other than a custom notification (chat, logins, …).
        case otherEvent = "other_event"
    }

    static let copies: [String: Counter] = Dictionary(
        uniqueKeysWithValues: GatewayMetrics.providers.map { provider in
            (provider, registry.makeCounter(descriptor: family("router_copies", "total", "Copies (notifications) received by the router, by provider, verified or not."), labels: [("provider", provider)]))
        })
    static let refused: [Refusal: Counter] = Dictionary(
        uniqueKeysWithValues: Refusal.allCases.map { reason in
            (reason, registry.makeCounter(descriptor: family("router_refused", "total", "Copies the router answered without a site's receipt, by reason."), labels: [("reason", reason.rawValue)]))
        })
    static let local: [Local: Counter] = Dictionary(
        uniqueKeysWithValues: Local.allCases.map { kind in
            (kind, registry.makeCounter(descriptor: family("router_answered_locally", "total", "Copies the router answers 200 itself: the address check and events that are not players' notifications."), labels: [("event", kind.rawValue)]))
        })
    /// From a copy's arrival to its site's receipt.
    static let latency = registry.makeDurationHistogram(
        descriptor: family("router_routing_latency", "seconds", "Time from a copy's arrival at the router to its site's receipt."),
        buckets: [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500].map { .microseconds(Int64($0 * 1000)) })
    static let lateReceipts = registry.makeCounter(
        descriptor: family("router_receipts_late", "total", "Receipts for this router's copies that came after the copy was answered (late, or delivered twice): dropped."))
    static let foreignReceipts = registry.makeCounter(
        descriptor: family(
            "router_receipts_foreign", "total",
            "Receipts for one of this router's copies that came from another site than the copy went to: ignored (SPEC §9, no site speaks for another)."))
    static let vouchers = registry.makeCounter(
        descriptor: family(
            "router_vouchers", "total",
            "Vouchers attached to accepts of machines whose games cost credits (SPEC §9): the only way a site's debit is taken."))
    static let beats = registry.makeCounter(
        descriptor: family("router_beats", "total", "Beats published on the sites' inboxes."))
    static let busUp = registry.makeGauge(
        descriptor: family("router_bus_up", "", "1 when the router is connected to the chain's cluster and holds every subscription."))
    static let busConnects = Mirror(
        registry.makeCounter(descriptor: family("router_bus_connects", "total", "Connections made to the chain's cluster (the first and every reconnect).")))
    static let sites = registry.makeGauge(descriptor: family("router_sites", "", "Sites whose directory the router holds."))
    static let sitesReachable = registry.makeGauge(
        descriptor: family("router_sites_reachable", "", "Sites whose last heartbeat is less than 3 s old."))

    private static let bySite = Mutex<[String: Counter]>([:])

    /// Copies that reached `site` and came back with its receipt.
    static func routed(site: String) {
        bySite.withLock { counters in
            if let counter = counters[site] { return counter }
            let counter = registry.makeCounter(
                descriptor: family("router_routed", "total", "Copies routed to a site and answered with its receipt, by site."),
                labels: [("site", site)])
            counters[site] = counter
            return counter
        }.increment()
    }

    /// Makes every series known in advance.
    static func prepare() {
        _ = (copies, refused, local, latency, lateReceipts, foreignReceipts, vouchers, beats, busUp, busConnects, sites, sitesReachable)
    }

    /// Brings the gauges read from the router up to date: before a scrape.
    static func export(_ router: ChainRouter) {
        busUp.set(to: router.problem(needsDirectory: false) == nil ? 1 : 0)
        busConnects.sync(to: router.client.connectCount)
        let counts = router.sites.counts
        sites.set(to: Double(counts.known))
        sitesReachable.set(to: Double(counts.reachable))
    }

    private static var registry: PrometheusCollectorRegistry { GatewayMetrics.registry }

    private static func family(_ name: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "claw", metricName: name, unitName: unit, helpText: help)
    }
}
