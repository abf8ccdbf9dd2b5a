import Foundation
import Logging
import Protocol
import ServiceLifecycle
import Synchronization
import Testing

@testable import ClawGateway

/// The reply queue with a stand-in IM API: what goes first, what coalesces,
/// what is dropped, and how fast it stops.
@Suite struct ReplyQueueTests {
    /// An IM API that takes replies one at a time and waits for a go each time.
    final class GatedDelivery: ReplyDelivery {
        let provider: String
        /// `player` or `player:data` (positions, to tell them apart).
        let delivered = Recorder<String>()
        private let gate = Mutex<[CheckedContinuation<Void, Never>]>([])
        private let hangs: Bool
        /// Calls of a hanging API that were cancelled.
        let cancelled = Recorder<String>()

        /// `provider` names the metrics series: one per test keeps the
        /// counts of tests that run at the same time apart.
        init(provider: String = "test", hangs: Bool = false) {
            self.provider = provider
            self.hangs = hangs
        }

        func deliver(_ reply: OutboundReply) async -> ReplyResult {
            if hangs {
                // A dead API: the call ends only when the queue cancels it.
                let waiter = Mutex<CheckedContinuation<Void, Never>?>(nil)
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let cancelledAlready = waiter.withLock { slot -> Bool in
                            if Task.isCancelled { return true }
                            slot = continuation
                            return false
                        }
                        if cancelledAlready { continuation.resume() }
                    }
                } onCancel: {
                    waiter.withLock { slot in
                        defer { slot = nil }
                        return slot
                    }?.resume()
                }
                cancelled.append(reply.player)
                return .failed("cancelled")
            }
            await withCheckedContinuation { continuation in gate.withLock { $0.append(continuation) } }
            let position = reply.kind == .position ? (try? WireMessage.decode(Array(reply.attach.utf8)))?.data : nil
            delivered.append(position.map { "\(reply.player):\($0)" } ?? reply.player)
            return .sent
        }

        /// Lets the waiting delivery through.
        func release() async throws {
            try await eventually("a delivery to wait") { gate.withLock { !$0.isEmpty } }
            gate.withLock { $0.removeFirst() }.resume()
        }

        /// Lets deliveries through, one at a time, until `count` have been delivered.
        func release(until count: Int) async throws {
            try await eventually("\(count) deliveries") {
                if delivered.items.count >= count { return true }
                gate.withLock { $0.isEmpty ? nil : $0.removeFirst() }?.resume()
                return false
            }
        }

        var waiting: Int { gate.withLock { $0.count } }
    }

    static func reply(
        _ player: String, _ kind: ReplyKind, machine: String = "claw_m1", expires: ContinuousClock.Instant? = nil
    ) -> OutboundReply {
        OutboundReply(player: player, machineAccount: machine, attach: "{}", kind: kind, expires: expires)
    }

    static func position(_ player: String, _ place: Int, machine: String = "claw_m1") -> OutboundReply {
        OutboundReply(
            player: player, machineAccount: machine, attach: WireMessage(.queuePosition, data: String(place), length: 9).encodedString(),
            kind: .position)
    }

    static func run(_ queue: ReplyQueue, _ body: (ServiceGroup) async throws -> Void) async throws {
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [queue], logger: Logger(label: "test")))
        let running = Task { try await group.run() }
        try await body(group)
        await group.triggerGracefulShutdown()
        try await running.value
    }

    /// Runs `queue` with its one worker held by a first reply, so that what
    /// `body` enqueues waits in the buffer.
    static func runBusy(_ queue: ReplyQueue, _ api: GatedDelivery, _ body: () async throws -> Void) async throws {
        try await run(queue) { _ in
            queue.enqueue(reply("busy", .other))
            try await eventually("the worker to hold the first reply") { api.waiting == 1 }
            try await body()
        }
    }

    /// `claw_im_replies_total` of `provider` and `result`, as `/metrics` shows it.
    static func counted(_ provider: String, _ result: String) -> Double {
        var buffer: [UInt8] = []
        GatewayMetrics.registry.emit(into: &buffer)
        let series = #"claw_im_replies_total{provider="\#(provider)",result="\#(result)"} "#
        let line = String(decoding: buffer, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix(series) }
        return line.flatMap { Double($0.dropFirst(series.count)) } ?? 0
    }

    // MARK: Which goes first

    @Test func turnRepliesGoAheadOfPositionsAndPositionsAheadOfRefusals() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, logger: Logger(label: "test"))
        try await Self.runBusy(queue, api) {
            for index in 1...3 { queue.enqueue(Self.reply("refusal\(index)", .other)) }
            for index in 1...3 { queue.enqueue(Self.position("bot\(index)", index + 1)) }
            queue.enqueue(Self.reply("offer", .turn))
            queue.enqueue(Self.reply("result", .turn))
            try await api.release(until: 9)
            #expect(
                api.delivered.items == [
                    "busy", "offer", "result", "bot1:2", "bot2:3", "bot3:4", "refusal1", "refusal2", "refusal3",
                ])
        }
    }

    @Test func aReplyPastItsMomentIsDroppedNotSent() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, logger: Logger(label: "test"))
        try await Self.runBusy(queue, api) {
            queue.enqueue(Self.reply("stale offer", .turn, expires: ContinuousClock.now.advanced(by: .seconds(-1))))
            queue.enqueue(Self.reply("fresh offer", .turn, expires: ContinuousClock.now.advanced(by: .seconds(60))))
            try await api.release(until: 2)
            #expect(api.delivered.items == ["busy", "fresh offer"])
            try await eventually("the buffer to be empty") { queue.backlog == 0 }
        }
    }

    // MARK: Positions coalesce

    @Test func aPlayersPositionsCoalesceToTheLatestInTheirPlace() async throws {
        let api = GatedDelivery(provider: "test-coalesce")
        let queue = ReplyQueue(delivery: api, concurrency: 1, logger: Logger(label: "test"))
        let before = Self.counted("test-coalesce", "coalesced")
        try await Self.runBusy(queue, api) {
            queue.enqueue(Self.position("alice", 5))
            queue.enqueue(Self.position("bob", 6))
            queue.enqueue(Self.position("alice", 4))
            queue.enqueue(Self.position("carol", 7))
            queue.enqueue(Self.position("alice", 3))
            #expect(queue.backlog == 3, "one position per player")
            try await api.release(until: 4)
            #expect(api.delivered.items == ["busy", "alice:3", "bob:6", "carol:7"], "alice's newest, in her first one's place")
        }
        #expect(Self.counted("test-coalesce", "coalesced") - before == 2)
    }

    @Test func positionsOnTwoMachinesAreTwoPositions() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, logger: Logger(label: "test"))
        try await Self.runBusy(queue, api) {
            queue.enqueue(Self.position("alice", 5, machine: "claw_m1"))
            queue.enqueue(Self.position("alice", 9, machine: "claw_m2"))
            queue.enqueue(Self.position("alice", 4, machine: "claw_m1"))
            try await api.release(until: 3)
            #expect(api.delivered.items == ["busy", "alice:4", "alice:9"])
        }
    }

    @Test func aTurnReplyDropsThePlayersWaitingPositionOnThatMachine() async throws {
        let api = GatedDelivery(provider: "test-supersede")
        let queue = ReplyQueue(delivery: api, concurrency: 1, logger: Logger(label: "test"))
        let before = Self.counted("test-supersede", "coalesced")
        try await Self.runBusy(queue, api) {
            queue.enqueue(Self.position("alice", 1, machine: "claw_m1"))
            queue.enqueue(Self.position("alice", 3, machine: "claw_m2"))
            queue.enqueue(Self.position("bob", 2, machine: "claw_m1"))
            queue.enqueue(Self.reply("alice", .turn, machine: "claw_m1"))
            // After her offer, a new place (she left and joined again) is news again.
            queue.enqueue(Self.position("alice", 8, machine: "claw_m1"))
            try await api.release(until: 5)
            #expect(api.delivered.items == ["busy", "alice", "alice:3", "bob:2", "alice:8"])
        }
        #expect(Self.counted("test-supersede", "coalesced") - before == 1)
    }

    @Test func aFloodOfPositionsStaysOnePerPlayer() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, capacity: 300, logger: Logger(label: "test"))
        try await Self.runBusy(queue, api) {
            // 200 players, each told 50 places while the API is stuck on one call.
            for round in 0..<50 {
                for bot in 0..<200 { queue.enqueue(Self.position("bot\(bot)", 1000 - round)) }
            }
            queue.enqueue(Self.reply("offer", .turn))
            #expect(queue.backlog == 201, "nothing overflowed: 200 positions and the offer")
            try await api.release(until: 202)
            let delivered = api.delivered.items
            #expect(delivered[1] == "offer")
            #expect(delivered.dropFirst(2) == ArraySlice((0..<200).map { "bot\($0):951" }))
        }
    }

    // MARK: A full buffer

    @Test func aFullQueueRefusesMoreWithoutWaiting() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, capacity: 3, logger: Logger(label: "test"))
        try await Self.runBusy(queue, api) {
            for index in 1...10 { queue.enqueue(Self.reply("p\(index)", .other)) }
            #expect(queue.backlog == 3)
            try await api.release(until: 4)
            #expect(api.delivered.items == ["busy", "p1", "p2", "p3"])
        }
    }

    @Test func aFullQueueStillTakesAnOfferInPlaceOfTheOldestRefusal() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, capacity: 3, logger: Logger(label: "test"))
        try await Self.runBusy(queue, api) {
            for index in 1...3 { queue.enqueue(Self.reply("refusal\(index)", .other)) }
            queue.enqueue(Self.reply("offer", .turn))
            queue.enqueue(Self.reply("result", .turn))
            queue.enqueue(Self.reply("refusal4", .other))
            #expect(queue.backlog == 3)
            try await api.release(until: 4)
            #expect(api.delivered.items == ["busy", "offer", "result", "refusal3"], "refusal1 and 2 made room, refusal4 did not fit")
        }
    }

    @Test func aFullQueueTakesAnOfferInPlaceOfTheOldestPositionWhenNoRefusalWaits() async throws {
        let api = GatedDelivery(provider: "test-full-positions")
        let queue = ReplyQueue(delivery: api, concurrency: 1, capacity: 3, logger: Logger(label: "test"))
        let before = Self.counted("test-full-positions", "overflow")
        try await Self.runBusy(queue, api) {
            for bot in 1...3 { queue.enqueue(Self.position("bot\(bot)", bot)) }
            queue.enqueue(Self.position("bot4", 4))  // no room, no refusal to push out
            queue.enqueue(Self.position("bot2", 1))  // coalesces: needs no room
            queue.enqueue(Self.reply("offer", .turn))
            queue.enqueue(Self.reply("notice", .turn))
            queue.enqueue(Self.reply("result", .turn))
            queue.enqueue(Self.reply("another offer", .turn))  // the buffer is all turns: it does not fit
            #expect(queue.backlog == 3)
            try await api.release(until: 4)
            #expect(api.delivered.items == ["busy", "offer", "notice", "result"])
        }
        #expect(Self.counted("test-full-positions", "overflow") - before == 5, "bot4, bot1, bot2, bot3 and another offer")
    }

    @Test func aFullQueueTakesAPositionInPlaceOfTheOldestRefusal() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, capacity: 3, logger: Logger(label: "test"))
        try await Self.runBusy(queue, api) {
            for index in 1...2 { queue.enqueue(Self.reply("refusal\(index)", .other)) }
            queue.enqueue(Self.reply("offer", .turn))
            queue.enqueue(Self.position("bot1", 1))
            queue.enqueue(Self.position("bot2", 2))
            queue.enqueue(Self.position("bot3", 3))  // only turns and positions left: no room
            try await api.release(until: 4)
            #expect(api.delivered.items == ["busy", "offer", "bot1:1", "bot2:2"])
        }
    }

    // MARK: Stopping

    @Test(.timeLimit(.minutes(1)))
    func aDeadIMAPIDoesNotHoldUpTheStop() async throws {
        let api = GatedDelivery(hangs: true)
        let queue = ReplyQueue(delivery: api, concurrency: 2, drainTime: .milliseconds(200), logger: Logger(label: "test"))
        try await Self.run(queue) { _ in
            for index in 1...10 { queue.enqueue(Self.reply("p\(index)", .turn)) }
        }
        // The calls would never end by themselves: the stop cut them off after the drain time.
        #expect(api.cancelled.items.count == 2)
        #expect(queue.backlog == 0, "what was still buffered was counted and dropped")
    }

    /// A drain time of an hour: a stop that waited for it would hit the time limit.
    @Test(.timeLimit(.minutes(1)))
    func withNothingInFlightTheStopIsImmediate() async throws {
        let queue = ReplyQueue(delivery: GatedDelivery(), concurrency: 8, drainTime: .seconds(3600), logger: Logger(label: "test"))
        try await Self.run(queue) { _ in }
    }

    @Test func aClosedQueueTakesNothing() async throws {
        let api = GatedDelivery()
        let queue = ReplyQueue(delivery: api, concurrency: 1, logger: Logger(label: "test"))
        try await Self.run(queue) { _ in }
        queue.enqueue(Self.reply("late", .turn))
        #expect(queue.backlog == 0)
        #expect(api.delivered.items.isEmpty)
    }

    // MARK: What a reply is

    struct Case: Sendable, CustomTestStringConvertible {
        var message: WireMessage
        var priority: PlayerReply.Priority
        var kind: ReplyKind
        var testDescription: String { "\(message.encodedString()) \(priority) → \(kind)" }

        init(_ message: WireMessage, _ priority: PlayerReply.Priority, _ kind: ReplyKind) {
            self.message = message
            self.priority = priority
            self.kind = kind
        }
    }

    @Test(arguments: [
        Case(WireMessage(.turnOffer, data: "m1-1", serial: 1, timeout: 10), .high, .turn),
        Case(WireMessage(.result, data: "true", session: "m1-1"), .high, .turn),
        Case(WireMessage(.queuePosition, data: "0", length: 3), .high, .turn),
        Case(WireMessage(.queuePosition, data: "3", length: 3), .high, .position),
        Case(WireMessage(.error, data: "offer_expired", message: "passed"), .high, .turn),
        Case(WireMessage(.error, data: "no_result", message: "lost"), .high, .turn),
        // Even if a machine forgot to mark them: these two answer no request.
        Case(WireMessage(.error, data: "offer_expired", message: "passed"), .normal, .turn),
        Case(WireMessage(.error, data: "no_result", message: "lost"), .normal, .turn),
        Case(WireMessage(.error, data: "machine_offline", message: "gone"), .high, .turn),
        Case(WireMessage(.error, data: "not_your_turn", message: "an operator ended it"), .high, .turn),
        Case(WireMessage(.error, data: "machine_offline", serial: 4, message: "gone"), .normal, .other),
        Case(WireMessage(.error, data: "not_your_turn", serial: 5, message: "wait"), .normal, .other),
        Case(WireMessage(.error, data: "rate_limited", message: "slow down"), .normal, .other),
        Case(WireMessage(.ack, data: "ok", serial: 6), .normal, .other),
        // Odd or hostile content never jumps the line.
        Case(WireMessage(.error, data: "no_such_code", message: "?"), .normal, .other),
        Case(WireMessage(.error), .normal, .other),
        Case(WireMessage(command: 99, data: "0"), .normal, .other),
    ])
    func whatAReplyIs(_ example: Case) {
        let reply = PlayerReply(
            to: PlayerAddress(accid: "alice", provider: "netease"), message: example.message, priority: example.priority, expires: nil)
        #expect(ReplyKind(reply) == example.kind)
    }
}
