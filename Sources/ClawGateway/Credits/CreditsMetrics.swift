import Prometheus

/// The wallets on `/metrics` (SPEC §11): credits moved, by kind, and how
/// many wallets there are.
enum CreditsMetrics {
    private static var moved: MetricNameDescriptor {
        MetricNameDescriptor(
            namespace: "claw", metricName: "credits", unitName: "total",
            helpText: "Credits moved through the players' wallets, by kind: topup, debit, refund, adjust (either way, by size), exchange (prizes taken as credits).")
    }

    private static let byKind: [LedgerEntry.Kind: Counter] = Dictionary(
        uniqueKeysWithValues: LedgerEntry.Kind.allCases.map {
            ($0, GatewayMetrics.registry.makeCounter(descriptor: moved, labels: [("kind", $0.rawValue)]))
        })

    static let wallets = GatewayMetrics.registry.makeGauge(
        descriptor: MetricNameDescriptor(
            namespace: "claw", metricName: "wallets", unitName: "",
            helpText: "Players with a wallet: every player who was ever credited or debited."))

    static func count(_ entry: LedgerEntry) {
        byKind[entry.kind]?.increment(by: entry.credits.magnitude > UInt64(Int64.max) ? Int64.max : Int64(entry.credits.magnitude))
    }

    /// Makes the series, so that the first scrape shows them at 0.
    static func prepare() {
        _ = (byKind, wallets)
    }
}
