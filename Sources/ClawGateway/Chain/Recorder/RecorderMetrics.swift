import Prometheus
import Protocol

/// The recorder's series on `/metrics`, in the process-wide registry
/// (``GatewayMetrics/registry``), every one with its HELP and at 0 from the
/// first scrape; counters are brought up to date from
/// ``ChainRecorder/status`` at scrape time.
enum RecorderMetrics {
    static let records = Dictionary(
        uniqueKeysWithValues: ChainRecorder.Result.allCases.map { result in
            (
                result,
                Mirror(
                    registry.makeCounter(
                        descriptor: family(
                            "recorder_records", "total",
                            "Records received from the sites, by what became of them: written (a new row), duplicate (already there, acknowledged again), malformed (does not decode, or values no game has: not written), forged (its site is not its topic's: not written)."),
                        labels: [("result", result.rawValue)]))
            )
        })
    static let databaseUp = registry.makeGauge(
        descriptor: family("recorder_database_up", "", "1 when the last statement reached PostgreSQL and the schema is in place."))
    static let writeFailures = Mirror(
        registry.makeCounter(
            descriptor: family(
                "recorder_write_failures", "total",
                "Writes of a record that failed because PostgreSQL could not be reached; the record is retried, nothing is acknowledged meanwhile.")))
    static let writeLatency = registry.makeDurationHistogram(
        descriptor: family("recorder_write_latency", "seconds", "Time to write one record and its site's progress (one transaction, COMMIT included)."),
        buckets: [0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 1000, 5000].map { .microseconds(Int64($0 * 1000)) })
    static let acks = Mirror(
        registry.makeCounter(descriptor: family("recorder_acks", "total", "Retained acknowledgements published on the sites' records/ack.")))
    static let dropped = Mirror(
        registry.makeCounter(
            descriptor: family(
                "recorder_backlog_dropped", "total",
                "Records dropped unread because \(ChainRecorder.backlogLimit) were already waiting for the database; their sites send them again.")))
    static let backlog = registry.makeGauge(descriptor: family("recorder_backlog", "", "Records received and not yet written."))
    /// What became of the sites' debits and refunds (SPEC §11).
    static let walletResults = [
        "debit_debited", "debit_insufficient", "debit_refused", "debit_voucher_refused", "debit_voucher_refused_unsent", "refund_refunded", "refund_nothing_to_refund",
        "malformed", "unanswered", "dropped",
    ]
    static let wallet = Dictionary(
        uniqueKeysWithValues: walletResults.map { result in
            (
                result,
                Mirror(
                    registry.makeCounter(
                        descriptor: family(
                            "recorder_wallet_asks", "total",
                            "The sites' debits and refunds (SPEC §11), by what became of them: <kind>_<answer>, debit_voucher_refused (no valid voucher of the routers, SPEC §9; debit_voucher_refused_unsent: of those, the refusals over a site's \(ChainRecorder.refusalsPerSecond) a second, not sent), malformed (not answered), unanswered (PostgreSQL could not be reached), dropped (the site had \(ChainRecorder.walletLinePerSite) waiting)."),
                        labels: [("result", result)]))
            )
        })
    static let walletLatency = registry.makeDurationHistogram(
        descriptor: family(
            "recorder_wallet_group_latency", "seconds",
            "Time to settle one group of the sites' debits and refunds (one transaction, its durable COMMIT included)."),
        buckets: [0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 1000, 5000].map { .microseconds(Int64($0 * 1000)) })
    static let busUp = registry.makeGauge(
        descriptor: family("recorder_bus_up", "", "1 when the recorder is connected to the chain's cluster and holds its subscription."))
    static let busConnects = Mirror(
        registry.makeCounter(descriptor: family("recorder_bus_connects", "total", "Connections made to the chain's cluster (the first and every reconnect).")))

    /// Makes every series.
    static func prepare() {
        _ = (records, wallet, walletLatency, databaseUp, writeFailures, writeLatency, acks, dropped, backlog, busUp, busConnects)
    }

    /// Brings the series read from the recorder up to date: before a scrape.
    static func export(_ recorder: ChainRecorder) {
        let status = recorder.status
        for (result, mirror) in records { mirror.sync(to: status.results[result, default: 0]) }
        databaseUp.set(to: recorder.store.isUp ? 1 : 0)
        writeFailures.sync(to: status.failures)
        acks.sync(to: status.acks)
        dropped.sync(to: status.dropped)
        backlog.set(to: Double(status.backlog))
        busUp.set(to: status.busProblem == nil ? 1 : 0)
        busConnects.sync(to: status.connects)
        for (result, mirror) in wallet { mirror.sync(to: status.wallet[result, default: 0]) }
    }

    private static var registry: PrometheusCollectorRegistry { GatewayMetrics.registry }

    private static func family(_ name: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "claw", metricName: name, unitName: unit, helpText: help)
    }
}
