import Foundation
import Protocol
import Synchronization

/// One machine's figures for `claw/<m>/stats` (SPEC §4), counted as they
/// happen at constant cost per command and taken, then reset, once per
/// `gateway.stats_interval`. Games and wins "today" run from local midnight
/// of the gateway's host and start from what storage holds for today.
final class MachineStats: Sendable {
    /// Games started and games won since `day` began.
    struct Today: Sendable, Equatable {
        var day: Date
        var games = 0
        var wins = 0
    }

    /// What one interval counted.
    struct Interval: Sendable, Equatable {
        var commands = 0
        var dropped: [ErrorCode: Int] = [:]
        var acks = 0
        var ackTimeouts = 0
        var latency = LatencySummary.zero
    }

    private struct Figures {
        var commands = 0
        var dropped: [ErrorCode: Int] = [:]
        var acks = 0
        var ackTimeouts = 0
        var latency = LatencySketch()
        var today: Today

        /// A new day starts the day's counts from zero.
        mutating func rollOver(to day: Date) {
            if day > today.day { today = Today(day: day) }
        }
    }

    private let figures: Mutex<Figures>
    private let calendar: Calendar

    /// - Parameter today: the counts storage holds for the day `today.day` starts.
    init(today: Today, calendar: Calendar = .current) {
        figures = Mutex(Figures(today: today))
        self.calendar = calendar
    }

    /// A message published to the machine.
    func commandSent() {
        figures.withLock { $0.commands += 1 }
    }

    /// A request for the machine refused with `code`.
    func dropped(_ code: ErrorCode) {
        figures.withLock { $0.dropped[code, default: 0] += 1 }
    }

    /// What an event counts: acks and their latency, ack timeouts, refusals,
    /// games started (`accepted`) and won.
    func record(_ event: GameEvent, at wall: @autoclosure () -> Date) {
        switch event.type {
        case .dropped:
            if let code = event.reason.flatMap(ErrorCode.init(rawValue:)) { dropped(code) }
        case .ack:
            figures.withLock { figures in
                figures.acks += 1
                if let latency = event.latencyMs { figures.latency.record(milliseconds: latency) }
            }
        case .ackTimeout:
            figures.withLock { $0.ackTimeouts += 1 }
        case .accepted:
            let day = calendar.startOfDay(for: wall())
            figures.withLock { figures in
                figures.rollOver(to: day)
                figures.today.games += 1
            }
        case .gameEnded where event.outcome == .won:
            let day = calendar.startOfDay(for: wall())
            figures.withLock { figures in
                figures.rollOver(to: day)
                figures.today.wins += 1
            }
        default:
            break
        }
    }

    /// An operator's correction (SPEC §16) of a game that ended at `endedAt`
    /// added a win (1) or took one back (-1): today's wins count it when the game ended today.
    func corrected(endedAt: Date, wins: Int) {
        let day = calendar.startOfDay(for: endedAt)
        figures.withLock { figures in
            guard day == figures.today.day else { return }
            figures.today.wins = max(0, figures.today.wins + wins)
        }
    }

    /// The interval's figures and today's counts at `wall`; the interval's start afresh.
    func take(at wall: Date) -> (Interval, Today) {
        let day = calendar.startOfDay(for: wall)
        return figures.withLock { figures in
            figures.rollOver(to: day)
            let interval = Interval(
                commands: figures.commands, dropped: figures.dropped, acks: figures.acks, ackTimeouts: figures.ackTimeouts,
                latency: LatencySummary(
                    p50: figures.latency.quantile(0.5), p99: figures.latency.quantile(0.99), max: figures.latency.max))
            figures.commands = 0
            figures.dropped.removeAll(keepingCapacity: true)
            figures.acks = 0
            figures.ackTimeouts = 0
            figures.latency.reset()
            return (interval, figures.today)
        }
    }
}
