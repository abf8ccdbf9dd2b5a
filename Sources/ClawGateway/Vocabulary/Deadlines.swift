import HeapModule
import Synchronization

/// The one owner of time in the arcade: when each machine next has a
/// deadline (a turn timer, an ack timeout), in one heap on the game clock.
///
/// Machines say when their next deadline is (``schedule(_:at:)``); the
/// arcade's service runs ``run(clock:fire:)``, which sleeps until the
/// earliest and then lets each machine whose time came handle everything
/// due (``MachineState/expire(_:)``). No deadline is a task of its own:
/// when the service stops, the loop ends and nothing fires after it.
///
/// An entry is a hint that a machine may have something due then, not a
/// promise: a machine whose deadline moved later is simply woken early and
/// finds nothing to do, which keeps scheduling to a heap push.
final class Deadlines: Sendable {
    private struct Entry: Comparable {
        var at: Duration
        var machine: Int

        static func < (a: Entry, b: Entry) -> Bool { (a.at, a.machine) < (b.at, b.machine) }
    }

    private struct State {
        var heap = Heap<Entry>()
        /// The loop sleeping until `until`, to be woken for anything earlier.
        var sleeper: (until: Duration?, wake: CheckedContinuation<Void, Never>)?
    }

    private let state = Mutex(State())

    /// Machine `machine` has something due at `at`.
    func schedule(_ machine: Int, at: Duration) {
        let wake = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.heap.insert(Entry(at: at, machine: machine))
            guard let sleeper = state.sleeper, sleeper.until.map({ at < $0 }) ?? true else { return nil }
            state.sleeper = nil
            return sleeper.wake
        }
        wake?.resume()
    }

    /// The earliest entry, if any.
    var next: Duration? {
        state.withLock { $0.heap.min?.at }
    }

    /// Takes every entry due at `now` and returns their machines, each once, earliest first.
    func takeDue(now: Duration) -> [Int] {
        state.withLock { state in
            var machines: [Int] = []
            while let first = state.heap.min, first.at <= now {
                state.heap.removeMin()
                if !machines.contains(first.machine) { machines.append(first.machine) }
            }
            return machines
        }
    }

    /// Fires deadlines as they come due until the task is cancelled.
    ///
    /// - Parameter fire: called with a machine's index when one of its
    ///   deadlines is due; it reschedules what is left.
    func run(clock: GameClock, fire: (Int) -> Void) async {
        while !Task.isCancelled {
            let due = takeDue(now: clock.now())
            if !due.isEmpty {
                due.forEach(fire)
                continue
            }
            let next = self.next
            await withTaskGroup(of: Void.self) { group in
                if let next {
                    group.addTask { try? await clock.sleep(next) }
                }
                group.addTask { await self.waitForSooner(than: next) }
                await group.next()
                group.cancelAll()
            }
        }
    }

    /// Returns when something is scheduled before `until` (anything at all
    /// when nil), or when the task is cancelled.
    private func waitForSooner(than until: Duration?) async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now: Bool = state.withLock { state in
                    if Task.isCancelled { return true }
                    if let first = state.heap.min?.at, until.map({ first < $0 }) ?? true { return true }
                    state.sleeper = (until, continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLock { state in
                defer { state.sleeper = nil }
                return state.sleeper?.wake
            }?.resume()
        }
    }
}
