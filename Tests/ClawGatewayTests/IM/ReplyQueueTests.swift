import Foundation
import Logging
import Protocol
import ServiceLifecycle
import Synchronization
import Testing

@testable import ClawGateway

/// The reply queue with a stand-in IM API: what goes first, what is dropped,
/// and how fast it stops.
@Suite struct ReplyQueueTests {
    /// An IM API that takes replies one at a time and waits for a go each time.
    final class GatedDelivery: ReplyDelivery {
        let provider = "test"
        let delivered = Recorder<String>()
        private let gate = Mutex<[CheckedContinuation<Void, Never>]>([])
        private let hangs: Bool

        init(hangs: Bool = false) {
            self.hangs = hangs
        }

        func deliver(_ reply: OutboundReply) async -> ReplyResult {
            if hangs {
                // A dead API: waits until cancelled.
                try? await Task.sleep(for: .seconds(3600))
                return .failed("cancelled")
            }
            await withCheckedContinuation { continuation in gate.withLock { $0.append(continuation) } }
            delivered.append(reply.player)
            return .sent
        }

        /// Lets the waiting delivery through.
        func release() async throws {
            try await eventually("a delivery to wait") { gate.withLock { !$0.isEmpty } }
            gate.withLock { $0.removeFirst() }.resume()
        }

        var waiting: Int { gate.withLock { $0.count } }
    }

    static func reply(_ player: String, _ priority: PlayerReply.Priority, expires: ContinuousClock.Instant? = nil) -> OutboundReply {
        OutboundReply(player: player, machineAccount: "claw_m1", attach: "{}", priority: priority, expires: expires)
    }

    static func run(_ queue: ReplyQueue, _ body: (ServiceGroup) async throws -> Void) async throws {
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [queue], logger: Logger(label: "test")))
        let running = Task { try await group.run() }
        try await body(group)
        await group.triggerGracefulShutdown()
        try await running.value
    }

    @Test func offersResultsAndPositionsGoAheadOfRefusals() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, logger: Logger(label: "test"))
        try await Self.run(queue) { _ in
            queue.enqueue(Self.reply("first", .normal))  // taken by the idle worker at once
            try await eventually("the worker to hold the first") { api.waiting == 1 }
            for index in 1...5 { queue.enqueue(Self.reply("flood\(index)", .normal)) }
            queue.enqueue(Self.reply("offer", .high))
            for _ in 0..<7 { try await api.release() }
            try await eventually("everything to be delivered") { api.delivered.items.count == 7 }
            #expect(api.delivered.items.prefix(2) == ["first", "offer"])
        }
    }

    @Test func aReplyPastItsMomentIsDroppedNotSent() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, logger: Logger(label: "test"))
        try await Self.run(queue) { _ in
            queue.enqueue(Self.reply("blocker", .normal))
            try await eventually("the worker to be busy") { api.waiting == 1 }
            queue.enqueue(Self.reply("stale offer", .high, expires: ContinuousClock.now.advanced(by: .seconds(-1))))
            queue.enqueue(Self.reply("fresh offer", .high, expires: ContinuousClock.now.advanced(by: .seconds(60))))
            try await api.release()
            try await api.release()
            try await eventually("the fresh offer") { api.delivered.items == ["blocker", "fresh offer"] }
            #expect(queue.backlog == 0)
        }
    }

    @Test func aDeadIMAPIDoesNotHoldUpTheStop() async throws {
        let queue = ReplyQueue(delivery: GatedDelivery(hangs: true), concurrency: 2, drainTime: .milliseconds(200), logger: Logger(label: "test"))
        let clock = ContinuousClock()
        let started = clock.now
        try await Self.run(queue) { _ in
            for index in 1...10 { queue.enqueue(Self.reply("p\(index)", .high)) }
        }
        #expect(clock.now - started < .seconds(5), "stopped after the drain time, not after the stuck calls")
    }

    @Test func withNothingInFlightTheStopIsImmediate() async throws {
        let queue = ReplyQueue(delivery: GatedDelivery(), concurrency: 8, drainTime: .seconds(30), logger: Logger(label: "test"))
        let clock = ContinuousClock()
        let started = clock.now
        try await Self.run(queue) { _ in }
        #expect(clock.now - started < .seconds(5), "no drain wait when nothing is buffered")
    }

    @Test func aFullQueueRefusesMoreWithoutWaiting() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, capacity: 3, logger: Logger(label: "test"))
        try await Self.run(queue) { _ in
            queue.enqueue(Self.reply("busy", .normal))
            try await eventually("the worker to be busy") { api.waiting == 1 }
            for index in 1...10 { queue.enqueue(Self.reply("p\(index)", .normal)) }
            #expect(queue.backlog == 3)
            for _ in 0..<4 { try await api.release() }
        }
    }

    @Test func aFullQueueStillTakesAnOfferInPlaceOfTheOldestRefusal() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, capacity: 3, logger: Logger(label: "test"))
        try await Self.run(queue) { _ in
            queue.enqueue(Self.reply("busy", .normal))
            try await eventually("the worker to be busy") { api.waiting == 1 }
            for index in 1...3 { queue.enqueue(Self.reply("refusal\(index)", .normal)) }
            queue.enqueue(Self.reply("offer", .high))
            queue.enqueue(Self.reply("result", .high))
            queue.enqueue(Self.reply("refusal4", .normal))
            #expect(queue.backlog == 3)
            for _ in 0..<4 { try await api.release() }
            try await eventually("the buffer delivered") { api.delivered.items.count == 4 }
            #expect(api.delivered.items == ["busy", "offer", "result", "refusal3"], "refusal1 and 2 made room, refusal4 did not fit")
        }
    }
}
