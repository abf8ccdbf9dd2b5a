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
        /// Keys `queueOffer` refuses with code 414, as NetEase refuses a bad parameter.
        var refusedKeys: Set<String> = []
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

    func refreshToken(accid: String) async throws(NetEaseAPIError) {
        try attempt("refresh \(accid)")
        state.withLock { $0.users[accid]?.token = "token-" + accid + "-refreshed" }
    }

    func onlineUserCount(room: Int64) async throws(NetEaseAPIError) -> Int {
        try attempt("get \(room)")
        return state.withLock { $0.online[room] ?? 0 }
    }

    func queueOffer(room: Int64, key: String, value: String) async throws(NetEaseAPIError) {
        try attempt("offer \(room) \(key)")
        if state.withLock({ $0.refusedKeys.contains(key) }) { throw .refused(code: 414, desc: "parameter error") }
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
            rooms: [ChatroomMirror.Room(machine: 0, machineID: "m1", chatroom: Self.room)], api: api,
            clock: .following(clock, from: Date(timeIntervalSince1970: 1_795_000_000)), logger: Logger(label: "test"))
        mirror.start { _ in start }
        return mirror
    }

    private func publish(_ mirror: ChatroomMirror, _ snapshot: QueueSnapshot) {
        mirror.snapshot(0, snapshot, payload: snapshot.encoded())
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

    /// A key NetEase refuses is skipped and counted, once, and the players behind it are mirrored.
    @Test func aKeyNetEaseRefusesIsSkippedAndThePlayersBehindItGoOn() async throws {
        let api = MemoryNetEase()
        api.state.withLock { $0.refusedKeys = ["bad"] }
        let clock = TestClock<Duration>()
        let skipped = metricValue("claw_chatroom_mirror_skipped_total")
        let mirror = mirror(api, clock: clock, start: snapshot(1, waiting: []))
        let task = Task { try await mirror.run() }
        defer { task.cancel() }
        try await eventually("the start's repair") { api.calls == ["list 3001"] }
        publish(mirror, snapshot(2, waiting: ["alice", "bad", "bob"]))
        try await eventually("alice and bob in the chatroom queue") { api.keys(Self.room) == ["alice", "bob"] }
        #expect(metricValue("claw_chatroom_mirror_skipped_total") == skipped + 1)
        // Time passes, the queue moves: the refused key is not offered again while its player waits.
        await clock.advance(by: .seconds(60))
        publish(mirror, snapshot(3, waiting: ["alice", "bad", "bob", "carol"]))
        try await eventually("carol too") { api.keys(Self.room) == ["alice", "bob", "carol"] }
        #expect(api.calls.filter { $0 == "offer 3001 bad" }.count == 1)
        #expect(!api.calls.contains { $0.hasPrefix("!") } && api.calls.filter { $0 == "list 3001" }.count == 1, "no failure, no repair")
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
/// A series' value in the process's registry; 0 while it does not exist yet
/// (a counter is created when first used, which may be by another test).
func metricValue(_ series: String) -> Int64 {
    var buffer: [UInt8] = []
    GatewayMetrics.registry.emit(into: &buffer)
    let line = String(decoding: buffer, as: UTF8.self).split(separator: "\n").first { $0.hasPrefix(series + " ") }
    return line.flatMap { $0.split(separator: " ").last }.flatMap { Int64($0) } ?? 0
}

@Suite struct TouristsTests {
    static let epoch = Date(timeIntervalSince1970: 1_795_000_000)

    private func tourists(
        _ api: MemoryNetEase, clock: TestClock<Duration>, ttl: Duration = .seconds(3600), sessions: AppServerSettings.Sessions = .secret
    ) throws -> (Tourists, GameStore) {
        let directory = try TemporaryDirectory.make(prefix: "tourists")
        let store = try GameStore(path: directory.appendingPathComponent("gateway.sqlite").path)
        let tourists = Tourists(
            store: store, accounts: api, ttl: ttl, sessions: sessions, clock: .following(clock, from: Self.epoch),
            logger: Logger(label: "test"))
        return (tourists, store)
    }

    private func address(_ text: String) throws -> ClientAddress? {
        TrustedProxies.none.client(peer: try SocketAddress(ipAddress: text, port: 4000), headers: [:])
    }

    private func created(_ outcome: Tourists.Outcome) throws -> (TouristAccount, String?) {
        guard case .created(let account, let sid) = outcome else { throw TimedOut(description: "no account created: \(outcome)") }
        return (account, sid)
    }

    /// SPEC §8: with `secret`, only the secret given with the account brings it back; the public account id does not.
    @Test func aSecretSidBringsTheAccountBackAndItsAccountIDDoesNot() async throws {
        let api = MemoryNetEase()
        let clock = TestClock<Duration>()
        let (tourists, store) = try tourists(api, clock: clock)
        let client = try address("10.0.0.1")

        let (first, secret) = try created(await tourists.login(sid: nil, client: client))
        let sid = try #require(secret)
        #expect(sid.utf8.count == 32 && sid.allSatisfy(\.isHexDigit), "128 random bits")
        #expect(first.accid.hasPrefix("tourist_") && first.accid.utf8.count <= 32)
        let kept = try #require(try await store.tourist(accid: first.accid))
        #expect(kept.sidHash == Tourists.hash(sid) && kept.sidHash != sid, "kept only as its hash")
        let rows = try await store.pool.read { db in try String.fetchAll(db, sql: "SELECT accid || nickname || token || sid_hash FROM tourists") }
        #expect(rows.allSatisfy { !$0.contains(sid) }, "the secret is nowhere in the file")

        await clock.advance(by: .seconds(1800))
        guard case .returning(let again) = await tourists.login(sid: sid, client: client) else {
            Issue.record("the secret did not bring the account back")
            return
        }
        #expect(again.accid == first.accid && again.token == first.token)
        #expect(again.expiresAt == Self.epoch.addingTimeInterval(1800 + 3600), "extended by the ttl")
        guard case .valid(let looked) = await tourists.lookup(sid: sid, client: client), looked.accid == first.accid else {
            Issue.record("the secret does not name the account on room/list")
            return
        }

        // Whoever read the account id in a chatroom queue gets a new account of their own, not this one.
        let (stranger, strangerSid) = try created(await tourists.login(sid: first.accid, client: try address("10.0.0.9")))
        #expect(stranger.accid != first.accid && strangerSid != sid)
        #expect(await tourists.lookup(sid: first.accid, client: try address("10.0.0.9")) == .invalid)

        await clock.advance(by: .seconds(3601))
        #expect(await tourists.lookup(sid: sid, client: client) == .invalid, "expired")
        let (other, _) = try created(await tourists.login(sid: sid, client: client))
        #expect(other.accid != first.accid)
    }

    /// `sessions: accid` is the demo's own behaviour: the account id is the sid.
    @Test func withAccidSessionsTheAccountIDIsTheSid() async throws {
        let api = MemoryNetEase()
        let clock = TestClock<Duration>()
        let (tourists, store) = try tourists(api, clock: clock, sessions: .accid)
        let client = try address("10.0.0.1")
        let (first, sid) = try created(await tourists.login(sid: nil, client: client))
        #expect(sid == nil, "no secret in the answer")
        #expect(try await store.tourist(accid: first.accid)?.sidHash == nil)
        guard case .returning(let again) = await tourists.login(sid: first.accid, client: client) else {
            Issue.record("the account id did not bring the account back")
            return
        }
        #expect(again.accid == first.accid && again.token == first.token)
        guard case .valid(let looked) = await tourists.lookup(sid: first.accid, client: client), looked.accid == first.accid else {
            Issue.record("the account id does not name the account on room/list")
            return
        }
    }

    @Test func tenNewAccountsPerAddressAMinute() async throws {
        let api = MemoryNetEase()
        let clock = TestClock<Duration>()
        let (tourists, _) = try tourists(api, clock: clock)
        let crowd = try address("10.0.0.2")
        for _ in 0..<10 { _ = try created(await tourists.login(sid: nil, client: crowd)) }
        #expect(await tourists.login(sid: nil, client: crowd) == .rateLimited(retryAfter: 60))
        _ = try created(await tourists.login(sid: nil, client: try address("10.0.0.3")))
        await clock.advance(by: .seconds(30))
        #expect(await tourists.login(sid: nil, client: crowd) == .rateLimited(retryAfter: 30))
        await clock.advance(by: .seconds(30))
        _ = try created(await tourists.login(sid: nil, client: crowd))
        #expect(api.calls.count == 12)
    }

    /// SPEC §8: a sid that is no live secret is counted per address; 10 in a minute → 429 for a minute, on every route.
    @Test func tenUnknownSidsBlockTheAddressForAMinute() async throws {
        let api = MemoryNetEase()
        let clock = TestClock<Duration>()
        let (tourists, _) = try tourists(api, clock: clock)
        let (_, secret) = try created(await tourists.login(sid: nil, client: try address("10.0.0.7")))
        let sid = try #require(secret)
        let guesser = try address("10.0.0.8")
        for guess in 0..<10 { #expect(await tourists.lookup(sid: "guess-\(guess)", client: guesser) == .invalid) }
        #expect(await tourists.lookup(sid: sid, client: guesser) == .blocked(retryAfter: 60), "even the right sid, for a minute")
        #expect(await tourists.login(sid: "guess", client: guesser) == .rateLimited(retryAfter: 60))
        #expect(await tourists.lookup(sid: sid, client: try address("10.0.0.7")) != .blocked(retryAfter: 60), "no other address")
        await clock.advance(by: .seconds(60))
        guard case .valid = await tourists.lookup(sid: sid, client: guesser) else {
            Issue.record("still blocked after a minute")
            return
        }
    }

    @Test func returningLoginsAreLimitedPerAddress() async throws {
        let api = MemoryNetEase()
        let clock = TestClock<Duration>()
        let (tourists, _) = try tourists(api, clock: clock)
        let client = try address("10.0.0.5")
        let sid = try #require(try created(await tourists.login(sid: nil, client: client)).1)
        for _ in 0..<Tourists.maxReturningPerMinute {
            guard case .returning = await tourists.login(sid: sid, client: client) else {
                Issue.record("refused within the budget")
                return
            }
        }
        #expect(await tourists.login(sid: sid, client: client) == .rateLimited(retryAfter: 60))
        await clock.advance(by: .seconds(60))
        guard case .returning = await tourists.login(sid: sid, client: client) else {
            Issue.record("still refused a minute later")
            return
        }
    }

    /// SPEC §8: expired tourists are deleted, their token refreshed first so that the one their client holds stops working.
    @Test func expiredTouristsHaveTheirTokenRefreshedAndAreDeleted() async throws {
        let api = MemoryNetEase()
        let clock = TestClock<Duration>()
        let (tourists, store) = try tourists(api, clock: clock)
        let client = try address("10.0.0.6")
        let (old, _) = try created(await tourists.login(sid: nil, client: client))
        await clock.advance(by: .seconds(1800))
        let (young, _) = try created(await tourists.login(sid: nil, client: client))
        await clock.advance(by: .seconds(1800))
        #expect(await tourists.sweep() == 1, "only the one whose hour is up")
        #expect(try await store.tourist(accid: old.accid) == nil)
        #expect(try await store.tourist(accid: young.accid) != nil)
        #expect(api.calls.contains("refresh \(old.accid)") && !api.calls.contains("refresh \(young.accid)"))
        #expect(api.state.withLock { $0.users[old.accid]?.token } != old.token, "the old token no longer works")

        // A refresh NetEase refuses keeps the tourist for the next sweep.
        await clock.advance(by: .seconds(1800))
        api.failing = true
        #expect(await tourists.sweep() == 0)
        #expect(try await store.tourist(accid: young.accid) != nil)
        api.failing = false
        #expect(await tourists.sweep() == 1)
        #expect(try await store.tourist(accid: young.accid) == nil)
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
