import DequeModule
import Protocol
import Synchronization

/// The copies a router has published and waits on (SPEC §9): each for the
/// receipt of the site it was sent to, until its deadline.
///
/// A receipt counts only when it comes on the `inbox/ack` of the site the
/// copy went to: every site shares the IM app's secret, but on the cluster
/// each site is only itself, and one site's receipt for another's copy
/// would have the router answer 200 for a copy that was never played.
///
/// Deadlines are kept in the order they were set (every copy waits the same
/// `router.receipt_timeout`, so that is also their order in time), and one
/// loop, ``run()``, sleeps on the router's clock until the first is due:
/// no task per copy, nothing left sleeping when a receipt comes first.
final class ReceiptWaits: Sendable {
    enum Outcome: Sendable {
        case receipt(ChainReceipt)
        case timedOut
        case notPublished(String)
    }

    /// What became of a receipt.
    enum Delivery: Sendable, Equatable {
        case delivered
        /// No copy of this router waits on it (it came too late, or twice).
        case late
        /// It came on another site's `inbox/ack` than the copy went to: ignored.
        case wrongSite(expected: String)
    }

    private struct Waiting {
        var site: String
        var continuation: CheckedContinuation<Outcome, Never>
    }

    private struct State {
        var waiting: [String: Waiting] = [:]
        var deadlines: Deque<(id: String, at: Duration)> = []
        var closed = false
    }

    private let clock: GameClock
    private let state = Mutex(State())
    private let wakes: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation

    init(clock: GameClock) {
        self.clock = clock
        (wakes, wake) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
    }

    /// Publishes a copy with `publish` and waits for `site`'s receipt of
    /// `id` until `timeout` from now.
    func wait(id: String, site: String, timeout: Duration, publish: () throws(MQTTError) -> Void) async -> Outcome {
        let deadline = clock.now() + timeout
        return await withCheckedContinuation { continuation in
            let accepted = state.withLock { state -> Bool in
                guard !state.closed else { return false }
                state.waiting[id] = Waiting(site: site, continuation: continuation)
                state.deadlines.append((id, deadline))
                return true
            }
            guard accepted else {
                continuation.resume(returning: .timedOut)
                return
            }
            wake.yield()
            do throws(MQTTError) {
                try publish()
            } catch {
                take(id)?.resume(returning: .notPublished(error.message))
            }
        }
    }

    /// A receipt that came on `site`'s `inbox/ack`.
    func deliver(_ receipt: ChainReceipt, from site: String) -> Delivery {
        let found = state.withLock { state -> Result<CheckedContinuation<Outcome, Never>, DeliveryRefusal> in
            guard let waiting = state.waiting[receipt.id] else { return .failure(.late) }
            guard waiting.site == site else { return .failure(.wrongSite(waiting.site)) }
            state.waiting[receipt.id] = nil
            return .success(waiting.continuation)
        }
        switch found {
        case .success(let continuation):
            continuation.resume(returning: .receipt(receipt))
            return .delivered
        case .failure(.late):
            return .late
        case .failure(.wrongSite(let expected)):
            return .wrongSite(expected: expected)
        }
    }

    private enum DeliveryRefusal: Error {
        case late
        case wrongSite(String)
    }

    /// Copies waiting now.
    var count: Int { state.withLock { $0.waiting.count } }

    /// Answers every copy whose deadline has passed, until cancelled.
    func run() async {
        var wakes = wakes.makeAsyncIterator()
        while !Task.isCancelled {
            if let first = state.withLock({ $0.deadlines.first?.at }) {
                do { try await clock.sleep(first) } catch { return }
                expire(at: clock.now())
            } else if await wakes.next() == nil {
                return
            }
        }
    }

    private func expire(at now: Duration) {
        let due = state.withLock { state -> [CheckedContinuation<Outcome, Never>] in
            var due: [CheckedContinuation<Outcome, Never>] = []
            while let first = state.deadlines.first, first.at <= now {
                state.deadlines.removeFirst()
                if let waiting = state.waiting.removeValue(forKey: first.id) { due.append(waiting.continuation) }
            }
            return due
        }
        for continuation in due { continuation.resume(returning: .timedOut) }
    }

    /// Answers every copy still waiting with a timeout, and every later one
    /// at once: the router is stopping, and the IM service sends them again.
    func close() {
        let left = state.withLock { state -> [CheckedContinuation<Outcome, Never>] in
            state.closed = true
            state.deadlines = []
            defer { state.waiting = [:] }
            return state.waiting.values.map(\.continuation)
        }
        wake.finish()
        for continuation in left { continuation.resume(returning: .timedOut) }
    }

    private func take(_ id: String) -> CheckedContinuation<Outcome, Never>? {
        state.withLock { $0.waiting.removeValue(forKey: id)?.continuation }
    }
}
