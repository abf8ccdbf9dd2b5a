import Foundation
import Prometheus
import Protocol
import Synchronization

/// Everything the gateway counts for `/metrics`, in one place: one
/// process-wide registry, every family made with its HELP, and the series
/// that can be known in advance made at start so that a scrape before the
/// first event shows them at 0 (docs/OPERATIONS.md lists the families).
///
/// Handles are made once and kept: a lookup in the registry per request
/// costs a lock and dictionaries. Notifications and replies are also
/// counted per statistics interval for `claw/gateway/stats`.
enum GatewayMetrics {
    static let registry = PrometheusCollectorRegistry()

    /// Every family: its name and its HELP (a descriptor is not Sendable,
    /// so each is made where it is used, once per series).
    enum Family {
        static var notifications: MetricNameDescriptor {
            family("notifications", "total", "IM notifications received, by provider and what became of them (forwarded, queued, an error code, unauthorized, ...).")
        }
        static var replies: MetricNameDescriptor {
            family("im_replies", "total", "Replies to players through the IM providers, by provider and result (sent, failed, coalesced, overflow, expired, logged).")
        }
        static var httpRequests: MetricNameDescriptor {
            family("http_requests", "total", "HTTP requests answered, by route and status.")
        }
        static var forwarded: MetricNameDescriptor {
            family("commands_forwarded", "total", "Player commands (move, grab, camera) forwarded to the machine.")
        }
        static var dropped: MetricNameDescriptor {
            family("commands_dropped", "total", "Player requests for the machine refused, by error code.")
        }
        static var ackTimeouts: MetricNameDescriptor {
            family("ack_timeouts", "total", "Messages to the machine that got no ack within game.ack_timeout.")
        }
        static var ackLatency: MetricNameDescriptor {
            family("ack_latency", "seconds", "Time from a message to the machine to its ack.")
        }
        static var commandsLost: MetricNameDescriptor {
            family("commands_lost", "total", "Commands decided but not published: the broker went away in between, or their game ended before the PC acked its coin.")
        }
        static var refusalsHeldBack: MetricNameDescriptor {
            family("refusals_held_back", "total", "Refusals not sent because the player had one of the same code within the last second.")
        }
        static var ignored: MetricNameDescriptor {
            family("machine_messages_ignored", "total", "Messages from the machine's PC that were ignored: retained acks or results, undecodable, unexpected, over its budget.")
        }
        static var games: MetricNameDescriptor {
            family("games", "total", "Game records closed, by machine and outcome.")
        }
        static var queueLength: MetricNameDescriptor {
            family("queue_length", "", "Players waiting in the machine's queue.")
        }
        static var online: MetricNameDescriptor {
            family("machine_online", "", "1 when the machine's PC says online.")
        }
        static var suspect: MetricNameDescriptor {
            family("machine_suspect", "", "1 when the machine missed game.suspect_after acks in a row and offers no new turn.")
        }
        static var faults: MetricNameDescriptor {
            family("machine_faults", "total", "Faults the machine's PC reported on claw/<m>/fault, by machine and the board's code.")
        }
        static var maintenance: MetricNameDescriptor {
            family("machine_maintenance", "", "1 while the machine is out of play: its board's fault, or an operator's maintenance.")
        }
        static var stock: MetricNameDescriptor {
            family("machine_stock", "", "The prizes left in the machine, once an operator set its stock (SPEC §15); 0: out of stock.")
        }
        static var mqttConnected: MetricNameDescriptor {
            family("mqtt_connected", "", "1 when the gateway is connected to the MQTT broker.")
        }
        static var mqttConnects: MetricNameDescriptor {
            family("mqtt_connects", "total", "Connections made to the MQTT broker (the first one and every reconnect).")
        }
        static var mqttOversized: MetricNameDescriptor {
            family("mqtt_messages_oversized", "total", "Messages from the broker over the 4 KiB limit, dropped unread.")
        }
        static var storageWritable: MetricNameDescriptor {
            family("storage_writable", "", "1 when storage writes succeed.")
        }
        static var copyAge: MetricNameDescriptor {
            family("copy_age", "seconds", "How old IM copies are when they reach the gateway, from the IM service's stamp (NetEase CurTime, X-Claw-Timestamp; 0 for one stamped ahead of this clock): a skewed clock shows here.")
        }
        static var commandsTooOld: MetricNameDescriptor {
            family("commands_too_old", "total", "Moves, grabs and camera switches dropped because they came more than game.command_max_age after the IM service stamped them.")
        }
        static var configReloads: MetricNameDescriptor {
            family("config_reloads", "total", "Reloads of gateway.yaml (SIGHUP, systemctl reload), by result: applied, or refused for a file with problems (the log lists them).")
        }
        static var buildInfo: MetricNameDescriptor {
            family("build_info", "", "The gateway's version, as a label; the value is always 1.")
        }

        private static func family(_ name: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
            MetricNameDescriptor(namespace: "claw", metricName: name, unitName: unit, helpText: help)
        }
    }

    static let providers = ["netease", "generic"]
    private static let notificationResults =
        ["unauthorized", "malformed", "address_check", "ignored", "duplicate", "replayed", "forwarded", "queued", "offered", "accepted",
            "declined", "left"] + ErrorCode.allCases.filter(\.isRefusal).map(\.rawValue)
    private static let replyResults = ["sent", "failed", "coalesced", "overflow", "expired", "logged"]

    // MARK: Notifications and replies

    /// Notifications received, by provider and what became of them.
    static func notification(provider: String, result: String) {
        if let tally = notifications[provider]?[result] {
            tally.increment()
        } else {
            extra.tally(Key(family: .notification, first: provider, second: result)).increment()
        }
    }

    /// Replies to players, by provider and result (`sent`, `failed`, `coalesced`, `overflow`, `expired`, `logged`).
    static func reply(provider: String, result: String) {
        if let tally = replies[provider]?[result] {
            tally.increment()
        } else {
            extra.tally(Key(family: .reply, first: provider, second: result)).increment()
        }
    }

    /// HTTP requests by route and status: each route's `200` is there from
    /// the start (``prepare(routes:)``), other statuses come with their first request.
    static func httpRequest(route: String, status: Int) {
        extra.tally(Key(family: .http, first: route, second: String(status))).increment()
    }

    /// Makes each route's `claw_http_requests_total{status="200"}` at 0, so
    /// that the first scrape lists every route (a rate over a series that
    /// appears with its first request misses that request).
    static func prepare(routes: [String]) {
        for route in Set(routes) { _ = extra.tally(Key(family: .http, first: route, second: "200")) }
    }

    /// Notifications and replies since the last call, for `claw/gateway/stats`:
    /// every provider present, results only where something happened;
    /// replies summed over providers, `sent` and `failed` always present.
    static func takeInterval() -> (notifications: [String: [String: Int]], replies: [String: Int]) {
        var byProvider = Dictionary(uniqueKeysWithValues: providers.map { ($0, [String: Int]()) })
        var replyCounts = ["sent": 0, "failed": 0]
        for (provider, results) in notifications {
            for (result, tally) in results {
                let count = tally.take()
                if count > 0 { byProvider[provider, default: [:]][result] = count }
            }
        }
        for (_, results) in replies {
            for (result, tally) in results {
                let count = tally.take()
                if count > 0 { replyCounts[result, default: 0] += count }
            }
        }
        for (key, tally) in extra.all() where key.family != .http {
            let count = tally.take()
            guard count > 0 else { continue }
            switch key.family {
            case .notification: byProvider[key.first, default: [:]][key.second, default: 0] += count
            case .reply: replyCounts[key.second, default: 0] += count
            case .http: break
            }
        }
        return (byProvider, replyCounts)
    }

    /// Replies that failed since the process started, all providers.
    static var repliesFailed: Int {
        replies.values.reduce(0) { $0 + ($1["failed"]?.total ?? 0) }
    }

    private static let notifications: [String: [String: Tally]] = table(
        Family.notifications, ("provider", providers), ("result", notificationResults))
    private static let replies: [String: [String: Tally]] = table(Family.replies, ("provider", providers), ("result", replyResults))

    private static func table(
        _ family: MetricNameDescriptor, _ first: (String, [String]), _ second: (String, [String])
    ) -> [String: [String: Tally]] {
        Dictionary(
            uniqueKeysWithValues: first.1.map { a in
                (
                    a,
                    Dictionary(
                        uniqueKeysWithValues: second.1.map { b in
                            (b, Tally(registry.makeCounter(descriptor: family, labels: [(first.0, a), (second.0, b)])))
                        })
                )
            })
    }

    // MARK: Series made on first use

    private struct Key: Hashable {
        enum Family { case notification, reply, http }
        var family: Family
        var first: String
        var second: String
    }

    /// Series whose labels cannot all be known in advance (an HTTP route
    /// and status, a provider named by a test), made on first use.
    private final class Extra: Sendable {
        private let tallies = Mutex<[Key: Tally]>([:])

        func tally(_ key: Key) -> Tally {
            tallies.withLock { tallies in
                if let tally = tallies[key] { return tally }
                let (family, labels) =
                    switch key.family {
                    case .notification: (Family.notifications, [("provider", key.first), ("result", key.second)])
                    case .reply: (Family.replies, [("provider", key.first), ("result", key.second)])
                    case .http: (Family.httpRequests, [("route", key.first), ("status", key.second)])
                    }
                let tally = Tally(registry.makeCounter(descriptor: family, labels: labels))
                tallies[key] = tally
                return tally
            }
        }

        func all() -> [(Key, Tally)] {
            tallies.withLock { $0.map { ($0.key, $0.value) } }
        }
    }

    private static let extra = Extra()

    // MARK: Process-wide gauges

    static let mqttConnected = registry.makeGauge(descriptor: Family.mqttConnected)
    static let mqttConnects = Mirror(registry.makeCounter(descriptor: Family.mqttConnects))
    static let mqttOversized = Mirror(registry.makeCounter(descriptor: Family.mqttOversized))
    static let storageWritable = registry.makeGauge(descriptor: Family.storageWritable)
    static let copyAge = registry.makeDurationHistogram(
        descriptor: Family.copyAge,
        buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300].map { .milliseconds(Int64($0 * 1000)) })
    static let commandsTooOld = registry.makeCounter(descriptor: Family.commandsTooOld)
    static let reloadsApplied = registry.makeCounter(descriptor: Family.configReloads, labels: [("result", "applied")])
    static let reloadsRefused = registry.makeCounter(descriptor: Family.configReloads, labels: [("result", "refused")])

    /// A copy's age on arrival, from its IM stamp: observed, and returned
    /// (negative when the stamp is ahead of this clock).
    static func copyArrived(sent: Date, now: Date) -> Duration {
        let nanoseconds = Int64((now.timeIntervalSince(sent) * 1e9).rounded())
        copyAge.recordNanoseconds(max(0, nanoseconds))
        return .nanoseconds(nanoseconds)
    }

    /// Makes every series that can be known before anything happens, so
    /// that the first scrape shows them at 0.
    static func prepare(version: String) {
        _ = notifications
        _ = replies
        _ = (mqttConnected, mqttConnects, mqttOversized, storageWritable, copyAge, commandsTooOld, reloadsApplied, reloadsRefused)
        registry.makeGauge(descriptor: Family.buildInfo, labels: [("version", version)]).set(to: 1)
    }
}

/// A counter exported on `/metrics` that also counts per statistics interval.
final class Tally: Sendable {
    private let counter: Counter
    private let interval = Atomic<Int>(0)
    private let all = Atomic<Int>(0)

    init(_ counter: Counter) {
        self.counter = counter
    }

    func increment() {
        counter.increment()
        interval.add(1, ordering: .relaxed)
        all.add(1, ordering: .relaxed)
    }

    /// The count since the process started.
    var total: Int { all.load(ordering: .relaxed) }

    /// The count since the last call.
    func take() -> Int {
        interval.exchange(0, ordering: .relaxed)
    }
}

/// A counter that follows a total kept elsewhere (the MQTT client's), brought
/// up to date at scrape time.
final class Mirror: Sendable {
    private let counter: Counter
    private let exported = Mutex(0)

    init(_ counter: Counter) {
        self.counter = counter
    }

    func sync(to total: Int) {
        let delta = exported.withLock { exported in
            defer { exported = max(exported, total) }
            return total - exported
        }
        if delta > 0 { counter.increment(by: Int64(delta)) }
    }
}

extension ErrorCode {
    /// Whether the code answers a request (a refusal), rather than telling
    /// a player that their turn ended (`offer_expired`, `no_result`).
    var isRefusal: Bool {
        switch self {
        case .offerExpired, .noResult, .machineFault: false
        default: true
        }
    }
}
