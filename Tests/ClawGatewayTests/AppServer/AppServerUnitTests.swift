import Clocks
import Foundation
import GRDB
import Logging
import NIOCore
import Protocol
import Synchronization
import Testing

@testable import ClawGateway

/// NetEase's accounts and chatrooms in memory, for the app server's parts
/// on a test clock: can be told to fail like an API that is unreachable.
final class MemoryNetEase: NetEaseAccounts, ChatroomAPI {
    struct State {
        var failing = false
        var users: [String: NetEaseUser] = [:]
        var queues: [Int64: [ChatroomQueueElement]] = [:]
        var online: [Int64: Int] = [:]
        /// Every call, `action room key` (or `action accid`), failed ones with a `!` in front.
        var calls: [String] = []
    }

    let state = Mutex(State())

    var failing: Bool {
        get { state.withLock { $0.failing } }
        set { state.withLock { $0.failing = newValue } }
    }

    var calls: [String] { state.withLock { $0.calls } }

    func keys(_ room: Int64) -> [String] { state.withLock { $0.queues[room, default: []].map(\.key) } }

    private func attempt(_ call: String) throws(NetEaseAPIError) {
        let failing = state.withLock { state in
            state.calls.append((state.failing ? "!" : "") + call)
            return state.failing
        }
        if failing { throw .unreachable("connection refused") }
    }

    func createUser(accid: String, name: String) async throws(NetEaseAPIError) -> NetEaseUser {
        try attempt("create \(accid)")
        let user = NetEaseUser(accid: accid, name: name, token: "token-" + accid)
        state.withLock { $0.users[accid] = user }
        return user
    }

    func onlineUserCount(room: Int64) async throws(NetEaseAPIError) -> Int {
        try attempt("get \(room)")
        return state.withLock { $0.online[room] ?? 0 }
    }

    func queueOffer(room: Int64, key: String, value: String) async throws(NetEaseAPIError) {
        try attempt("offer \(room) \(key)")
        state.withLock { state in
            if let index = state.queues[room, default: []].firstIndex(where: { $0.key == key }) {
                state.queues[room, default: []][index].value = value
            } else {
                state.queues[room, default: []].append(ChatroomQueueElement(key: key, value: value))
            }
        }
    }

    func queuePoll(room: Int64, key: String) async throws(NetEaseAPIError) {
        try attempt("poll \(room) \(key)")
        state.withLock { $0.queues[room, default: []].removeAll { $0.key == key } }
    }

    func queueList(room: Int64) async throws(NetEaseAPIError) -> [ChatroomQueueElement] {
        try attempt("list \(room)")
        return state.withLock { $0.queues[room, default: []] }
    }
}

@Suite struct ChatroomMirrorPlanTests {
    private func elements(_ keys: String...) -> [ChatroomQueueElement] {
        keys.map { ChatroomQueueElement(key: $0, value: #"{"nick":"\#($0)"}"#) }
    }

    @Test func aJoinIsOneOfferAndATurnOnePoll() {
        #expect(ChatroomMirror.plan(from: elements("a"), to: elements("a", "b")) == [.offer(elements("b")[0])])
        #expect(ChatroomMirror.plan(from: elements("a", "b"), to: elements("b")) == [.poll("a")])
        #expect(ChatroomMirror.plan(from: elements("a", "b", "c"), to: elements("a", "c")) == [.poll("b")])
        #expect(ChatroomMirror.plan(from: elements("a", "b"), to: elements("a", "b")).isEmpty)
    }

    @Test func whatIsOutOfOrderIsTakenOutAndOfferedAgainBehind() {
        let plan = ChatroomMirror.plan(from: elements("a", "b", "c"), to: elements("a", "c", "b"))
        #expect(plan == [.poll("b"), .offer(elements("b")[0])])
        let ghost = ChatroomMirror.plan(from: elements("ghost", "b"), to: elements("a", "b"))
        #expect(ghost == [.poll("ghost"), .poll("b"), .offer(elements("a")[0]), .offer(elements("b")[0])])
    }

    @Test func aChangedNickIsOfferedInPlace() {
        let renamed = [ChatroomQueueElement(key: "a", value: #"{"nick":"Alice"}"#)]
        #expect(ChatroomMirror.plan(from: elements("a"), to: renamed) == [.offer(renamed[0])])
    }

    @Test func elementsAreKeyedByAccountAndOthersByProvider() {
        let netease = ChatroomMirror.element(for: WaitingPlayer(accid: "alice", provider: "netease", nick: "Ali\"ce/"))
        #expect(netease.key == "alice")
        let decoded = try? JSONSerialization.jsonObject(with: Data(netease.value.utf8)) as? [String: String]
        #expect(decoded == ["nick": "Ali\"ce/"])
        #expect(ChatroomMirror.element(for: WaitingPlayer(accid: "bob", provider: "generic", nick: "")).key == "generic:bob")
        #expect(ChatroomMirror.element(for: WaitingPlayer(accid: "bob", provider: "generic", nick: "")).value == #"{"nick":"bob"}"#)
    }
}

/// The mirror as a service, on a test clock and an in-memory NetEase.
@Suite struct ChatroomMirrorTests {
    static let room: Int64 = 3001

    private func snapshot(_ seq: Int64, waiting: [String], player: String? = nil) -> QueueSnapshot {
        QueueSnapshot(
            machine: "m1", seq: seq, state: player == nil ? .idle : .offered, online: true, paused: false,
            player: player.map { CurrentPlayer(accid: $0, provider: "netease", nick: $0, session: "s", deadline: nil) },
            waiting: waiting.map { WaitingPlayer(accid: $0, provider: "netease", nick: $0) })
    }

    private func mirror(_ api: MemoryNetEase, clock: TestClock<Duration>, start: QueueSnapshot) -> ChatroomMirror {
        let mirror = ChatroomMirror(
            rooms: [ChatroomMirror.Room(machine: 0, machineID: "m1", chatroom: Self.room, topic: "claw/m1/queue")], api: api,
            clock: .following(clock, from: Date(timeIntervalSince1970: 1_795_000_000)), logger: Logger(label: "test"))
        mirror.start { _ in start }
        return mirror
    }

    private func publish(_ mirror: ChatroomMirror, _ snapshot: QueueSnapshot) {
        mirror.observe(topic: "claw/m1/queue", payload: snapshot.encoded())
    }

    @Test func followsJoinsLeavesAndTurnsInOrder() async throws {
        let api = MemoryNetEase()
        let clock = TestClock<Duration>()
        let mirror = mirror(api, clock: clock, start: snapshot(1, waiting: []))
        let task = Task { try await mirror.run() }
        defer { task.cancel() }
        try await eventually("the start's repair") { api.calls == ["list 3001"] }

        let steps: [(QueueSnapshot, [String])] = [
            (snapshot(2, waiting: ["alice"]), ["alice"]),
            (snapshot(3, waiting: ["alice", "bob"]), ["alice", "bob"]),
            (snapshot(4, waiting: ["alice", "bob", "carol"]), ["alice", "bob", "carol"]),
            // Alice is offered her turn: she leaves the chatroom queue.
            (snapshot(5, waiting: ["bob", "carol"], player: "alice"), ["bob", "carol"]),
            // Carol leaves; dave joins.
            (snapshot(6, waiting: ["bob"], player: "alice"), ["bob"]),
            (snapshot(7, waiting: ["bob", "dave"], player: "alice"), ["bob", "dave"]),
        ]
        for (snapshot, expected) in steps {
            publish(mirror, snapshot)
            try await eventually("the chatroom queue to be \(expected)") { api.keys(Self.room) == expected }
        }
        #expect(api.calls == [
            "list 3001", "offer 3001 alice", "offer 3001 bob", "offer 3001 carol", "poll 3001 alice", "poll 3001 carol",
            "offer 3001 dave",
        ])
        // An older snapshot (published before a newer one was seen) changes nothing.
        publish(mirror, snapshot(3, waiting: ["alice", "bob"]))
        publish(mirror, snapshot(8, waiting: ["bob", "dave", "erin"], player: "alice"))
        try await eventually("erin to join") { api.keys(Self.room) == ["bob", "dave", "erin"] }
    }

    @Test func aStaleChatroomQueueIsRepairedAtStart() async throws {
        let api = MemoryNetEase()
        api.state.withLock { state in
            state.queues[Self.room] = ["ghost", "bob", "alice"].map { ChatroomQueueElement(key: $0, value: #"{"nick":"\#($0)"}"#) }
        }
        let clock = TestClock<Duration>()
        let repairs = metricValue("claw_chatroom_mirror_repairs_total")
        let mirror = mirror(api, clock: clock, start: snapshot(9, waiting: ["alice", "bob"]))
        let task = Task { try await mirror.run() }
        defer { task.cancel() }
        try await eventually("the chatroom queue to be the gateway's") { api.keys(Self.room) == ["alice", "bob"] }
        #expect(metricValue("claw_chatroom_mirror_repairs_total") > repairs)
        #expect(api.calls.first == "list 3001")
    }

    @Test func failedCallsAreCountedAndRepairedOnceNetEaseAnswers() async throws {
        let api = MemoryNetEase()
        api.failing = true
        let clock = TestClock<Duration>()
        let listFailed = metricValue(#"claw_chatroom_mirror_calls_total{call="queueList",result="failed"}"#)
        let mirror = mirror(api, clock: clock, start: snapshot(1, waiting: ["alice"]))
        let task = Task { try await mirror.run() }
        defer { task.cancel() }
        try await eventually("the failed read to be counted") { metricValue(#"claw_chatroom_mirror_calls_total{call="queueList",result="failed"}"#) > listFailed }

        // Handing snapshots over never waits on the API, however it fails.
        let before = ContinuousClock.now
        for seq in 2...200 { publish(mirror, snapshot(Int64(seq), waiting: ["alice", "bob"])) }
        #expect(ContinuousClock.now - before < .seconds(1))

        // Meanwhile someone left a stray element in the chatroom queue.
        api.state.withLock { $0.queues[Self.room] = [ChatroomQueueElement(key: "stray", value: "{}")] }
        api.failing = false
        try await eventually("the repair after the API is back") {
            await clock.advance(by: .seconds(1))
            return api.keys(Self.room) == ["alice", "bob"]
        }
        let afterFailure = api.calls.drop { $0.hasPrefix("!") }
        #expect(afterFailure.first == "list 3001", "the first call after the failures reads the queue back")
        #expect(Array(afterFailure.dropFirst()) == ["poll 3001 stray", "offer 3001 alice", "offer 3001 bob"])
    }
}

/// A series' value on `/metrics` now, e.g. `claw_chatroom_mirror_repairs_total`.
func metricValue(_ series: String) -> Int64 {
    var buffer: [UInt8] = []
    GatewayMetrics.registry.emit(into: &buffer)
    let line = String(decoding: buffer, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix(series + " ") }
    return line.flatMap { $0.split(separator: " ").last }.flatMap { Int64($0) } ?? -1
}

@Suite struct TouristsTests {
    static let epoch = Date(timeIntervalSince1970: 1_795_000_000)

    private func tourists(_ api: MemoryNetEase, clock: TestClock<Duration>, ttl: Duration = .seconds(3600)) throws -> (Tourists, GameStore) {
        let directory = try TemporaryDirectory.make(prefix: "tourists")
        let store = try GameStore(path: directory.appendingPathComponent("gateway.sqlite").path)
        let wall = GameClock.following(clock, from: Self.epoch).wallNow
        return (Tourists(store: store, accounts: api, ttl: ttl, wallNow: wall, logger: Logger(label: "test")), store)
    }

    private func address(_ text: String) throws -> ClientAddress? {
        ClientAddress(try SocketAddress(ipAddress: text, port: 4000))
    }

    @Test func aNewTouristThenAReturningOneThenAnExpiredOne() async throws {
        let api = MemoryNetEase()
        let clock = TestClock<Duration>()
        let (tourists, store) = try tourists(api, clock: clock)
        let client = try address("10.0.0.1")

        guard case .created(let first) = await tourists.login(sid: nil, client: client) else {
            Issue.record("no account created")
            return
        }
        #expect(first.accid.hasPrefix("tourist_") && first.accid.utf8.count <= 32)
        #expect(first.token == "token-" + first.accid)
        #expect(first.expiresAt == Self.epoch.addingTimeInterval(3600))
        let kept = try await store.tourist(accid: first.accid)
        #expect(kept?.accid == first.accid && kept?.token == first.token && kept?.nickname == first.nickname, "kept durably")
        #expect(abs((kept?.expiresAt ?? .distantPast).timeIntervalSince(first.expiresAt)) < 0.001)

        await clock.advance(by: .seconds(1800))
        guard case .returning(let again) = await tourists.login(sid: first.accid, client: client) else {
            Issue.record("the returning tourist got another account")
            return
        }
        #expect(again.accid == first.accid && again.token == first.token && again.nickname == first.nickname)
        #expect(again.expiresAt == Self.epoch.addingTimeInterval(1800 + 3600), "extended by the ttl")
        let renewed = try await store.tourist(accid: first.accid)?.expiresAt ?? .distantPast
        #expect(abs(renewed.timeIntervalSince(again.expiresAt)) < 0.001)

        await clock.advance(by: .seconds(3601))
        #expect(await tourists.valid(first.accid, at: Self.epoch.addingTimeInterval(1800 + 3601)) == nil)
        guard case .created(let other) = await tourists.login(sid: first.accid, client: client) else {
            Issue.record("an expired sid did not get a new account")
            return
        }
        #expect(other.accid != first.accid)
        #expect(api.calls.filter { $0.hasPrefix("create") }.count == 2)
    }

    @Test func tenNewAccountsPerAddressAMinute() async throws {
        let api = MemoryNetEase()
        let clock = TestClock<Duration>()
        let (tourists, _) = try tourists(api, clock: clock)
        let crowd = try address("10.0.0.2")
        for _ in 0..<10 {
            guard case .created = await tourists.login(sid: nil, client: crowd) else {
                Issue.record("refused within the budget")
                return
            }
        }
        #expect(await tourists.login(sid: nil, client: crowd) == .rateLimited(retryAfter: 60))
        #expect(await tourists.login(sid: "nobody", client: crowd) == .rateLimited(retryAfter: 60))
        guard case .created = await tourists.login(sid: nil, client: try address("10.0.0.3")) else {
            Issue.record("another address was refused")
            return
        }
        await clock.advance(by: .seconds(30))
        #expect(await tourists.login(sid: nil, client: crowd) == .rateLimited(retryAfter: 30))
        await clock.advance(by: .seconds(30))
        guard case .created = await tourists.login(sid: nil, client: crowd) else {
            Issue.record("still refused a minute later")
            return
        }
        #expect(api.calls.count == 12)
    }

    @Test func aFailingAPIKeepsNothing() async throws {
        let api = MemoryNetEase()
        api.failing = true
        let clock = TestClock<Duration>()
        let (tourists, store) = try tourists(api, clock: clock)
        #expect(await tourists.login(sid: nil, client: try address("10.0.0.4")) == .failed)
        let kept = try await store.pool.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM tourists") }
        #expect(kept == 0)
    }
}

@Suite struct OnlineCountsTests {
    @Test func zeroUntilTheFirstAnswerThenAtMostEveryTenSeconds() async throws {
        let api = MemoryNetEase()
        api.state.withLock { $0.online = [1: 5, 2: 7] }
        let clock = TestClock<Duration>()
        let counts = OnlineCounts(
            rooms: [1, 2], api: api, clock: .following(clock, from: Date(timeIntervalSince1970: 0)), logger: Logger(label: "test"))
        #expect(counts.count(room: 1) == 0)
        let task = Task { try await counts.run() }
        defer { task.cancel() }
        try await eventually("the first counts") { counts.count(room: 1) == 5 && counts.count(room: 2) == 7 }
        api.state.withLock { $0.online = [1: 6, 2: 8] }
        await clock.advance(by: .seconds(9))
        #expect(api.calls == ["get 1", "get 2"])
        #expect(counts.count(room: 1) == 5)
        await clock.advance(by: .seconds(1))
        try await eventually("the next counts") { counts.count(room: 1) == 6 && counts.count(room: 2) == 8 }

        // A failed call keeps the last count.
        api.failing = true
        await clock.advance(by: .seconds(10))
        try await eventually("the failed calls") { api.calls.filter { $0.hasPrefix("!") }.count == 2 }
        #expect(counts.count(room: 2) == 8)
    }
}
