import Foundation
import Logging
import Protocol
import Synchronization

/// A video of every game (SPEC §14): one ``CameraRecorder`` per camera with
/// a `stream`, and a clip of each started game cut from their segments
/// when it ends, into `<dir>/<machine>/<game>-<camera>.mp4`, without
/// re-encoding.
///
/// The keeper hears games end as an observer of the machines' events, after
/// the end is durable; it waits until the segment holding the end plus
/// `evidence.pad` is closed, cuts each camera's clip with ffmpeg (a process,
/// awaited on its own task: no machine and no event loop waits for it),
/// and writes the clips, or why a camera has none, beside the game's record.
/// Clips are deleted `evidence.keep` after their game's end, and the oldest
/// first while they take more than `evidence.max_disk` or less than
/// `evidence.min_free` is free on their disk, except those an operator
/// holds; below `min_free` even then, recording and cutting stop until there
/// is room (``DiskRoom``). A clip not cut within `evidence.cut_timeout` is
/// given up, its ffmpeg killed, with its reason: no record waits for it.
///
/// A gateway stopped between a game's end and its clips cuts them when it
/// starts again, from the segments still in the ring; in a chain, the game's
/// record is shipped once its clips are written (``GameStore/clipsFirst``).
final class EvidenceKeeper: MachineObserver {
    let settings: EvidenceSettings
    let dir: URL
    /// Whether the disk has the room `min_free` keeps: recording and cutting stop without it.
    let room = DiskRoom()
    private let store: GameStore
    private let clock: GameClock
    private let logger: Logger
    private let ffmpeg: String?
    private let ffprobe: String?
    /// By machine id, by camera id.
    let recorders: [String: [String: CameraRecorder]]
    /// Each machine's cameras, in config order (those without a stream too).
    private let cameras: [String: [String]]
    private let jobs: AsyncStream<Job>
    private let queue: AsyncStream<Job>.Continuation
    private let tally = Mutex(Counts())

    struct Job: Sendable {
        var machine: String
        var game: String
    }

    /// The programs that record and cut: those on the PATH, or a test's.
    struct Tools: Sendable {
        var ffmpeg: String?
        var ffprobe: String?

        static var onPath: Tools { Tools(ffmpeg: Subprocess.find("ffmpeg"), ffprobe: Subprocess.find("ffprobe")) }
    }

    /// The machines with cameras: their started games get clips, or why not.
    static func clipped(_ machines: [MachineConfig]) -> Set<String> {
        Set(machines.filter { !$0.cameras.isEmpty }.map(\.id))
    }

    struct Counts: Sendable, Equatable {
        var cut = 0
        var missing = 0
        var failed = 0
        var deleted = 0
        var diskBytes: Int64 = 0
        var pending = 0
        /// The games queued or being cut: each is cut once.
        var queued: Set<String> = []
    }

    init(
        settings: EvidenceSettings, machines: [MachineConfig], store: GameStore, clock: GameClock, tools: Tools = .onPath,
        logger: Logger
    ) {
        self.settings = settings
        dir = URL(fileURLWithPath: settings.dir, isDirectory: true)
        self.store = store
        self.clock = clock
        self.logger = logger
        let ffmpeg = tools.ffmpeg
        self.ffmpeg = ffmpeg
        ffprobe = tools.ffprobe
        var recorders: [String: [String: CameraRecorder]] = [:]
        var cameras: [String: [String]] = [:]
        for machine in machines {
            cameras[machine.id] = machine.cameras.map(\.id)
            for camera in machine.cameras {
                guard let stream = camera.stream else { continue }
                recorders[machine.id, default: [:]][camera.id] = CameraRecorder(
                    machine: machine.id, camera: camera.id, stream: stream, dir: dir, buffer: settings.buffer, ffmpeg: ffmpeg,
                    clock: clock, room: room, logger: logger)
            }
        }
        self.recorders = recorders
        self.cameras = cameras
        (jobs, queue) = AsyncStream.makeStream(of: Job.self, bufferingPolicy: .bufferingNewest(10_000))
    }

    var counts: Counts { tally.withLock { $0 } }

    // MARK: MachineObserver

    func snapshot(_ index: Int, _ snapshot: QueueSnapshot, payload: [UInt8]) {}

    func event(_ index: Int, _ event: GameEvent, payload: [UInt8]) {
        guard event.type == .gameEnded, let game = event.session else { return }
        enqueue(Job(machine: event.machine, game: game))
    }

    private func enqueue(_ job: Job) {
        guard tally.withLock({ $0.queued.insert(job.game).inserted }) else { return }
        tally.withLock { $0.pending += 1 }
        queue.yield(job)
    }

    // MARK: Running

    /// Records every camera, cuts clips as games end, and keeps the disk
    /// bounded, until the task is cancelled.
    func run() async {
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        let recorders = recorders.values.flatMap(\.values)
        await withTaskCancellationHandler {
            await withDiscardingTaskGroup { group in
                for recorder in recorders {
                    group.addTask { await recorder.run() }
                }
                group.addTask { [self] in
                    await recover()
                    for await job in jobs {
                        await clip(job)
                        tally.withLock { state in
                            state.pending -= 1
                            state.queued.remove(job.game)
                        }
                    }
                }
                group.addTask { [self] in
                    // One task for both, so that a sweep never runs beside another.
                    await sweep()
                    var seconds = 0
                    await clock.tick(every: .seconds(1)) {
                        seconds += 1
                        if seconds % 60 == 0 { await sweep() }
                        await watchRoom()
                    }
                }
            }
        } onCancel: { [queue] in
            queue.finish()
            for recorder in recorders { recorder.stop() }
        }
    }

    /// The games that ended while no keeper was there to cut their clips
    /// (the gateway stopped in between): those whose segments may still be
    /// in the ring are cut; in a chain, the older ones still waiting for
    /// their clips are shipped without.
    func recover() async {
        let found: [(game: String, machine: String, recent: Bool)]
        do {
            found = try await store.awaitingClips(
                machines: Set(cameras.filter { !$0.value.isEmpty }.keys), endedSince: clock.wallNow().addingTimeInterval(-settings.buffer.seconds))
        } catch {
            logger.warning("The games awaiting clips not read", metadata: error.shape.metadata())
            return
        }
        var old = 0
        for game in found {
            if game.recent {
                enqueue(Job(machine: game.machine, game: game.game))
                continue
            }
            do {
                try await store.numberWithoutClips(game: game.game)
                old += 1
            } catch {
                logger.warning("A game awaiting clips not shipped", metadata: error.shape.metadata(["game.session": .string(game.game)]))
            }
        }
        let recent = found.count - old
        if !found.isEmpty {
            logger.notice(
                "Games that ended while the gateway was stopped: their clips are cut from what the ring holds",
                metadata: ["evidence.games": "\(recent)", "evidence.games_past_buffer": "\(old)"])
        }
    }

    /// Cuts a game's clips once the segments holding its end are closed.
    func clip(_ job: Job) async {
        let times: (started: Date, ended: Date)?
        do {
            times = try await store.playedTimes(game: job.game, machine: job.machine)
        } catch {
            logger.warning("A game's clips not cut: its record could not be read", metadata: error.shape.metadata(["game.session": .string(job.game)]))
            return
        }
        // A turn that never started has no game to show.
        guard let times else { return }
        let from = times.started.addingTimeInterval(-settings.pad.seconds)
        let to = times.ended.addingTimeInterval(settings.pad.seconds)
        let ready = to.addingTimeInterval(Double(CameraRecorder.segmentSeconds) + 1)
        let wait = ready.timeIntervalSince(clock.wallNow())
        if wait > 0, recorders[job.machine]?.isEmpty == false {
            do { try await clock.sleep(clock.now() + .milliseconds(Int64(wait * 1000))) } catch { return }
        }
        var rows: [EvidenceRow] = []
        for camera in cameras[job.machine] ?? [] {
            var row = EvidenceRow(game: job.game, machine: job.machine, camera: camera, endedAt: times.ended)
            if let recorder = recorders[job.machine]?[camera] {
                let target = dir.appendingPathComponent(job.machine, isDirectory: true).appendingPathComponent("\(job.game)-\(camera).mp4")
                switch await cut(recorder, from: from, to: to, into: target) {
                case .success(let (duration, bytes)):
                    (row.path, row.durationSeconds, row.bytes) = (target.path, duration, bytes)
                    tally.withLock { $0.cut += 1 }
                case .failure(let problem):
                    row.missing = problem.reason
                    tally.withLock { problem.failed ? ($0.failed += 1) : ($0.missing += 1) }
                    logger.notice(
                        "A game has no clip of a camera", metadata: ErrorShape(code: problem.failed ? "clip_failed" : "clip_missing", message: problem.reason).metadata([
                            "game.session": .string(job.game), "evidence.camera": .string(camera),
                        ]))
                }
            } else {
                row.missing = "the camera has no stream to record"
                tally.withLock { $0.missing += 1 }
            }
            rows.append(row)
        }
        await keep(rows, game: job.game)
    }

    /// Writes a game's clips to its record, trying again every second for
    /// up to `cut_timeout`: in a chain the record waits for them. One not
    /// written then is cut again at the next start, or shipped without.
    private func keep(_ rows: [EvidenceRow], game: String) async {
        let giveUp = clock.now() + settings.cutTimeout
        while true {
            do {
                try await store.keep(rows)
                return
            } catch {
                guard clock.now() < giveUp else {
                    logger.warning("A game's clips not written to its record", metadata: error.shape.metadata(["game.session": .string(game)]))
                    return
                }
            }
            do { try await clock.sleep(clock.now() + .seconds(1)) } catch { return }
        }
    }

    struct CutProblem: Error, Equatable {
        var reason: String
        /// ffmpeg failed on segments that were there (not: the stream was down).
        var failed = false
    }

    /// The segments of `recorder` from `from` to `to` into one clip, without re-encoding.
    private func cut(_ recorder: CameraRecorder, from: Date, to: Date, into target: URL) async -> Result<(Double, Int64), CutProblem> {
        guard let ffmpeg else { return .failure(CutProblem(reason: "ffmpeg is not installed")) }
        // A clip would eat into the room min_free keeps for the database.
        if let low = room.problem { return .failure(CutProblem(reason: "not cut: \(low)")) }
        let deadline = clock.now() + settings.cutTimeout
        guard let plan = ClipPlan.make(segments: recorder.recordedSegments(), from: from, to: to, segmentSeconds: CameraRecorder.segmentSeconds)
        else {
            var why = recorder.status.problem.map { "the recording was down: \($0)" } ?? "no recording of the game's time"
            if !why.contains("disk is full"), let full = DiskSpace.full(at: recorder.ring.path) { why += ": \(full)" }
            return .failure(CutProblem(reason: why))
        }
        let folder = target.deletingLastPathComponent()
        try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let list = folder.appendingPathComponent(".\(target.lastPathComponent).txt")
        let partial = folder.appendingPathComponent(".\(target.lastPathComponent).part.mp4")
        defer {
            try? FileManager.default.removeItem(at: list)
            try? FileManager.default.removeItem(at: partial)
        }
        do {
            try plan.files.map { "file '\($0.path)'" }.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        } catch {
            return .failure(CutProblem(reason: "the clip could not be written: \(error)", failed: true))
        }
        let exit = await Subprocess.run(
            ffmpeg,
            [
                "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-f", "concat", "-safe", "0", "-i", list.path,
                "-ss", String(format: "%.3f", plan.offset), "-t", String(format: "%.3f", plan.duration), "-map", "0", "-c", "copy",
                "-bsf:a", "aac_adtstoasc", "-movflags", "+faststart", "-f", "mp4", partial.path,
            ], until: deadline, on: clock)
        if let problem = Self.cutProblem(exit, settings: settings, full: DiskSpace.full(at: folder.path)) {
            if exit == .timedOut {
                logger.warning(
                    "A clip's ffmpeg did not finish within evidence.cut_timeout; it was killed and the clip given up",
                    metadata: ["evidence.camera": .string(recorder.camera), "evidence.clip": .string(target.lastPathComponent)])
            }
            return .failure(problem)
        }
        do {
            if FileManager.default.fileExists(atPath: target.path) { try FileManager.default.removeItem(at: target) }
            try FileManager.default.moveItem(at: partial, to: target)
        } catch {
            return .failure(CutProblem(reason: "the clip could not be written: \(error)", failed: true))
        }
        let bytes = ((try? FileManager.default.attributesOfItem(atPath: target.path))?[.size] as? NSNumber)?.int64Value ?? 0
        return .success((await probeDuration(target, until: deadline) ?? plan.duration, bytes))
    }

    /// Why a cut that ended with `exit` made no clip, or nil: it made one.
    /// `full` says the disk is full, when it is.
    static func cutProblem(_ exit: Subprocess.Exit, settings: EvidenceSettings, full: String?) -> CutProblem? {
        let because = full.map { ": \($0)" } ?? ""
        switch exit {
        case .status(0):
            return nil
        case .status(let status):
            return CutProblem(reason: "ffmpeg could not cut the clip (status \(status))\(because)", failed: true)
        case .notStarted:
            return CutProblem(reason: "ffmpeg could not be started", failed: true)
        case .timedOut:
            return CutProblem(
                reason: "ffmpeg did not cut the clip within cut_timeout (\(ConfigDuration.format(settings.cutTimeout))): given up\(because)",
                failed: true)
        }
    }

    /// The clip's duration as ffprobe reads it, by `deadline` (the clip's cut_timeout).
    private func probeDuration(_ clip: URL, until deadline: Duration) async -> Double? {
        guard let ffprobe else { return nil }
        let pipe = Pipe()
        let exit = await Subprocess.run(
            ffprobe, ["-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", clip.path], output: pipe, until: deadline,
            on: clock)
        guard exit == .status(0) else { return nil }
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        return Double(text.trimmingCharacters(in: .whitespacesAndNewlines)).map { ($0 * 1000).rounded() / 1000 }
    }

    // MARK: Retention

    /// Deletes the clips past `evidence.keep`, then the oldest while they
    /// take more than `evidence.max_disk` or the disk has less than
    /// `evidence.min_free` free (``ClipRetention``); held clips stay.
    func sweep() async {
        let clips: [EvidenceRow]
        do {
            clips = try await store.clipsOnDisk()
        } catch {
            logger.warning("Clips not swept", metadata: error.shape.metadata())
            return
        }
        let plan = ClipRetention.plan(clips: clips, now: clock.wallNow(), settings: settings, free: DiskSpace.available(at: dir.path))
        var total = plan.diskBytes
        for deletion in plan.deletions {
            let clip = deletion.clip
            if let path = clip.path { try? FileManager.default.removeItem(atPath: path) }
            do {
                try await store.clipDeleted(game: clip.game, camera: clip.camera, reason: ClipRetention.text(deletion.reason, settings))
                tally.withLock { $0.deleted += 1 }
            } catch {
                total += clip.bytes
                logger.warning("A deleted clip not noted", metadata: error.shape.metadata())
            }
        }
        tally.withLock { $0.diskBytes = total }
    }

    /// Keeps `evidence.min_free` free on the evidence folder's disk: below
    /// it, the oldest unheld clips go (``sweep()``); below it even then,
    /// recording and cutting stop, saying so in the recordings' and the
    /// games' reasons, the log and `claw_evidence_low_disk`, until there is
    /// room again (``DiskRoom/stops(free:minFree:stopped:)``). Every second.
    func watchRoom() async {
        // A disk that cannot be read changes nothing.
        guard var free = DiskSpace.available(at: dir.path) else { return }
        let stopped = room.problem != nil
        if !stopped, free < settings.minFree {
            await sweep()
            free = DiskSpace.available(at: dir.path) ?? free
        }
        let metadata: Logger.Metadata = [
            "evidence.free_bytes": .stringConvertible(free), "evidence.min_free": .string(EvidenceSettings.format(settings.minFree)),
        ]
        guard DiskRoom.stops(free: free, minFree: settings.minFree, stopped: stopped) else {
            if room.set(nil) {
                logger.notice("Recording and cutting again: the evidence folder's disk has room", metadata: metadata)
            }
            return
        }
        let why = DiskRoom.reason(free: free, minFree: settings.minFree)
        if room.set(why) {
            var metadata = metadata
            metadata["evidence.problem"] = .string(why)
            logger.warning(
                "Recording and cutting stopped: the evidence folder's disk is below evidence.min_free even with the unheld clips deleted",
                metadata: metadata)
        }
    }
}

/// Which segments make a clip from `from` to `to`, where in the first it
/// starts, and how long it is: a plain function of the ring's names.
struct ClipPlan: Sendable, Equatable {
    var files: [URL]
    /// Seconds into the first segment.
    var offset: Double
    var duration: Double

    /// Each segment runs from its start to the next one's (the last: for
    /// `segmentSeconds`); nil when none overlaps the window.
    static func make(segments: [(start: Date, url: URL)], from: Date, to: Date, segmentSeconds: Int) -> ClipPlan? {
        var chosen: [(start: Date, url: URL)] = []
        for (index, segment) in segments.enumerated() {
            let end = index + 1 < segments.count ? segments[index + 1].start : segment.start.addingTimeInterval(Double(segmentSeconds))
            if segment.start < to, end > from { chosen.append(segment) }
        }
        guard let first = chosen.first else { return nil }
        let begin = max(from, first.start)
        return ClipPlan(
            files: chosen.map(\.url), offset: max(0, from.timeIntervalSince(first.start)), duration: to.timeIntervalSince(begin))
    }
}
