import Foundation

/// A point in time as a machine's game sees it: the monotonic clock for its
/// deadlines and the wall clock for what it records and publishes.
struct Moment: Sendable, Equatable {
    /// Since the game clock was made; deadlines are on this scale.
    var uptime: Duration
    var wall: Date

    /// The wall time at which the monotonic `deadline` falls.
    func wall(at deadline: Duration) -> Date {
        wall.addingTimeInterval((deadline - uptime).seconds)
    }
}

/// The time a machine's game runs on.
///
/// Any `Clock` with `Duration` fits (the daemon uses `ContinuousClock`, the
/// tests a test clock they advance by hand); instants are kept as the
/// `Duration` since the clock was wrapped, so game state stays a plain value.
struct GameClock: Sendable {
    /// Time since the clock was wrapped.
    let now: @Sendable () -> Duration
    /// Suspends until ``now`` reaches `deadline`; throws when cancelled.
    let sleep: @Sendable (_ until: Duration) async throws -> Void
    let wallNow: @Sendable () -> Date

    init<C: Clock>(_ clock: C, wallNow: @escaping @Sendable () -> Date) where C.Duration == Duration {
        let origin = clock.now
        now = { origin.duration(to: clock.now) }
        sleep = { deadline in try await clock.sleep(until: origin.advanced(by: deadline), tolerance: nil) }
        self.wallNow = wallNow
    }

    /// Monotonic timers, wall-clock records.
    static var system: GameClock {
        GameClock(ContinuousClock(), wallNow: { Date() })
    }

    /// A clock whose wall time moves with `clock` from `epoch`: for tests.
    static func following<C: Clock>(_ clock: C, from epoch: Date) -> GameClock where C.Duration == Duration {
        let origin = clock.now
        return GameClock(clock, wallNow: { epoch.addingTimeInterval(origin.duration(to: clock.now).seconds) })
    }

    func moment() -> Moment {
        Moment(uptime: now(), wall: wallNow())
    }

    /// Calls `body` every `period` on this clock until the task is
    /// cancelled: the one tick loop of the services that beat or watch.
    func tick(every period: Duration, _ body: () async -> Void) async {
        var next = now()
        while !Task.isCancelled {
            next += period
            do { try await sleep(next) } catch { return }
            await body()
        }
    }
}

extension Duration {
    /// The duration in (fractional) seconds.
    var seconds: Double {
        let (seconds, attoseconds) = components
        return Double(seconds) + Double(attoseconds) / 1e18
    }

    /// Whole milliseconds, rounded down.
    var milliseconds: Int64 {
        components.seconds * 1000 + components.attoseconds / 1_000_000_000_000_000
    }
}
