import Clocks
import Foundation
import Logging
import Protocol
import Testing

@testable import ClawGateway

/// The plain parts of the evidence (SPEC §14): which segments make a clip,
/// the Range header a browser sends, an operator's hold.
@Suite struct EvidenceTests {
    static func segments(_ starts: [Double]) -> [(start: Date, url: URL)] {
        starts.map { (Date(timeIntervalSince1970: $0), URL(fileURLWithPath: "/ring/\(Int($0)).ts")) }
    }

    static func at(_ seconds: Double) -> Date { Date(timeIntervalSince1970: seconds) }

    @Test func aClipTakesTheSegmentsItsWindowOverlaps() throws {
        let ring = Self.segments([100, 102, 104, 106, 108])
        let plan = try #require(ClipPlan.make(segments: ring, from: Self.at(103), to: Self.at(107), segmentSeconds: 2))
        #expect(plan.files.map(\.lastPathComponent) == ["102.ts", "104.ts", "106.ts"])
        #expect(plan.offset == 1 && plan.duration == 4)
        // The window begins before the ring: from its first segment.
        let early = try #require(ClipPlan.make(segments: ring, from: Self.at(90), to: Self.at(101), segmentSeconds: 2))
        #expect(early.files.map(\.lastPathComponent) == ["100.ts"] && early.offset == 0 && early.duration == 1)
        // The last segment runs for a segment's length.
        let late = try #require(ClipPlan.make(segments: ring, from: Self.at(109), to: Self.at(112), segmentSeconds: 2))
        #expect(late.files.map(\.lastPathComponent) == ["108.ts"] && late.offset == 1)
    }

    @Test func noSegmentOfTheWindowIsNoClip() {
        #expect(ClipPlan.make(segments: [], from: Self.at(0), to: Self.at(10), segmentSeconds: 2) == nil)
        let ring = Self.segments([100, 102])
        #expect(ClipPlan.make(segments: ring, from: Self.at(80), to: Self.at(99), segmentSeconds: 2) == nil)
        #expect(ClipPlan.make(segments: ring, from: Self.at(104), to: Self.at(110), segmentSeconds: 2) == nil)
    }

    @Test func rangesAsBrowsersSendThem() {
        #expect(ByteRange.parse("bytes=0-99", size: 1000).map { [$0.0, $0.1] } == [0, 99])
        #expect(ByteRange.parse("bytes=900-", size: 1000).map { [$0.0, $0.1] } == [900, 999])
        #expect(ByteRange.parse("bytes=-10", size: 1000).map { [$0.0, $0.1] } == [990, 999])
        #expect(ByteRange.parse("bytes=-5000", size: 1000).map { [$0.0, $0.1] } == [0, 999])
        #expect(ByteRange.parse("bytes=990-5000", size: 1000).map { [$0.0, $0.1] } == [990, 999])
        for bad in ["bytes=1000-", "bytes=5-2", "bytes=0-1,5-6", "items=0-1", "bytes=a-b", "bytes=-0", "bytes=-", ""] {
            #expect(ByteRange.parse(bad, size: 1000) == nil, "\(bad)")
        }
        #expect(ByteRange.parse("bytes=0-", size: 0) == nil)
    }

    @Test func aHoldNeedsAReasonAndReleasingNone() throws {
        typealias Routes = EvidenceRoutes<GatewayRequestContext>
        #expect(try Routes.holdBody(Array(#"{"hold":true,"reason":" ticket 42 "}"#.utf8)) == (true, "ticket 42"))
        #expect(try Routes.holdBody(Array(#"{"hold":false}"#.utf8)) == (false, nil))
        for bad in [#"{"hold":true}"#, #"{"hold":true,"reason":"  "}"#, #"{"reason":"x"}"#, #"{"hold":"yes"}"#, #"{"hold":true,"reason":"x","why":1}"#, "[]", "nope"] {
            #expect(throws: Refusal.self, "\(bad)") { try Routes.holdBody(Array(bad.utf8)) }
        }
    }
}

/// Retention (SPEC §14) on a real SQLite file and real files, with the clock
/// moved by hand: clips past `keep` go, then the oldest while over
/// `max_disk`; a held clip stays; a deleted clip's row says why.
@Suite struct EvidenceRetentionTests {
    @Test func oldClipsGoThenTheOldestOverTheDiskBoundAndHeldOnesStay() async throws {
        let directory = try TemporaryDirectory.make(prefix: "evidence")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try GameStore(path: GameHarness.databasePath(in: directory))
        let clock = TestClock<Duration>()
        let epoch = Date(timeIntervalSince1970: 1_795_000_000)
        let settings = EvidenceSettings(dir: directory.appendingPathComponent("evidence").path, keep: .seconds(3600), maxDisk: 3 << 20)
        let keeper = EvidenceKeeper(
            settings: settings, machines: [MachineConfig(id: "m1", name: "M1", imAccount: "claw_m1", cameras: [CameraConfig(id: "1")])],
            store: store, clock: .following(clock, from: epoch), logger: Logger(label: "test"))
        // Five games' clips of 1 MiB each, one a minute, the first two hours ago.
        let folder = keeper.dir.appendingPathComponent("m1")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var rows: [EvidenceRow] = []
        for (index, age) in [7200.0, 240, 180, 120, 60].enumerated() {
            let file = folder.appendingPathComponent("g\(index)-1.mp4")
            try Data(count: 1 << 20).write(to: file)
            rows.append(
                EvidenceRow(
                    game: "g\(index)", machine: "m1", camera: "1", path: file.path, durationSeconds: 30, bytes: 1 << 20,
                    endedAt: epoch.addingTimeInterval(-age)))
        }
        try await store.keep(rows)
        #expect(try await store.hold(machine: "m1", game: "g0", held: true, reason: "ticket 42") == 1)
        #expect(try await store.hold(machine: "m1", game: "g1", held: false, reason: nil) == 1)
        await keeper.sweep()
        // g0 is past keep but held; g1 and g2, the oldest unheld, go for max_disk: 3 MiB left with g0.
        let left = try await store.clipsOnDisk().map(\.game)
        #expect(left == ["g0", "g3", "g4"], "g1 and g2 deleted for max_disk")
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("g1-1.mp4").path))
        #expect(try await store.evidence(machine: "m1", game: "g1", camera: "1")?.missing == "deleted to keep the clips within max_disk")
        #expect(keeper.counts.diskBytes == 3 << 20 && keeper.counts.deleted == 2)
        // An hour later the rest are past keep; the held one stays.
        await clock.advance(by: .seconds(3600))
        await keeper.sweep()
        #expect(try await store.clipsOnDisk().map(\.game) == ["g0"])
        #expect(try await store.evidence(machine: "m1", game: "g4", camera: "1")?.missing == "deleted after 1h")
        #expect(try await store.hold(machine: "m1", game: "nope", held: true, reason: "x") == 0)
    }
}

/// A gateway stopped between a game's end and its clips (SPEC §13, §14):
/// started again, the keeper cuts what the ring still holds and, in a
/// chain, ships the games past the ring without clips: none is left unshipped.
@Suite struct EvidenceRecoveryTests {
    @Test func gamesThatEndedWhileStoppedGetTheirClipsOrShipWithout() async throws {
        let directory = try TemporaryDirectory.make(prefix: "evidence")
        defer { try? FileManager.default.removeItem(at: directory) }
        let store = try GameStore(path: GameHarness.databasePath(in: directory), shipsRecords: true, clipsFirst: ["m1"])
        let epoch = Date(timeIntervalSince1970: 1_795_000_000)
        func played(_ id: String, endedAgo: TimeInterval) -> GameRow {
            let ended = epoch.addingTimeInterval(-endedAgo)
            return GameRow(
                id: id, machine: "m1", player: "p", nick: "P", provider: "netease", offeredAt: ended.addingTimeInterval(-40),
                startedAt: ended.addingTimeInterval(-30), endedAt: ended, outcome: .lost, commands: 4)
        }
        // Ended two hours ago (its segments are gone) and a minute ago.
        try store.write([.game(played("old", endedAgo: 7200)), .game(played("recent", endedAgo: 60))])
        #expect(try await store.records(after: 0, limit: 10).isEmpty)

        let clock = TestClock<Duration>()
        let keeper = EvidenceKeeper(
            settings: EvidenceSettings(dir: directory.appendingPathComponent("evidence").path),
            machines: [MachineConfig(id: "m1", name: "M1", imAccount: "claw_m1", cameras: [CameraConfig(id: "1")])],
            store: store, clock: .following(clock, from: epoch), logger: Logger(label: "test"))
        let running = Task { await keeper.run() }
        defer { running.cancel() }
        var records: [(seq: Int64, game: GameRecord)] = []
        try await eventually("both games shipped") {
            records = try await store.records(after: 0, limit: 10)
            return records.count == 2
        }
        #expect(records.map(\.game.id) == ["old", "recent"], "the old one at once, the recent one with its clips")
        #expect(records[0].game.evidence == nil && records[0].game.evidenceMissing == nil)
        #expect(records[1].game.evidenceMissing == [EvidenceGap(camera: "1", reason: "the camera has no stream to record")])
        #expect(keeper.counts.missing == 1)
    }
}
