import DequeModule
import Foundation
import Logging
import Protocol
import ServiceLifecycle
import Synchronization

/// One reply on its way to a player.
struct OutboundReply: Sendable {
    var player: String
    /// The machine's IM account, the sender.
    var machineAccount: String
    /// The wire JSON.
    var attach: String
    var kind: ReplyKind = .turn
    /// Past this, sending it is pointless (an offer after its accept deadline).
    var expires: ContinuousClock.Instant?
}

/// What a reply tells its player, which decides when it goes out
/// (docs/PROTOCOL.md, "Which replies go first").
enum ReplyKind: Sendable, Equatable {
    /// The player's turn changed: an offer (11), a result (4), "it is your
    /// game" (8 with `0`), and the command 9 notices that answer no request
    /// (`offer_expired`, `no_result`, `machine_offline`, an operator's
    /// removal). These go first, whatever else is waiting.
    case turn
    /// A place in a queue (8): only the latest one of a player on a machine
    /// is worth sending, so a newer one replaces the one still waiting.
    case position
    /// Refusals (9 answering a request) and relayed acks (5).
    case other

    /// Classifies a machine's reply by its command, and for command 9 by
    /// whether it answers a request: the machine marks a notice high.
    init(_ reply: PlayerReply) {
        switch reply.message.code {
        case .turnOffer?, .result?:
            self = .turn
        case .queuePosition?:
            self = reply.message.data == "0" ? .turn : .position
        case .error?:
            let notice = reply.message.data.flatMap(ErrorCode.init(rawValue:)).map { !$0.isRefusal } ?? false
            self = notice || reply.priority == .high ? .turn : .other
        default:
            self = .other
        }
    }
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
/// - Turn replies (offers, results, notices) go ahead of everything else,
///   then queue positions, then refusals and relayed acks: neither one
///   player's refusals nor the positions of a crowded queue delay another
///   player's turn.
/// - A player's position on a machine coalesces: a newer one replaces the
///   one still waiting, in its place, and a turn reply to the player from
///   that machine drops it (counted `coalesced`). The positions waiting are
///   at most one per player and machine, however fast queues move.
/// - A reply whose moment has passed (an offer after its accept deadline) is
///   dropped and counted as `expired`, not sent.
/// - A reply that does not fit is counted as `overflow` and dropped, except
///   that a turn reply takes the place of the oldest refusal waiting (or,
///   with none, of the oldest position) and a position that of the oldest
///   refusal; a failed one is counted and logged, never retried (players'
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
    /// A flood of replies that do not fit, or of failures, is one log line
    /// now and then, with the count of those held back.
    private let warnings = LogLimiter()
    private let state = Mutex(State())

    private struct State {
        var turns = Deque<OutboundReply>()
        var positions = PositionLane()
        var others = Deque<OutboundReply>()
        /// Workers waiting for a reply.
        var idle: [CheckedContinuation<OutboundReply?, Never>] = []
        var closed = false

        var count: Int { turns.count + positions.count + others.count }

        mutating func take() -> OutboundReply? {
            turns.popFirst() ?? positions.popFirst() ?? others.popFirst()
        }

        /// Puts `reply` in its lane; says whether a waiting position gave way
        /// to it and what did not fit (`reply` itself or what it pushed out).
        mutating func put(_ reply: OutboundReply, capacity: Int) -> (coalesced: Bool, dropped: OutboundReply?) {
            switch reply.kind {
            case .turn:
                // What the player was told about their place there is out of date.
                let superseded = positions.remove(player: reply.player, machineAccount: reply.machineAccount)
                var displaced: OutboundReply?
                if count >= capacity {
                    // Full: a turn still takes the place of the oldest refusal, or else of the oldest position.
                    guard let oldest = others.popFirst() ?? positions.popFirst() else { return (superseded, reply) }
                    displaced = oldest
                }
                turns.append(reply)
                return (superseded, displaced)
            case .position:
                if positions.replace(reply) { return (true, nil) }
                var displaced: OutboundReply?
                if count >= capacity {
                    guard let oldest = others.popFirst() else { return (false, reply) }
                    displaced = oldest
                }
                positions.append(reply)
                return (false, displaced)
            case .other:
                if count >= capacity { return (false, reply) }
                others.append(reply)
                return (false, nil)
            }
        }

        mutating func removeAll() -> Int {
            defer {
                turns.removeAll()
                positions = PositionLane()
                others.removeAll()
            }
            return count
        }
    }

    /// Positions waiting, at most one per player and machine, in the order
    /// of the first one of each: a player whose place keeps changing keeps
    /// their turn to be told, and cannot push others back.
    private struct PositionLane {
        struct Key: Hashable {
            var player: String
            var machineAccount: String
        }

        private var order = Deque<Key>()
        private var latest: [Key: OutboundReply] = [:]

        var count: Int { latest.count }

        /// Replaces the reply waiting for the same player and machine; false
        /// when there is none.
        mutating func replace(_ reply: OutboundReply) -> Bool {
            let key = Key(player: reply.player, machineAccount: reply.machineAccount)
            guard latest[key] != nil else { return false }
            latest[key] = reply
            return true
        }

        /// Appends a reply for a player and machine with none waiting.
        mutating func append(_ reply: OutboundReply) {
            let key = Key(player: reply.player, machineAccount: reply.machineAccount)
            latest[key] = reply
            order.append(key)
        }

        /// Drops the reply waiting for the player and machine, if any.
        mutating func remove(player: String, machineAccount: String) -> Bool {
            let key = Key(player: player, machineAccount: machineAccount)
            guard latest.removeValue(forKey: key) != nil else { return false }
            // Turn replies are a few per game: scanning here keeps taking O(1).
            if let index = order.firstIndex(of: key) { order.remove(at: index) }
            return true
        }

        mutating func popFirst() -> OutboundReply? {
            guard let key = order.popFirst() else { return nil }
            return latest.removeValue(forKey: key)
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
            /// Buffered, in place of a waiting position (`coalesced`) or of
            /// `dropped`; or `dropped` itself.
            case queued(coalesced: Bool, dropped: OutboundReply?)
        }
        let outcome = state.withLock { state -> Outcome in
            if state.closed { return .queued(coalesced: false, dropped: reply) }
            // Workers wait only while the buffer is empty: nothing to coalesce with.
            if !state.idle.isEmpty { return .handed(state.idle.removeFirst()) }
            let (coalesced, dropped) = state.put(reply, capacity: capacity)
            return .queued(coalesced: coalesced, dropped: dropped)
        }
        switch outcome {
        case .handed(let worker):
            worker.resume(returning: reply)
        case .queued(let coalesced, let dropped):
            if coalesced { GatewayMetrics.reply(provider: delivery.provider, result: "coalesced") }
            guard let dropped else { return }
            GatewayMetrics.reply(provider: delivery.provider, result: "overflow")
            warnings.warning(
                "overflow", "Reply dropped: the reply queue is full or closed",
                ["player.accid": .string(dropped.player), "im.provider": .string(delivery.provider)],
                on: logger)
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
        let dropped = state.withLock { $0.removeAll() }
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
                    // Cancelled (the drain time ran out): what is left is counted unsent, not tried.
                    if Task.isCancelled { return .some(nil) }
                    if let reply = state.take() { return .some(reply) }
                    if state.closed { return .some(nil) }
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
            warnings.warning(
                "failed", "Reply to player failed",
                ErrorShape(code: "reply_failed", message: "The IM service did not take the reply", cause: reason).metadata([
                    "player.accid": .string(reply.player), "im.provider": .string(delivery.provider),
                ]),
                on: logger)
        }
    }
}
