import Dispatch
import Foundation
import Logging
import NIOCore
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
/// Data flows one way: machines submit and wait, the writer only reports.
/// It never calls into a machine: what it has to say (a commit made these
/// machines' tickets durable; a commit failed) goes out as a ``Report`` on
/// ``reports``, which the arcade reads and acts on in its own task, so that
/// a machine stopped by the gateway tells nothing whatever the writer does
/// after it.
///
/// When a commit fails (disk full, the file removed or replaced), the
/// writer is *failing*: ``isWritable`` is false, so machines refuse queue
/// changes with `gateway_unavailable`, and `/readyz` says 503. It reports
/// ``Report/failing``; the arcade answers with every machine's whole state
/// (``rewrite(from:)``), which the writer then tries, with backoff, to write
/// together with every game record written since the failure, reopening the
/// file if it was removed. The first rewrite that succeeds makes every
/// ticket issued before it durable, and the writer is healthy again. Game
/// records are never dropped: they are kept in memory until written.
final class StorageWriter: Sendable {
    /// A place in the order of submitted writes.
    struct Ticket: Sendable, Hashable, Comparable {
        fileprivate let number: UInt64

        static func < (a: Ticket, b: Ticket) -> Bool { a.number < b.number }
    }

    /// What the writer has to say, in the order it happened.
    enum Report: Sendable, Equatable {
        /// A commit made durable the tickets of these machines (by index):
        /// what waited on them may be told.
        case durable(machines: [Int])
        /// A commit failed: no write is taken until every machine's whole
        /// state is handed over (``StorageWriter/rewrite(from:)``) and written.
        case failing
    }

    fileprivate struct Submission {
        var ticket: UInt64
        var machine: Int
        var changes: [StoreChange]
    }

    fileprivate struct State {
        var queue: [Submission] = []
        var issued: UInt64 = 0
        /// Every ticket up to this one is durable.
        var durable: UInt64 = 0
        /// Who waits for a ticket, by id: told true once it is durable,
        /// false when the writer stops first (or the waiter gives up).
        var waiters: [Int: (ticket: UInt64, done: @Sendable (Bool) -> Void)] = [:]
        var nextWaiter = 0
        /// Game records of failed commits, by id, the latest of each.
        var unsaved: [String: GameRow] = [:]
        /// Money and prizes of failed commits, in the order they were
        /// decided: ledger entries, in a chain the asks of its ledger (a
        /// refund owed), stock lines, prizes and their parcels.
        var unsavedMoney: [StoreChange] = []
        var failing = false
        /// While failing: every machine's state as the arcade handed it
        /// over, and the last ticket it covers.
        var rewrite: (covered: UInt64, images: [DurableMachine])?
        var stopping = false
        var stopped = false
        var finished: [CheckedContinuation<Void, Never>] = []
    }

    let store: GameStore
    private let logger: Logger
    private let state = Mutex(State())
    private let writable = Atomic<Bool>(true)
    /// Every ticket up to this one is committed; machines read it while
    /// draining, without taking the writer's lock.
    private let durableMark = Atomic<UInt64>(0)
    private let wake = DispatchSemaphore(value: 0)
    /// What the writer reports, read by one reader: the arcade.
    let reports: AsyncStream<Report>
    private let reporter: AsyncStream<Report>.Continuation
    /// Between two rewrite attempts while failing: from the first to the last.
    private let retryDelay: ClosedRange<Duration>

    init(store: GameStore, logger: Logger, retryDelay: ClosedRange<Duration> = .milliseconds(100)...(.seconds(5))) {
        self.store = store
        self.logger = logger
        self.retryDelay = retryDelay
        (reports, reporter) = AsyncStream.makeStream()
    }

    /// Whether writes are being committed: false from a failed commit until
    /// every machine's state has been rewritten.
    var isWritable: Bool { writable.load(ordering: .acquiring) }

    /// Starts the writer's thread.
    func start() {
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
    /// before it tells, and what an answer waits for.
    func isDurable(_ ticket: Ticket) -> Bool {
        ticket.number <= durableMark.load(ordering: .acquiring)
    }

    /// The last ticket handed out, if any.
    var lastIssued: Ticket? {
        state.withLock { $0.issued == 0 ? nil : Ticket(number: $0.issued) }
    }

    /// Waits until `ticket` is durable: true when it is, false when the
    /// writer stopped first, the wait was cancelled, or `timeout` passed.
    func waitDurable(_ ticket: Ticket, timeout: Duration) async -> Bool {
        if isDurable(ticket) { return true }
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
        let id = newWaiterID()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                wait(for: ticket, id: id, cancelled: { Task.isCancelled }) { continuation.resume(returning: $0) }
            }
        } onCancel: {
            giveUp(id)
        }
    }

    /// Calls `done` on `eventLoop` once `ticket` is durable (true), or when
    /// the writer stops first or `timeout` passes (false): for a handler on
    /// an event loop, which must not wait, nor start a task to wait for it.
    func whenDurable(
        _ ticket: Ticket, timeout: Duration, on eventLoop: any EventLoop, _ done: @escaping @Sendable (Bool) -> Void
    ) {
        let id = newWaiterID()
        let deadline = eventLoop.scheduleTask(in: TimeAmount(timeout)) { [self] in giveUp(id) }
        wait(for: ticket, id: id, cancelled: { false }) { durable in
            deadline.cancel()
            eventLoop.execute { done(durable) }
        }
    }

    private func newWaiterID() -> Int {
        state.withLock { state in
            state.nextWaiter += 1
            return state.nextWaiter
        }
    }

    /// Registers `done` for `ticket`, or calls it at once when the answer is known.
    private func wait(for ticket: Ticket, id: Int, cancelled: () -> Bool, _ done: @escaping @Sendable (Bool) -> Void) {
        let answer: Bool? = state.withLock { state in
            if ticket.number <= state.durable { return true }
            if state.stopped || cancelled() { return false }
            state.waiters[id] = (ticket.number, done)
            return nil
        }
        if let answer { done(answer) }
    }

    /// A waiter that stops waiting is told false, unless it was told already.
    private func giveUp(_ id: Int) {
        state.withLock { $0.waiters.removeValue(forKey: id) }?.done(false)
    }

    /// Waits until everything submitted so far is durable (or the writer stopped).
    func flush() async {
        let last = state.withLock { $0.issued }
        _ = await waitDurable(Ticket(number: last))
    }

    /// The arcade's answer to ``Report/failing``: `images` reads every
    /// machine's whole state, on the caller's thread. Everything submitted
    /// before it is called is in what it returns (a machine submits under the
    /// lock it reads its image under), so those submissions are dropped from
    /// the queue but for their game records and ledger entries; what is submitted after is
    /// written after the rewrite.
    func rewrite(from images: () -> [DurableMachine]) {
        let covered: UInt64? = state.withLock { state in
            guard state.failing else { return nil }
            let covered = state.issued
            for submission in state.queue where submission.ticket <= covered { state.keepRecords(of: submission) }
            state.queue.removeAll { $0.ticket <= covered }
            return covered
        }
        guard let covered else { return }
        let images = images()
        state.withLock { state in
            // A rewrite handed over earlier covers less; this one replaces it.
            if (state.rewrite?.covered ?? 0) <= covered { state.rewrite = (covered, images) }
        }
        wake.signal()
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
            let (failing, rewrite) = state.withLock { ($0.failing, $0.rewrite) }
            if failing {
                if let rewrite, rewriteEverything(rewrite) {
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
                metadata: error.shape.metadata(["storage.path": .string(store.path)]))
            state.withLock { state in
                state.failing = true
                for submission in batch { state.keepRecords(of: submission) }
            }
            writable.store(false, ordering: .releasing)
            reporter.yield(.failing)
        }
    }

    /// While failing: every machine's whole state as the arcade handed it
    /// over, every game record not yet written, in one transaction. True
    /// when it was written.
    private func rewriteEverything(_ rewrite: (covered: UInt64, images: [DurableMachine])) -> Bool {
        let (covered, images) = rewrite
        do throws(StorageError) {
            if store.fileWasReplaced() {
                logger.error("The storage file was removed or replaced; opening it afresh", metadata: ["storage.path": .string(store.path)])
                try store.reopen()
            }
            let (games, money) = state.withLock { (Array($0.unsaved.values), $0.unsavedMoney) }
            // The images hold the newest state of open games: written last.
            try store.write(games.map(StoreChange.game) + money, images: images)
            state.withLock { state in
                state.failing = false
                state.rewrite = nil
                state.unsaved.removeAll()
                state.unsavedMoney.removeAll()
            }
            writable.store(true, ordering: .releasing)
            logger.notice("Storage writes succeed again; every machine's state was rewritten", metadata: ["storage.path": .string(store.path)])
            settle(upTo: covered, machines: Array(images.indices))
            return true
        } catch {
            logger.warning("Storage still failing", metadata: error.shape.metadata(["storage.path": .string(store.path)]))
            return false
        }
    }

    /// Tickets up to `ticket` are durable: says so to whoever waits for
    /// them, and reports which machines may now tell what waited.
    private func settle(upTo ticket: UInt64, machines indices: [Int]) {
        if ticket > durableMark.load(ordering: .relaxed) { durableMark.store(ticket, ordering: .releasing) }
        let ready = state.withLock { state in
            state.durable = max(state.durable, ticket)
            var ready: [@Sendable (Bool) -> Void] = []
            for (id, waiter) in state.waiters where waiter.ticket <= ticket {
                ready.append(waiter.done)
                state.waiters[id] = nil
            }
            return ready
        }
        for done in ready { done(true) }
        reporter.yield(.durable(machines: Array(Set(indices)).sorted()))
    }

    private func finish() {
        let (waiters, finished, lost) = state.withLock { state in
            state.stopped = true
            defer {
                state.waiters.removeAll()
                state.finished.removeAll()
            }
            return (
                state.waiters.values.map(\.done), state.finished, state.unsaved.count + state.unsavedMoney.count + state.queue.count
            )
        }
        if lost > 0 {
            logger.error("Storage stopped with writes it could not make", metadata: ["storage.unwritten": .stringConvertible(lost)])
        }
        for done in waiters { done(false) }
        reporter.finish()
        do throws(StorageError) {
            try store.close()
            logger.info("Storage closed", metadata: ["storage.path": .string(store.path)])
        } catch {
            logger.error("Storage not closed cleanly", metadata: error.shape.metadata())
        }
        for continuation in finished { continuation.resume() }
    }

    private struct FileReplaced: Error, CustomStringConvertible {
        var description: String { "the file was removed or replaced while open" }
    }
}

extension StorageWriter.State {
    /// Keeps the game records, ledger entries, prizes and audit entries of a write that
    /// did not happen; the rest of it is in the machines' images.
    fileprivate mutating func keepRecords(of submission: StorageWriter.Submission) {
        for change in submission.changes {
            switch change {
            case .game(let row): unsaved[row.id] = row
            case .ledger, .chainWallet, .stock, .prize, .parcel, .prizes, .audit, .correction, .holdClips: unsavedMoney.append(change)
            default: break
            }
        }
    }
}
