import Foundation
import Logging
import ServiceLifecycle

/// One reply on its way to a player.
struct OutboundReply: Sendable {
    var player: String
    /// The machine's IM account, the sender.
    var machineAccount: String
    /// The wire JSON.
    var attach: String
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
/// grows memory without bound. A reply that does not fit is counted as
/// `overflow` and dropped; a failed one is counted and logged, never retried
/// (players' apps treat these notifications as online-only, like NetEase does).
///
/// It runs as a service: on graceful shutdown it stops taking replies and
/// gives the ones buffered `drainTime` to go out.
final class ReplyQueue: Service, Sendable {
    let delivery: any ReplyDelivery
    let concurrency: Int
    private let stream: AsyncStream<OutboundReply>
    private let continuation: AsyncStream<OutboundReply>.Continuation
    private let logger: Logger
    private let drainTime: Duration

    init(delivery: any ReplyDelivery, concurrency: Int, capacity: Int = 10_000, drainTime: Duration = .seconds(3), logger: Logger) {
        self.delivery = delivery
        self.concurrency = max(1, concurrency)
        (stream, continuation) = AsyncStream.makeStream(of: OutboundReply.self, bufferingPolicy: .bufferingOldest(capacity))
        self.logger = logger
        self.drainTime = drainTime
    }

    /// Hands a reply to the workers; never waits.
    func enqueue(_ reply: OutboundReply) {
        switch continuation.yield(reply) {
        case .enqueued:
            break
        case .dropped, .terminated:
            GatewayMetrics.reply(provider: delivery.provider, result: "overflow")
            logger.warning(
                "Reply dropped: the reply queue is full or closed",
                metadata: ["player.accid": .string(reply.player), "im.provider": .string(delivery.provider)])
        @unknown default:
            break
        }
    }

    func run() async throws {
        let deadline = DeadlineBox()
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<concurrency {
                    group.addTask { [self] in
                        for await reply in stream {
                            if let end = deadline.value, ContinuousClock.now > end {
                                GatewayMetrics.reply(provider: delivery.provider, result: "overflow")
                                continue
                            }
                            await send(reply)
                        }
                    }
                }
            }
        } onGracefulShutdown: { [continuation, drainTime] in
            deadline.set(ContinuousClock.now.advanced(by: drainTime))
            continuation.finish()
        }
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

import Synchronization

/// When buffered replies stop being worth sending, once shutdown began.
private final class DeadlineBox: Sendable {
    private let instant = Mutex<ContinuousClock.Instant?>(nil)
    var value: ContinuousClock.Instant? { instant.withLock { $0 } }
    func set(_ value: ContinuousClock.Instant) { instant.withLock { $0 = value } }
}
