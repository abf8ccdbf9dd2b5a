import CoreMetrics
import Protocol

/// A machine's metric handles, made once: looking one up per event costs a
/// lock and a dictionary in the registry on every command.
struct MachineMetrics: Sendable {
    let forwarded: Counter
    let ackTimeouts: Counter
    /// Commands decided but not published (the broker went away in between).
    let commandsLost: Counter
    /// Refusals not sent because the player had one of that code within a second.
    let refusalsHeldBack: Counter
    /// Messages from the PC that were ignored: retained, undecodable, unexpected.
    let badMessages: Counter
    private let ackLatency: CoreMetrics.Timer
    private let dropped: [ErrorCode: Counter]
    private let games: [GameOutcome: Counter]

    init(machine: String) {
        forwarded = Counter(label: "claw_commands_forwarded_total", dimensions: [("machine", machine)])
        ackTimeouts = Counter(label: "claw_ack_timeouts_total", dimensions: [("machine", machine)])
        commandsLost = Counter(label: "claw_commands_lost_total", dimensions: [("machine", machine)])
        refusalsHeldBack = Counter(label: "claw_refusals_held_back_total", dimensions: [("machine", machine)])
        badMessages = Counter(label: "claw_machine_messages_ignored_total", dimensions: [("machine", machine)])
        ackLatency = CoreMetrics.Timer(label: "claw_ack_latency_seconds", preferredDisplayUnit: .seconds)
        dropped = Dictionary(
            uniqueKeysWithValues: ErrorCode.allCases.map { code in
                (code, Counter(label: "claw_commands_dropped_total", dimensions: [("machine", machine), ("reason", code.rawValue)]))
            })
        games = Dictionary(
            uniqueKeysWithValues: GameOutcome.allCases.map { outcome in
                (outcome, Counter(label: "claw_games_total", dimensions: [("outcome", outcome.rawValue)]))
            })
    }

    /// A request refused with `code`.
    func dropped(_ code: ErrorCode) {
        dropped[code]?.increment()
    }

    /// Counts what an event says: commands forwarded and dropped, ack latency
    /// and timeouts, games by outcome.
    func record(_ event: GameEvent) {
        switch event.type {
        case .command:
            forwarded.increment()
        case .dropped:
            if let code = event.reason.flatMap(ErrorCode.init(rawValue:)) { self.dropped(code) }
        case .ack:
            if let latency = event.latencyMs { ackLatency.recordNanoseconds(Int64(latency * 1_000_000)) }
        case .ackTimeout:
            ackTimeouts.increment()
        case .gameEnded:
            if let outcome = event.outcome { games[outcome]?.increment() }
        default:
            break
        }
    }
}
