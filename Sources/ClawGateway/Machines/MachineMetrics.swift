import Foundation
import Prometheus
import Protocol
import Synchronization

/// A machine's metric handles, made once when the machine is (so every
/// series is on `/metrics` at 0 from the start), and its statistics for
/// `claw/<m>/stats`.
struct MachineMetrics: Sendable {
    let forwarded: Counter
    let ackTimeouts: Counter
    /// Commands decided but not published (the broker went away in between).
    let commandsLost: Counter
    /// Refusals not sent because the player had one of that code within a second.
    let refusalsHeldBack: Counter
    /// Messages from the PC that were ignored: retained, undecodable, unexpected.
    let badMessages: Counter
    let queueLength: Gauge
    let online: Gauge
    let suspect: Gauge
    let maintenance: Gauge
    let stats: MachineStats
    private let ackLatency: DurationHistogram
    private let dropped: [ErrorCode: Counter]
    private let games: [GameOutcome: Counter]
    private let faultCodes = FaultCodeLabels()
    private let machine: String

    /// Ack latency buckets: a PC on the arcade's LAN acks in a few
    /// milliseconds; a second is already a problem.
    static let ackBuckets: [Duration] = [1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000].map {
        .microseconds(Int64($0 * 1000))
    }

    init(machine: String, today: MachineStats.Today) {
        let registry = GatewayMetrics.registry
        typealias Family = GatewayMetrics.Family
        let label = [("machine", machine)]
        forwarded = registry.makeCounter(descriptor: Family.forwarded, labels: label)
        ackTimeouts = registry.makeCounter(descriptor: Family.ackTimeouts, labels: label)
        commandsLost = registry.makeCounter(descriptor: Family.commandsLost, labels: label)
        refusalsHeldBack = registry.makeCounter(descriptor: Family.refusalsHeldBack, labels: label)
        badMessages = registry.makeCounter(descriptor: Family.ignored, labels: label)
        queueLength = registry.makeGauge(descriptor: Family.queueLength, labels: label)
        online = registry.makeGauge(descriptor: Family.online, labels: label)
        suspect = registry.makeGauge(descriptor: Family.suspect, labels: label)
        maintenance = registry.makeGauge(descriptor: Family.maintenance, labels: label)
        self.machine = machine
        ackLatency = registry.makeDurationHistogram(descriptor: Family.ackLatency, labels: label, buckets: Self.ackBuckets)
        dropped = Dictionary(
            uniqueKeysWithValues: ErrorCode.allCases.filter { $0.isRefusal && $0 != .unknownMachine }.map { code in
                (
                    code,
                    registry.makeCounter(descriptor: Family.dropped, labels: [("machine", machine), ("reason", code.rawValue)])
                )
            })
        games = Dictionary(
            uniqueKeysWithValues: GameOutcome.allCases.map { outcome in
                (
                    outcome,
                    registry.makeCounter(descriptor: Family.games, labels: [("machine", machine), ("outcome", outcome.rawValue)])
                )
            })
        stats = MachineStats(today: today)
    }

    /// The machine's counted stock of prizes (SPEC §15): a series made
    /// once the stock is counted, so that a machine without one shows none.
    func stock(_ stock: Int64) {
        GatewayMetrics.registry.makeGauge(descriptor: GatewayMetrics.Family.stock, labels: [("machine", machine)]).set(to: Double(stock))
    }

    /// A request refused with `code`.
    func dropped(_ code: ErrorCode) {
        dropped[code]?.increment()
        stats.dropped(code)
    }

    /// Counts what an event says: commands forwarded and dropped, ack latency
    /// and timeouts, games by outcome; and the machine's statistics.
    func record(_ event: GameEvent, at wall: @autoclosure () -> Date) {
        switch event.type {
        case .command:
            forwarded.increment()
        case .dropped:
            if let code = event.reason.flatMap(ErrorCode.init(rawValue:)) { dropped[code]?.increment() }
        case .ack:
            if let latency = event.latencyMs { ackLatency.recordNanoseconds(Int64(latency * 1_000_000)) }
        case .ackTimeout:
            ackTimeouts.increment()
        case .gameEnded:
            if let outcome = event.outcome { games[outcome]?.increment() }
        case .fault:
            // By the board's code: a series made on the first fault of each
            // (codes are checked short and plain, MachineFaultReport), for the
            // first few codes of the machine; a PC inventing codes gets `other`.
            GatewayMetrics.registry.makeCounter(
                descriptor: GatewayMetrics.Family.faults, labels: [("machine", machine), ("code", faultCodes.label(event.data ?? ""))]
            ).increment()
        default:
            break
        }
        stats.record(event, at: wall())
    }
}

/// The codes a machine's fault series are labelled with: the first
/// ``limit`` a machine reports, then `other`, so that a PC that reports a
/// new code with every fault cannot make series without end.
final class FaultCodeLabels: Sendable {
    /// A board has a dozen codes; this is room for all of them.
    static let limit = 16
    static let other = "other"
    private let seen = Mutex<Set<String>>([])

    /// The label a fault of `code` is counted under.
    func label(_ code: String) -> String {
        seen.withLock { seen in
            if seen.contains(code) { return code }
            guard seen.count < Self.limit, code != Self.other else { return Self.other }
            seen.insert(code)
            return code
        }
    }
}
