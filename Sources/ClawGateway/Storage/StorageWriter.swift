import Dispatch
import Foundation
import Logging
import Synchronization

/// The one writer of the SQLite file: a thread of its own that takes the
/// writes machines submit and commits them in groups.
///
/// A machine submits a transition's writes while it holds its lock, which
/// costs an append, and gets a ``Ticket``; nothing waits for the disk under
/// a lock or on the cooperative pool. Tickets are numbered in submission
/// order and committed in that order, many machines' writes in one
/// transaction (group commit). A ticket is durable once the transaction that
/// holds it committed; only then does the machine tell anyone what it
/// decided (``Machine``), and only then does the ingress answer a request
/// that changed the queue.
///
/// When a commit fails (disk full, the file removed or replaced), the
/// writer is *failing*: ``isWritable`` is false, so machines refuse queue
/// changes with `gateway_unavailable`, and `/readyz` says 503. It then
/// retries, with backoff, to rewrite every machine's whole state
/// (``DurableMachine``) together with every game record written since the
/// failure, reopening the file if it was removed. The first rewrite that
/// succeeds makes every ticket issued before it durable, and the writer is
/// healthy again. Game records are never dropped: they are kept in memory
/// until written.
final class StorageWriter: Sendable {
    /// A place in the order of submitted writes.
    struct Ticket: Sendable, Hashable, Comparable {
        fileprivate let number: UInt64

        static func < (a: Ticket, b: Ticket) -> Bool { a.number < b.number }
    }

    /// What the writer needs from the machines.
    struct Machines: Sendable {
        /// Every machine's state as storage must hold it, read under each machine's lock.
        var images: @Sendable () -> [DurableMachine]
        /// Called on the writer's thread after a commit, with the machines
        /// (by index) whose tickets it made durable.
        var durable: @Sendable (_ machines: [Int]) -> Void
    }

    fileprivate struct Submission {
        var ticket: UInt64
        var machine: Int
        var changes: [StoreChange]
    }

    fileprivate struct State {
        var queue: [Submission] = []
        var issued: UInt64 = 0
        /// Every ticket up to this one is durable and what waited on it told.
        var durable: UInt64 = 0
        var waiters: [Int: (ticket: UInt64, continuation: CheckedContinuation<Bool, Never>)] = [:]
        var nextWaiter = 0
        /// Game records of failed commits, by id, the latest of each.
        var unsaved: [String: GameRow] = [:]
        var failing = false
        var stopping = false
        var stopped = false
        var finished: [CheckedContinuation<Void, Never>] = []
    }

    let store: GameStore
    private let logger: Logger
    private let state = Mutex(State())
    private let writable = Atomic<Bool>(true)
    /// Every ticket up to this one is committed; machines read it while
    /// draining. `State.durable` follows it once they have told.
    private let durableMark = Atomic<UInt64>(0)
    private let wake = DispatchSemaphore(value: 0)
    private let machines = Mutex<Machines?>(nil)
    /// Between two rewrite attempts while failing: from the first to the last.
    private let retryDelay: ClosedRange<Duration>

    init(store: GameStore, logger: Logger, retryDelay: ClosedRange<Duration> = .milliseconds(100)...(.seconds(5))) {
        self.store = store
        self.logger = logger
        self.retryDelay = retryDelay
    }

    /// Whether writes are being committed: false from a failed commit until
    /// every machine's state has been rewritten.
    var isWritable: Bool { writable.load(ordering: .acquiring) }

    /// Starts the writer's thread.
    func start(_ machines: Machines) {
        self.machines.withLock { $0 = machines }
        let thread = Thread { self.run() }
        thread.name = "storage-writer"
        thread.start()
    }

    /// Queues `changes` of machine `machine` for the next commit; returns at once.
    func submit(_ changes: [StoreChange], machine: Int) -> Ticket {
        let ticket = state.withLock { state in
            state.issued += 1
            state.queue.append(Submission(ticket: state.issued, machine: machine, changes: changes))
            return state.issued
        }
        wake.signal()
        return Ticket(number: ticket)
    }

    /// Whether the ticket's transaction committed: what a machine waits for
    /// before it tells.
    func isDurable(_ ticket: Ticket) -> Bool {
        ticket.number <= durableMark.load(ordering: .acquiring)
    }

    /// Whether the ticket is durable and what waited on it has been told:
    /// what an answer waits for.
    func isSettled(_ ticket: Ticket) -> Bool {
        state.withLock { ticket.number <= $0.durable }
    }

    /// Waits until `ticket` is durable and what waited on it is told: true
    /// when it is, false when the writer stopped first, the wait was cancelled, or `timeout` passed.
    func waitDurable(_ ticket: Ticket, timeout: Duration) async -> Bool {
        if isSettled(ticket) { return true }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask { await self.waitDurable(ticket) }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    private func waitDurable(_ ticket: Ticket) async -> Bool {
        let id = state.withLock { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let answer: Bool? = state.withLock { state in
                    if ticket.number <= state.durable { return true }
                    if state.stopped || Task.isCancelled { return false }
                    state.waiters[id] = (ticket.number, continuation)
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume(returning: false)
        }
    }

    /// Waits until everything submitted so far is durable (or the writer stopped).
    func flush() async {
        let last = state.withLock { $0.issued }
        _ = await waitDurable(Ticket(number: last))
    }

    /// Commits what is queued, ends the thread and closes the file.
    func stop() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                if state.stopped { return true }
                state.stopping = true
                state.finished.append(continuation)
                return false
            }
            if done { continuation.resume() } else { wake.signal() }
        }
    }

    // MARK: The writer's thread

    private func run() {
        var delay = retryDelay.lowerBound
        while true {
            let failing = state.withLock { $0.failing }
            if failing {
                if rewriteEverything() {
                    delay = retryDelay.lowerBound
                    continue
                }
                if state.withLock({ $0.stopping }) { break }
                _ = wake.wait(timeout: .now() + .milliseconds(Int(delay.milliseconds)))
                delay = min(delay * 2, retryDelay.upperBound)
                continue
            }
            let (batch, stopping) = state.withLock { state in
                defer { state.queue.removeAll(keepingCapacity: true) }
                return (state.queue, state.stopping)
            }
            if batch.isEmpty {
                if stopping { break }
                wake.wait()
                continue
            }
            commit(batch)
        }
        finish()
    }

    /// One transaction for everything queued.
    private func commit(_ batch: [Submission]) {
        do throws(StorageError) {
            if store.fileWasReplaced() {
                throw StorageError(path: store.path, operation: "write", underlying: FileReplaced())
            }
            try store.write(batch.lazy.flatMap(\.changes))
            settle(upTo: batch[batch.count - 1].ticket, machines: batch.map(\.machine))
        } catch {
            logger.error(
                "Storage write failed: queue changes are refused until every machine's state is written again",
                metadata: ["storage.path": .string(store.path), "error": .string(error.description)])
            state.withLock { state in
                state.failing = true
                for submission in batch { state.keepGames(of: submission) }
            }
            writable.store(false, ordering: .releasing)
        }
    }

    /// While failing: every machine's whole state, every game record not yet
    /// written, in one transaction. True when it was written.
    private func rewriteEverything() -> Bool {
        guard let machines = machines.withLock({ $0 }) else { return false }
        do throws(StorageError) {
            if store.fileWasReplaced() {
                logger.error("The storage file was removed or replaced; opening it afresh", metadata: ["storage.path": .string(store.path)])
                try store.reopen()
            }
            // Everything issued before the images are read is in them, or in `unsaved`.
            let (covered, games) = state.withLock { state in
                let covered = state.issued
                for submission in state.queue where submission.ticket <= covered { state.keepGames(of: submission) }
                state.queue.removeAll { $0.ticket <= covered }
                return (covered, Array(state.unsaved.values))
            }
            let images = machines.images()
            // The images hold the newest state of open games: written last.
            try store.write(games.map(StoreChange.game), images: images)
            state.withLock { state in
                state.failing = false
                state.unsaved.removeAll()
            }
            writable.store(true, ordering: .releasing)
            logger.notice("Storage writes succeed again; every machine's state was rewritten", metadata: ["storage.path": .string(store.path)])
            settle(upTo: covered, machines: Array(images.indices))
            return true
        } catch {
            logger.warning("Storage still failing", metadata: ["storage.path": .string(store.path), "error": .string(error.description)])
            return false
        }
    }

    /// Tickets up to `ticket` are durable: the machines tell what waited on
    /// them, then whoever waits for them is woken, so that a waiter finds
    /// everything told.
    private func settle(upTo ticket: UInt64, machines indices: [Int]) {
        if ticket > durableMark.load(ordering: .relaxed) { durableMark.store(ticket, ordering: .releasing) }
        machines.withLock { $0 }?.durable(Array(Set(indices)).sorted())
        let ready = state.withLock { state in
            state.durable = max(state.durable, ticket)
            var ready: [CheckedContinuation<Bool, Never>] = []
            for (id, waiter) in state.waiters where waiter.ticket <= ticket {
                ready.append(waiter.continuation)
                state.waiters[id] = nil
            }
            return ready
        }
        for continuation in ready { continuation.resume(returning: true) }
    }

    private func finish() {
        let (waiters, finished, lost) = state.withLock { state in
            state.stopped = true
            defer {
                state.waiters.removeAll()
                state.finished.removeAll()
            }
            return (state.waiters.values.map(\.continuation), state.finished, state.unsaved.count + state.queue.count)
        }
        if lost > 0 {
            logger.error("Storage stopped with writes it could not make", metadata: ["storage.unwritten": .stringConvertible(lost)])
        }
        for waiter in waiters { waiter.resume(returning: false) }
        do {
            try store.close()
            logger.info("Storage closed", metadata: ["storage.path": .string(store.path)])
        } catch {
            logger.error("Storage not closed cleanly", metadata: ["error": .string(error.description)])
        }
        for continuation in finished { continuation.resume() }
    }

    private struct FileReplaced: Error, CustomStringConvertible {
        var description: String { "the file was removed or replaced while open" }
    }
}

extension StorageWriter.State {
    /// Keeps the game records of a write that did not happen; the rest of it
    /// is in the machines' images.
    fileprivate mutating func keepGames(of submission: StorageWriter.Submission) {
        for change in submission.changes {
            if case .game(let row) = change { unsaved[row.id] = row }
        }
    }
}
