import Foundation
import Logging
import Protocol
import Testing

@testable import ClawGateway

/// `claw/<m>/stats` and `claw/gateway/stats` (SPEC §4): what is counted,
/// how latency is summarised, the shape of the JSON, and the cadence on a
/// test clock. Over a real broker: `StatsOverMQTTTests`.
@Suite struct LatencySketchTests {
    @Test func quantilesAreWithinOneBucketAndTheMaximumIsExact() {
        var sketch = LatencySketch()
        for ms in 1...1000 { sketch.record(milliseconds: Double(ms)) }
        #expect(abs(sketch.quantile(0.5) - 500) <= 50)
        #expect(abs(sketch.quantile(0.99) - 990) <= 99)
        #expect(sketch.max == 1000)
        #expect(sketch.count == 1000)
    }

    @Test func oneSampleIsReportedAsItIsAndNoneAsZero() {
        var sketch = LatencySketch()
        #expect(sketch.quantile(0.5) == 0 && sketch.max == 0)
        sketch.record(milliseconds: 0.8)
        #expect(sketch.quantile(0.5) == 0.8)
        #expect(sketch.quantile(0.99) == 0.8)
        sketch.reset()
        #expect(sketch.count == 0 && sketch.quantile(0.99) == 0)
    }

    @Test func hostileSamplesAreIgnoredOrClamped() {
        var sketch = LatencySketch()
        sketch.record(milliseconds: .nan)
        sketch.record(milliseconds: -1)
        sketch.record(milliseconds: .infinity)
        #expect(sketch.count == 0)
        sketch.record(milliseconds: 1e12)  // beyond the last bucket
        sketch.record(milliseconds: 0)
        #expect(sketch.count == 2)
        #expect(sketch.max == 1e12)
        #expect(sketch.quantile(0.5) <= LatencySketch.base, "in the first bucket")
    }
}

@Suite struct StatsReportTests {
    static let report = MachineStatsReport(
        machine: "m1", ts: "2026-11-21T10:00:30.000Z", intervalSeconds: 3, online: true, state: .playing, queueLength: 1,
        commands: 12, dropped: ["rate_limited": 1, "not_your_turn": 2], acks: 12, ackTimeouts: 0,
        ackLatencyMs: LatencySummary(p50: 0.8, p99: 2.1, max: 2.4), gamesToday: 31, winsToday: 4)

    @Test func theMachineReportIsSpecShapedAndReadsBack() throws {
        let text = String(decoding: Self.report.encoded(), as: UTF8.self)
        #expect(
            text
                == #"{"machine":"m1","ts":"2026-11-21T10:00:30.000Z","interval_s":3,"online":true,"state":"playing","queue_length":1,"#
                + #""commands":12,"dropped":{"not_your_turn":2,"rate_limited":1},"acks":12,"ack_timeouts":0,"#
                + #""ack_latency_ms":{"p50":0.8,"p99":2.1,"max":2.4},"games_today":31,"wins_today":4}"#)
        #expect(try JSONDecoder().decode(MachineStatsReport.self, from: Data(text.utf8)) == Self.report)
    }

    @Test func theGatewayReportReadsBack() throws {
        let report = GatewayStatsReport(
            gateway: "arcade-1", ts: "2026-11-21T10:00:30.000Z", intervalSeconds: 1.5, uptimeSeconds: 3600,
            notifications: ["netease": ["forwarded": 10, "unauthorized": 1], "generic": [:]], replies: ["sent": 9, "failed": 0],
            mqttReconnects: 1)
        let text = String(decoding: report.encoded(), as: UTF8.self)
        #expect(text.contains(#""interval_s":1.5,"uptime_s":3600,"notifications":{"generic":{},"netease":{"forwarded":10,"unauthorized":1}}"#))
        #expect(try JSONDecoder().decode(GatewayStatsReport.self, from: Data(text.utf8)) == report)
    }

    @Test func figuresAreWrittenToTheMicrosecondAndNeverAsNaN() {
        func written(_ value: Double) -> String {
            var report = Self.report
            report.ackLatencyMs = LatencySummary(p50: value, p99: 0, max: 0)
            let text = String(decoding: report.encoded(), as: UTF8.self)
            let start = text.range(of: #""p50":"#)!.upperBound
            return String(text[start...].prefix { $0 != "," })
        }
        #expect(written(0) == "0")
        #expect(written(3) == "3")
        #expect(written(0.8) == "0.8")
        #expect(written(2.1256) == "2.126")
        #expect(written(0.0004) == "0")
        #expect(written(1234.05) == "1234.05")
        #expect(written(.nan) == "0")
        #expect(written(-2) == "0")
        #expect(written(.infinity) == "0")
    }
}

@Suite struct MachineStatsTests {
    /// Shanghai: local midnight is 16:00 UTC.
    static let calendar: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "Asia/Shanghai")!
        return calendar
    }()

    static func utc(_ text: String) -> Date {
        ISO8601DateFormatter().date(from: text)!
    }

    @Test func todayRunsFromLocalMidnightAndStartsFromStorage() {
        let midnight = Self.calendar.startOfDay(for: Self.utc("2026-11-21T15:00:00Z"))
        #expect(midnight == Self.utc("2026-11-20T16:00:00Z"))
        let stats = MachineStats(today: MachineStats.Today(day: midnight, games: 5, wins: 1), calendar: Self.calendar)
        var accepted = GameEvent(type: .accepted, seq: 1, ts: "", machine: "m1")
        accepted.session = "s1"
        var won = GameEvent(type: .gameEnded, seq: 2, ts: "", machine: "m1")
        won.outcome = .won
        var lost = won
        lost.outcome = .lost
        stats.record(accepted, at: Self.utc("2026-11-21T15:59:00Z"))
        stats.record(won, at: Self.utc("2026-11-21T15:59:30Z"))
        stats.record(accepted, at: Self.utc("2026-11-21T15:59:40Z"))
        stats.record(lost, at: Self.utc("2026-11-21T15:59:50Z"))
        #expect(stats.take(at: Self.utc("2026-11-21T15:59:59Z")).1.games == 7)
        #expect(stats.take(at: Self.utc("2026-11-21T15:59:59Z")).1.wins == 2)
        // Local midnight passes: the day's counts start again.
        let after = stats.take(at: Self.utc("2026-11-21T16:00:01Z")).1
        #expect(after == MachineStats.Today(day: Self.utc("2026-11-21T16:00:00Z")))
        stats.record(accepted, at: Self.utc("2026-11-21T16:05:00Z"))
        #expect(stats.take(at: Self.utc("2026-11-21T16:06:00Z")).1.games == 1)
    }

    @Test func anIntervalCountsWhatHappenedInItOnly() {
        let stats = MachineStats(today: MachineStats.Today(day: Date(timeIntervalSince1970: 0)))
        stats.commandSent()
        stats.commandSent()
        stats.dropped(.rateLimited)
        var ack = GameEvent(type: .ack, seq: 1, ts: "", machine: "m1")
        ack.latencyMs = 4
        stats.record(ack, at: Date())
        var dropped = GameEvent(type: .dropped, seq: 2, ts: "", machine: "m1")
        dropped.reason = "not_your_turn"
        stats.record(dropped, at: Date())
        stats.record(GameEvent(type: .ackTimeout, seq: 3, ts: "", machine: "m1"), at: Date())
        let first = stats.take(at: Date()).0
        #expect(first.commands == 2)
        #expect(first.dropped == [.rateLimited: 1, .notYourTurn: 1])
        #expect(first.acks == 1 && first.ackTimeouts == 1)
        #expect(first.latency == LatencySummary(p50: 4, p99: 4, max: 4))
        #expect(stats.take(at: Date()).0 == MachineStats.Interval(), "the next interval starts from zero")
    }
}

/// The stats loop over a whole machine on a test clock: the figures of each
/// interval, published at each multiple of it, with an expiry of one interval.
@Suite struct StatsServiceTests {
    struct Published: Sendable {
        var topic: String
        var payload: [UInt8]
        var expiry: UInt32
    }

    @Test func eachIntervalEveryMachineAndTheGatewayReport() async throws {
        let game = try await GameHarness.online()
        let published = Recorder<Published>()
        let service = StatsService(
            arcade: game.arcade, interval: .seconds(3), gatewayID: "test", topics: Topics(), clock: game.gameClock,
            start: game.gameClock.now(), connects: { 1 },
            publish: { topic, payload, expiry in published.append(Published(topic: topic, payload: payload, expiry: expiry)) },
            logger: Logger(label: "test"))
        let loop = Task { try await service.run() }

        try await game.play("alice")
        let coins = try #require(game.commands.last?.serial)
        await game.advance(by: .milliseconds(2))
        await game.ack(coins)
        await game.send("alice", #"{"command":1,"data":"left","serial":1}"#)
        await game.send("bob", #"{"command":1,"data":"left","serial":1}"#)
        let move = try #require(game.commands.last?.serial)
        await game.advance(by: .milliseconds(10))
        await game.ack(move)
        #expect(published.items.isEmpty, "nothing before the first interval ends")

        await game.advance(by: .seconds(3) - .milliseconds(12))
        try await eventually("the first round of stats") { published.items.count == 2 }
        let first = try JSONDecoder().decode(MachineStatsReport.self, from: Data(published.items[0].payload))
        #expect(published.items[0].topic == "claw/m1/stats")
        #expect(published.items[0].expiry == 3)
        #expect(first.intervalSeconds == 3)
        #expect(first.ts == Timestamp.string(GameHarness.epoch.addingTimeInterval(3)))
        #expect(first.state == .playing && first.online && first.queueLength == 0)
        #expect(first.commands == 2, "the coins and the move")
        #expect(first.acks == 2)
        #expect(first.dropped == ["not_your_turn": 1])
        #expect(first.ackLatencyMs.max == 10)
        #expect(first.ackLatencyMs.p50 >= 2 && first.ackLatencyMs.p50 <= 2.2)
        #expect(first.gamesToday == 1 && first.winsToday == 0)
        let gateway = try JSONDecoder().decode(GatewayStatsReport.self, from: Data(published.items[1].payload))
        #expect(published.items[1].topic == "claw/gateway/stats")
        #expect(gateway.uptimeSeconds == 3 && gateway.mqttReconnects == 0)
        #expect(Set(gateway.notifications.keys).isSuperset(of: ["netease", "generic"]))

        // An idle interval: zeros, not silence; today's counts stay.
        await game.advance(by: .seconds(3))
        try await eventually("the second round") { published.items.count == 4 }
        let second = try JSONDecoder().decode(MachineStatsReport.self, from: Data(published.items[2].payload))
        #expect(second.commands == 0 && second.acks == 0 && second.dropped.isEmpty)
        #expect(second.ackLatencyMs == .zero)
        #expect(second.gamesToday == 1)
        #expect(second.ts == Timestamp.string(GameHarness.epoch.addingTimeInterval(6)))

        loop.cancel()
        _ = try? await loop.value
        await game.stop()
    }

    @Test func zeroTurnsTheStatsOff() async throws {
        let game = try await GameHarness.online()
        let published = Recorder<Published>()
        let service = StatsService(
            arcade: game.arcade, interval: .zero, gatewayID: "test", topics: Topics(), clock: game.gameClock,
            start: game.gameClock.now(), connects: { 1 },
            publish: { topic, payload, expiry in published.append(Published(topic: topic, payload: payload, expiry: expiry)) },
            logger: Logger(label: "test"))
        let loop = Task { try await service.run() }
        for _ in 0..<10 { await game.advance(by: .seconds(1)) }
        #expect(published.items.isEmpty)
        loop.cancel()
        _ = try? await loop.value
        await game.stop()
    }
}

/// SPEC §12's `claw_machine_faults_total{machine,code}`: a PC that reports a
/// new code with every fault cannot make series without end.
@Suite struct FaultCodeLabelTests {
    @Test func aMachinesFirstCodesAreTheirOwnAndTheRestOther() {
        let labels = FaultCodeLabels()
        let codes = (0..<FaultCodeLabels.limit).map { "code-\($0)" }
        #expect(codes.map(labels.label) == codes)
        #expect(labels.label("code-0") == "code-0", "a code seen keeps its series")
        #expect(labels.label("one-too-many") == "other" && labels.label("another") == "other")
        #expect(FaultCodeLabels().label("claw_rise_timeout") == "claw_rise_timeout", "each machine has its own")
    }
}
