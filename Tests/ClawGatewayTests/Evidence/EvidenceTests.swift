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

/// Retention's rules as a plain function (SPEC §14): oldest first, held
/// clips never; past `keep`, over `max_disk`, or while the disk has less
/// than `min_free` free; each deletion counted as room won.
@Suite struct ClipRetentionTests {
    static let now = Date(timeIntervalSince1970: 1_795_000_000)
    static let settings = EvidenceSettings(dir: "/e", keep: .seconds(3600), maxDisk: 10 << 20, minFree: 4 << 20)

    static func clip(_ game: String, endedAgo: TimeInterval, mib: Int64, held: Bool = false) -> EvidenceRow {
        EvidenceRow(
            game: game, machine: "m1", camera: "1", path: "/e/m1/\(game)-1.mp4", durationSeconds: 30, bytes: mib << 20,
            endedAt: now.addingTimeInterval(-endedAgo), held: held)
    }

    static func plan(_ clips: [EvidenceRow], free: Int64?) -> [String] {
        ClipRetention.plan(clips: clips, now: now, settings: settings, free: free).deletions.map { "\($0.clip.game):\($0.reason)" }
    }

    @Test func minFreeTakesTheOldestUnheldUntilThereIsRoom() {
        let clips = [
            Self.clip("a", endedAgo: 600, mib: 1, held: true), Self.clip("b", endedAgo: 500, mib: 1), Self.clip("c", endedAgo: 400, mib: 2),
            Self.clip("d", endedAgo: 300, mib: 1),
        ]
        // 1 MiB free of the 4 min_free keeps: b (1) and c (2) make 4; a is held, d stays.
        #expect(Self.plan(clips, free: 1 << 20) == ["b:minFree", "c:minFree"])
        // Room enough: nothing goes; a disk that cannot be read deletes nothing for min_free.
        #expect(Self.plan(clips, free: 4 << 20).isEmpty)
        #expect(Self.plan(clips, free: nil).isEmpty)
        // Even every unheld clip is not room enough: they all go, the held one stays.
        #expect(Self.plan(clips, free: 0) == ["b:minFree", "c:minFree", "d:minFree"])
    }

    @Test func keepThenMaxDiskThenMinFreeEachSaysWhy() {
        let clips = [
            Self.clip("old", endedAgo: 7200, mib: 1), Self.clip("big1", endedAgo: 60, mib: 6), Self.clip("big2", endedAgo: 50, mib: 6),
            Self.clip("small", endedAgo: 40, mib: 1),
        ]
        // 14 MiB in all: old goes for keep (13 left), big1 for max_disk (7 ≤ 10); the 2 MiB free and the 7 won are room enough.
        let plan = ClipRetention.plan(clips: clips, now: Self.now, settings: Self.settings, free: 2 << 20)
        #expect(plan.deletions.map(\.clip.game) == ["old", "big1"])
        #expect(plan.deletions.map(\.reason) == [.expired, .maxDisk])
        #expect(plan.diskBytes == 7 << 20)
        // With 8 MiB to keep free and none free, the 7 won are not enough: big2 goes too, small stays.
        var tighter = Self.settings
        tighter.minFree = 8 << 20
        let tight = ClipRetention.plan(clips: clips, now: Self.now, settings: tighter, free: 0)
        #expect(tight.deletions.map(\.reason) == [.expired, .maxDisk, .minFree] && tight.diskBytes == 1 << 20)
        #expect(ClipRetention.text(.expired, Self.settings) == "deleted after 1h")
        #expect(ClipRetention.text(.maxDisk, Self.settings) == "deleted to keep the clips within max_disk")
        #expect(ClipRetention.text(.minFree, Self.settings) == "deleted to keep min_free (4MiB) free on the disk")
    }

    @Test func recordingStopsBelowMinFreeAndComesBackAnEighthAbove() {
        let minFree: Int64 = 8 << 20
        #expect(!DiskRoom.stops(free: minFree, minFree: minFree, stopped: false))
        #expect(DiskRoom.stops(free: minFree - 1, minFree: minFree, stopped: false))
        // Once stopped, min_free is not enough to start again: an eighth more is.
        #expect(DiskRoom.stops(free: minFree, minFree: minFree, stopped: true))
        #expect(DiskRoom.stops(free: DiskRoom.resumeAt(minFree) - 1, minFree: minFree, stopped: true))
        #expect(!DiskRoom.stops(free: DiskRoom.resumeAt(minFree), minFree: minFree, stopped: true))
        #expect(DiskRoom.resumeAt(minFree) == 9 << 20)
        // A disk that cannot be read changes nothing.
        #expect(DiskRoom.stops(free: nil, minFree: minFree, stopped: true) && !DiskRoom.stops(free: nil, minFree: minFree, stopped: false))
        #expect(DiskRoom.reason(free: 3 << 20, minFree: 2 << 30) == "less than min_free (2GiB) is free on the disk (3 MiB left)")
        let room = DiskRoom()
        #expect(room.set("low") && !room.set("lower") && room.problem == "lower" && room.set(nil) && !room.set(nil))
    }

    @Test func whatEachEndOfACutSays() {
        let settings = EvidenceSettings(dir: "/e", cutTimeout: .seconds(5))
        #expect(EvidenceKeeper.cutProblem(.status(0), settings: settings, full: nil) == nil)
        #expect(
            EvidenceKeeper.cutProblem(.status(1), settings: settings, full: "the disk is full (0 KiB free)")
                == .init(reason: "ffmpeg could not cut the clip (status 1): the disk is full (0 KiB free)", failed: true))
        #expect(EvidenceKeeper.cutProblem(.notStarted, settings: settings, full: nil)?.reason == "ffmpeg could not be started")
        #expect(
            EvidenceKeeper.cutProblem(.timedOut, settings: settings, full: nil)
                == .init(reason: "ffmpeg did not cut the clip within cut_timeout (5s): given up", failed: true))
    }
}

/// The keeper's bounds on a real SQLite file and real processes, with the
/// clock moved by hand (SPEC §14): a cutter that hangs is killed at
/// `cut_timeout` and its clip given up with the reason, and in a chain the
/// game's record ships without waiting for it; a disk below `min_free`
/// loses its oldest unheld clips, then recording and cutting stop, saying so.
@Suite struct EvidenceBoundsTests {
    static let epoch = Date(timeIntervalSince1970: 1_795_000_000)

    /// A store with one started game of m1 that ended a minute ago, and a
    /// keeper of m1's camera 1 (a stream it never pulls) whose ring holds
    /// the segments of that game.
    static func keeper(
        _ directory: URL, settings: (inout EvidenceSettings) -> Void = { _ in }, ffmpeg: String?, clock: TestClock<Duration>
    ) throws -> (EvidenceKeeper, GameStore) {
        let store = try GameStore(path: GameHarness.databasePath(in: directory), shipsRecords: true, clipsFirst: ["m1"])
        let ended = epoch.addingTimeInterval(-60)
        try store.write([
            .game(
                GameRow(
                    id: "g1", machine: "m1", player: "p", nick: "P", provider: "netease", offeredAt: ended.addingTimeInterval(-40),
                    startedAt: ended.addingTimeInterval(-30), endedAt: ended, outcome: .won, commands: 3))
        ])
        var evidence = EvidenceSettings(dir: directory.appendingPathComponent("evidence").path, cutTimeout: .seconds(5))
        settings(&evidence)
        let keeper = EvidenceKeeper(
            settings: evidence,
            machines: [MachineConfig(id: "m1", name: "M1", imAccount: "claw_m1", cameras: [CameraConfig(id: "1", stream: "rtmp://cam/live/1")])],
            store: store, clock: .following(clock, from: epoch), tools: .init(ffmpeg: ffmpeg, ffprobe: nil), logger: Logger(label: "test"))
        let ring = try #require(keeper.recorders["m1"]?["1"]).ring
        try FileManager.default.createDirectory(at: ring, withIntermediateDirectories: true)
        for second in stride(from: -100, through: -50, by: 2) {
            try Data(count: 1000).write(to: ring.appendingPathComponent("\(Int(epoch.timeIntervalSince1970) + second).ts"))
        }
        return (keeper, store)
    }

    /// Without the bound the cut never ends: the time limit makes that a failure, not a hang.
    @Test(.timeLimit(.minutes(1)))
    func aHungCutterIsKilledAtCutTimeoutAndTheRecordShipsWithTheReason() async throws {
        let directory = try TemporaryDirectory.make(prefix: "evidence")
        defer { try? FileManager.default.removeItem(at: directory) }
        // An ffmpeg that never finishes: it notes its pid and sleeps (exec: the pid is the sleep's).
        let pids = directory.appendingPathComponent("cutter.pids")
        let hung = directory.appendingPathComponent("ffmpeg")
        try "#!/bin/sh\necho $$ >> '\(pids.path)'\nexec sleep 600\n".write(to: hung, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: hung.path)
        let clock = TestClock<Duration>()
        let (keeper, store) = try Self.keeper(directory, ffmpeg: hung.path, clock: clock)

        let cutting = Task { await keeper.clip(.init(machine: "m1", game: "g1")) }
        var pid: pid_t = 0
        try await eventually("the cutter running") {
            pid = (try? String(contentsOf: pids, encoding: .utf8)).flatMap { pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) } ?? 0
            return pid > 0
        }
        // Nothing is written while it runs, however long: in a chain the record waits.
        await clock.advance(by: .seconds(4))
        #expect(try await store.records(after: 0, limit: 10).isEmpty)
        #expect(kill(pid, 0) == 0, "the cutter still runs before cut_timeout")
        await clock.advance(by: .seconds(1))
        await cutting.value
        let records = try await store.records(after: 0, limit: 10)
        #expect(records.map(\.game.id) == ["g1"], "the record ships without the clip")
        #expect(records.first?.game.evidenceMissing == [EvidenceGap(camera: "1", reason: "ffmpeg did not cut the clip within cut_timeout (5s): given up")])
        #expect(keeper.counts.failed == 1)
        try await eventually("the hung cutter killed by its pid") {
            let stat = (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)) ?? ""
            return stat.isEmpty || stat.contains(") Z ")
        }
        let folder = keeper.dir.appendingPathComponent("m1")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).isEmpty, "no partial clip left")
    }

    @Test func belowMinFreeTheUnheldClipsGoThenRecordingAndCuttingStop() async throws {
        let directory = try TemporaryDirectory.make(prefix: "evidence")
        defer { try? FileManager.default.removeItem(at: directory) }
        let clock = TestClock<Duration>()
        // More free room than any disk has: min_free can never be met.
        let (keeper, store) = try Self.keeper(directory, settings: { $0.minFree = 1 << 60 }, ffmpeg: "/bin/false", clock: clock)
        let folder = keeper.dir.appendingPathComponent("m1")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        var rows: [EvidenceRow] = []
        for (index, age) in [600.0, 500, 400].enumerated() {
            let file = folder.appendingPathComponent("old\(index)-1.mp4")
            try Data(count: 1 << 10).write(to: file)
            rows.append(
                EvidenceRow(
                    game: "old\(index)", machine: "m1", camera: "1", path: file.path, durationSeconds: 30, bytes: 1 << 10,
                    endedAt: Self.epoch.addingTimeInterval(-age)))
        }
        try await store.keep(rows)
        #expect(try await store.hold(machine: "m1", game: "old1", held: true, reason: "ticket 7") == 1)
        #expect(keeper.room.problem == nil)

        await keeper.watchRoom()
        #expect(try await store.clipsOnDisk().map(\.game) == ["old1"], "the unheld clips went, the held one stayed")
        #expect(!FileManager.default.fileExists(atPath: folder.appendingPathComponent("old0-1.mp4").path))
        let gone = try await store.evidence(machine: "m1", game: "old2", camera: "1")
        #expect(gone?.missing == "deleted to keep min_free (\(EvidenceSettings.format(1 << 60))) free on the disk")
        let problem = try #require(keeper.room.problem, "recording and cutting stopped")
        #expect(problem.hasPrefix("less than min_free (1048576TiB) is free on the disk ("), "\(problem)")

        // A game that ends meanwhile has no clip, and says why; its record is complete.
        await keeper.clip(.init(machine: "m1", game: "g1"))
        let record = try #require(try await store.records(after: 0, limit: 10).first { $0.game.id == "g1" })
        #expect(record.game.evidenceMissing == [EvidenceGap(camera: "1", reason: "not cut: \(problem)")])

        // The recorder stops too, saying why, and starts no ffmpeg while the disk has no room.
        let recorder = try #require(keeper.recorders["m1"]?["1"])
        let recording = Task { await recorder.run() }
        defer {
            recorder.stop()
            recording.cancel()
        }
        try await eventually("the recording down for min_free") { recorder.status.problem == "recording stopped: \(problem)" }
        #expect(!recorder.status.up && recorder.status.restarts == 0)
    }
}
