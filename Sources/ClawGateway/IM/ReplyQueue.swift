import DequeModule
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// One reply on its way to a player.
struct OutboundReply: Sendable {
    var player: String
    /// The machine's IM account, the sender.
    var machineAccount: String
    /// The wire JSON.
    var attach: String
    var priority: PlayerReply.Priority = .high
    /// Past this, sending it is pointless (an offer after its accept deadline).
    var expires: ContinuousClock.Instant?
}

/// Delivers one reply; returns a short result for the metrics and the log.
protocol ReplyDelivery: Sendable {
    var provider: String { get }
    func deliver(_ reply: OutboundReply) async -> ReplyResult
}

enum ReplyResult: Sendable, Equatable {
    case sent
    /// With the provider's code or the transport error, for the log.
    case failed(String)
}

/// Replies of one provider: a bounded buffer drained by a fixed number of
/// workers, so a slow or hanging IM API never holds up a game and never
/// grows memory without bound.
///
/// - Turn offers, results and queue positions go ahead of refusals and
///   relayed acks: a flood of one player's refusals cannot delay another
///   player's turn.
/// - A reply whose moment has passed (an offer after its accept deadline) is
///   dropped and counted as `expired`, not sent.
/// - A reply that does not fit is counted as `overflow` and dropped, except
///   that an offer, result or position takes the place of the oldest refusal
///   waiting; a failed one is counted and logged, never retried (players'
///   apps treat these notifications as online-only, like NetEase does).
///
/// It runs as a service: on graceful shutdown it stops taking replies, gives
/// the buffered ones `drainTime` to go out, then cancels what is still in
/// flight, so that a dead IM API cannot hold up the stop.
final class ReplyQueue: Service, Sendable {
    let delivery: any ReplyDelivery
    let concurrency: Int
    private let capacity: Int
    private let drainTime: Duration
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        var high = Deque<OutboundReply>()
        var normal = Deque<OutboundReply>()
        /// Workers waiting for a reply.
        var idle: [CheckedContinuation<OutboundReply?, Never>] = []
        var closed = false

        var count: Int { high.count + normal.count }

        mutating func take() -> OutboundReply? {
            high.popFirst() ?? normal.popFirst()
        }
    }

    init(delivery: any ReplyDelivery, concurrency: Int, capacity: Int = 10_000, drainTime: Duration = .seconds(3), logger: Logger) {
        self.delivery = delivery
        self.concurrency = max(1, concurrency)
        self.capacity = capacity
        self.drainTime = drainTime
        self.logger = logger
    }

    /// Hands a reply to the workers; never waits.
    func enqueue(_ reply: OutboundReply) {
        enum Outcome {
            case handed(CheckedContinuation<OutboundReply?, Never>)
            case queued
            /// Dropped: this one, or the refusal it replaced.
            case dropped(OutboundReply)
        }
        let outcome = state.withLock { state -> Outcome in
            if state.closed { return .dropped(reply) }
            if !state.idle.isEmpty { return .handed(state.idle.removeFirst()) }
            var displaced: OutboundReply?
            if state.count >= capacity {
                // Full: a reply that matters may still push out the oldest refusal.
                guard reply.priority == .high, let oldest = state.normal.popFirst() else { return .dropped(reply) }
                displaced = oldest
            }
            switch reply.priority {
            case .high: state.high.append(reply)
            case .normal: state.normal.append(reply)
            }
            return displaced.map(Outcome.dropped) ?? .queued
        }
        switch outcome {
        case .handed(let worker):
            worker.resume(returning: reply)
        case .queued:
            break
        case .dropped(let dropped):
            GatewayMetrics.reply(provider: delivery.provider, result: "overflow")
            logger.warning(
                "Reply dropped: the reply queue is full or closed",
                metadata: ["player.accid": .string(dropped.player), "im.provider": .string(delivery.provider)])
        }
    }

    /// Replies waiting to be sent.
    var backlog: Int { state.withLock { $0.count } }

    func run() async throws {
        // Children say whether they were a worker (true) or the drain timer.
        await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<concurrency {
                group.addTask { [self] in
                    while let reply = await next() {
                        if let expires = reply.expires, ContinuousClock.now >= expires {
                            GatewayMetrics.reply(provider: delivery.provider, result: "expired")
                            continue
                        }
                        await send(reply)
                    }
                    return true
                }
            }
            try? await gracefulShutdown()
            close()
            // What is buffered gets its time; past it, what is in flight is cancelled.
            group.addTask { [drainTime] in
                try? await Task.sleep(for: drainTime)
                return false
            }
            var working = concurrency
            while working > 0, let wasWorker = await group.next() {
                guard wasWorker else { break }
                working -= 1
            }
            group.cancelAll()
        }
        let dropped = state.withLock { state in
            defer {
                state.high.removeAll()
                state.normal.removeAll()
            }
            return state.count
        }
        if dropped > 0 {
            for _ in 0..<dropped { GatewayMetrics.reply(provider: delivery.provider, result: "overflow") }
            logger.warning(
                "Replies not sent before the stop", metadata: ["im.provider": .string(delivery.provider), "im.unsent": .stringConvertible(dropped)])
        }
    }

    /// The next reply for a worker; nil once closed and empty, or cancelled.
    private func next() async -> OutboundReply? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let answer: OutboundReply?? = state.withLock { state in
                    if let reply = state.take() { return .some(reply) }
                    if state.closed || Task.isCancelled { return .some(nil) }
                    state.idle.append(continuation)
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            wakeIdle()
        }
    }

    /// Takes no more replies; idle workers end once the buffer is empty.
    private func close() {
        state.withLock { $0.closed = true }
        wakeIdle()
    }

    private func wakeIdle() {
        let idle = state.withLock { state in
            defer { state.idle = [] }
            return state.idle
        }
        for worker in idle { worker.resume(returning: nil) }
    }

    private func send(_ reply: OutboundReply) async {
        let result = await delivery.deliver(reply)
        switch result {
        case .sent:
            GatewayMetrics.reply(provider: delivery.provider, result: "sent")
        case .failed(let reason):
            GatewayMetrics.reply(provider: delivery.provider, result: "failed")
            logger.warning(
                "Reply to player failed",
                metadata: [
                    "player.accid": .string(reply.player), "im.provider": .string(delivery.provider),
                    "im.error": .string(reason),
                ])
        }
    }
}
