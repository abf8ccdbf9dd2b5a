import Prometheus

/// The chain link's series on `/metrics`, in the gateway's registry, brought
/// up to date from ``ChainLink/status`` at scrape time.
enum ChainMetrics {
    static let up = GatewayMetrics.registry.makeGauge(
        descriptor: family("chain_link_up", "", "1 when the chain link is connected and the cluster granted every subscription."))
    static let connects = Mirror(
        GatewayMetrics.registry.makeCounter(
            descriptor: family("chain_link_connects", "total", "Connections made to the chain's cluster (the first and every reconnect).")))
    static let refusals = Mirror(
        GatewayMetrics.registry.makeCounter(
            descriptor: family(
                "chain_link_refusals", "total", "SUBACKs in which the chain's cluster refused a subscription of the link; each took the link down.")))
    static let silences = Mirror(
        GatewayMetrics.registry.makeCounter(
            descriptor: family("chain_link_silences", "total", "Times the link was taken down and up again because the routers' beats stopped.")))

    static let copies = Dictionary(
        uniqueKeysWithValues: ChainInbox.Outcome.allCases.map { outcome in
            (
                outcome,
                Mirror(
                    GatewayMetrics.registry.makeCounter(
                        descriptor: family(
                            "chain_inbox_copies", "total",
                            "Copies from the routers on the site's inbox: handled (and acknowledged), stale (older than chain.inbox_max_age: dropped) or malformed."),
                        labels: [("result", outcome.rawValue)]))
            )
        })
    static let receipts = Mirror(
        GatewayMetrics.registry.makeCounter(
            descriptor: family("chain_inbox_receipts", "total", "Receipts the site published on inbox/ack for the routers.")))

    static let recordsAcked = GatewayMetrics.registry.makeGauge(
        descriptor: family("chain_records_acked", "", "The highest game record number the chain's recorder acknowledged (all up to it are in its database)."))
    static let recordsPending = GatewayMetrics.registry.makeGauge(
        descriptor: family("chain_records_pending", "", "Game records numbered but not yet acknowledged by the recorder."))
    static let recordsShipped = Mirror(
        GatewayMetrics.registry.makeCounter(
            descriptor: family("chain_records_shipped", "total", "Game records published to the recorder, resends included.")))
    static let recordsResends = Mirror(
        GatewayMetrics.registry.makeCounter(
            descriptor: family(
                "chain_records_resends", "total", "Times everything above the recorder's acknowledgement was sent again because it did not move.")))

    static func export(_ link: ChainLink) {
        let status = link.status
        up.set(to: status.problem == nil ? 1 : 0)
        connects.sync(to: status.connects)
        refusals.sync(to: status.refusals)
        silences.sync(to: status.silences)
        for (outcome, mirror) in copies { mirror.sync(to: status.copies[outcome, default: 0]) }
        receipts.sync(to: status.receipts)
        if let records = link.records?.status {
            recordsAcked.set(to: Double(records.acked))
            recordsPending.set(to: Double(max(0, records.lastNumber - records.acked)))
            recordsShipped.sync(to: records.shipped)
            recordsResends.sync(to: records.resends)
        }
    }

    private static func family(_ name: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "claw", metricName: name, unitName: unit, helpText: help)
    }
}
