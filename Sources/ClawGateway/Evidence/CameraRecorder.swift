import Foundation
import Logging
import Synchronization

/// One camera's recording (SPEC §14): an ffmpeg the gateway starts and
/// watches, pulling the camera's RTMP stream into segments of
/// ``segmentSeconds`` without re-encoding, named by the wall-clock second
/// each began (`<ring>/<unix seconds>.ts`), kept for `evidence.buffer`.
///
/// ffmpeg exits when the stream drops (no data for 5 s); one that stops
/// writing segments for ``stallAfter`` is killed. Either way it is started
/// again after a back-off of 1 s doubling to 10 s, said in the log and in
/// ``status`` (a camera whose recording is down is visible in the metrics),
/// with the disk being full when it is. While the disk has less than
/// `evidence.min_free` free (``DiskRoom``), ffmpeg is stopped and not
/// started again until there is room: the recording is down, saying why.
final class CameraRecorder: Sendable {
    static let segmentSeconds = 2
    /// No new segment for this long while ffmpeg runs: it is stuck, and killed.
    static let stallAfter: Duration = .seconds(10)
    static let backoff: ClosedRange<Duration> = .seconds(1)...Duration.seconds(10)

    let machine: String
    let camera: String
    let stream: String
    let ring: URL
    private let buffer: Duration
    private let ffmpeg: String?
    private let clock: GameClock
    private let room: DiskRoom
    private let logger: Logger
    private let state = Mutex(RecorderState())

    private struct RecorderState {
        var process: Process?
        /// Why the recording is down; nil while segments come.
        var problem: String? = "starting"
        var restarts = 0
        var stopped = false
    }

    struct Status: Sendable, Equatable {
        var up: Bool
        var problem: String?
        var restarts: Int
    }

    init(
        machine: String, camera: String, stream: String, dir: URL, buffer: Duration, ffmpeg: String?, clock: GameClock,
        room: DiskRoom = DiskRoom(), logger: Logger
    ) {
        self.machine = machine
        self.camera = camera
        self.stream = stream
        ring = dir.appendingPathComponent(".ring", isDirectory: true).appendingPathComponent(machine, isDirectory: true)
            .appendingPathComponent(camera, isDirectory: true)
        self.buffer = buffer
        self.ffmpeg = ffmpeg
        self.clock = clock
        self.room = room
        var logger = logger
        logger[metadataKey: "machine.id"] = .string(machine)
        logger[metadataKey: "evidence.camera"] = .string(camera)
        self.logger = logger
    }

    var status: Status {
        state.withLock { Status(up: $0.problem == nil, problem: $0.problem, restarts: $0.restarts) }
    }

    /// Keeps ffmpeg recording until the task is cancelled (or ``stop()``).
    func run() async {
        guard let ffmpeg else {
            state.withLock { $0.problem = "ffmpeg is not installed" }
            logger.error("Camera not recorded: ffmpeg is not installed (apt-get install ffmpeg)")
            return
        }
        try? FileManager.default.createDirectory(at: ring, withIntermediateDirectories: true)
        var delay = Self.backoff.lowerBound
        while !Task.isCancelled, !state.withLock({ $0.stopped }) {
            if let low = room.problem {
                // No ffmpeg until the disk has room; the ring still ages out.
                state.withLock { $0.problem = "recording stopped: \(low)" }
                prune()
                do { try await clock.sleep(clock.now() + .seconds(1)) } catch { return }
                delay = Self.backoff.lowerBound
                continue
            }
            let started = clock.now()
            let end = await record(ffmpeg)
            if case .noRoom = end { continue }
            var why =
                switch end {
                case .exited(let status): "ffmpeg exited with status \(status)"
                case .stalled, .noRoom: "ffmpeg wrote no segment for \(Self.stallAfter.seconds) s"
                }
            if let full = DiskSpace.full(at: ring.path) { why += ": \(full)" }
            let first = state.withLock { state in
                defer { state.problem = why }
                return state.problem == nil
            }
            if state.withLock({ $0.stopped }) || Task.isCancelled { return }
            if first {
                logger.warning("Camera recording down; starting ffmpeg again", metadata: ["evidence.problem": .string(why)])
            }
            // A recording that ran a while starts over from the short delay.
            if clock.now() - started > Self.backoff.upperBound * 3 { delay = Self.backoff.lowerBound }
            do { try await clock.sleep(clock.now() + delay) } catch { return }
            delay = min(delay * 2, Self.backoff.upperBound)
            state.withLock { $0.restarts += 1 }
        }
    }

    /// Stops ffmpeg; ``run()`` returns.
    func stop() {
        let process = state.withLock { state in
            state.stopped = true
            return state.process
        }
        // By its pid while it is ours (`process` is cleared once it exited),
        // not by `isRunning`, which may not say so yet for one just started.
        if let process { Self.end(process.processIdentifier) }
    }

    /// How one ffmpeg's recording ended.
    private enum End {
        case exited(Int32)
        /// It wrote no segment for ``stallAfter``, and was killed.
        case stalled
        /// The disk went below `evidence.min_free`, and it was killed.
        case noRoom
    }

    /// One ffmpeg, until it exits, stalls or the disk has no room.
    private func record(_ ffmpeg: String) async -> End {
        killLeftover()
        // Watches the segments while ffmpeg runs: up once they come, killed when they stop.
        let watch = Task { [self] () -> End? in
            let started = clock.now()
            while !Task.isCancelled {
                do { try await clock.sleep(clock.now() + .seconds(1)) } catch { return nil }
                if room.problem != nil {
                    if let process = state.withLock({ $0.process }) { Self.end(process.processIdentifier) }
                    return .noRoom
                }
                prune()
                let fresh = newestSegmentAge().map { $0 < Double(Self.segmentSeconds * 3) } ?? false
                if fresh {
                    let cameUp = state.withLock { state in
                        defer { state.problem = nil }
                        return state.problem != nil
                    }
                    if cameUp { logger.info("Camera recording", metadata: ["evidence.stream": .string(stream)]) }
                } else if clock.now() - started > Self.stallAfter, newestSegmentAge().map({ $0 > Self.stallAfter.seconds }) ?? true {
                    if let process = state.withLock({ $0.process }) { Self.end(process.processIdentifier) }
                    return .stalled
                }
            }
            return nil
        }
        let status = await Subprocess.run(
            ffmpeg,
            [
                "-nostdin", "-hide_banner", "-loglevel", "error", "-rw_timeout", "5000000", "-i", stream, "-map", "0", "-c", "copy",
                "-f", "segment", "-segment_time", String(Self.segmentSeconds), "-segment_format", "mpegts", "-strftime", "1",
                ring.appendingPathComponent("%s.ts").path,
            ],
            started: { [self] process in
                try? String(process.processIdentifier).write(to: pidFile, atomically: true, encoding: .utf8)
                let stopped = state.withLock { state in
                    state.process = process
                    return state.stopped
                }
                if stopped { Self.end(process.processIdentifier) }
            })
        state.withLock { $0.process = nil }
        watch.cancel()
        return await watch.value ?? .exited(status)
    }

    /// Ends a recording ffmpeg. With SIGKILL: a child started by Foundation's
    /// `Process` inherits the spawning thread's signal mask, in which SIGTERM
    /// is blocked, so `terminate()` never reaches it. The segment it was
    /// writing is cut short, which MPEG-TS takes in its stride.
    static func end(_ pid: pid_t) {
        kill(pid, SIGKILL)
    }

    /// The running ffmpeg's pid, so that one a killed gateway left behind
    /// (kill -9 takes no children with it) is stopped by the next.
    private var pidFile: URL { ring.appendingPathComponent("ffmpeg.pid") }

    /// Stops an ffmpeg still recording into this ring from a gateway that died.
    private func killLeftover() {
        guard let text = try? String(contentsOf: pidFile, encoding: .utf8), let pid = pid_t(text.trimmingCharacters(in: .whitespacesAndNewlines)),
            pid > 1, let command = try? String(contentsOfFile: "/proc/\(pid)/cmdline", encoding: .utf8),
            command.contains("ffmpeg"), command.contains(ring.path)
        else { return }
        Self.end(pid)
        logger.notice("An ffmpeg left recording by a gateway that died was stopped", metadata: ["evidence.pid": "\(pid)"])
    }

    /// The ring's segments, oldest first: when each began, and its file.
    func segments() -> [(start: Date, url: URL)] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: ring.path)) ?? []
        return names.compactMap { name -> (Date, URL)? in
            guard name.hasSuffix(".ts"), let seconds = TimeInterval(name.dropLast(3)) else { return nil }
            return (Date(timeIntervalSince1970: seconds), ring.appendingPathComponent(name))
        }.sorted { $0.0 < $1.0 }
    }

    /// The segments that hold something, oldest first: an ffmpeg started on
    /// a full disk creates its first segment and writes nothing into it.
    func recordedSegments() -> [(start: Date, url: URL)] {
        segments().filter { segment in
            ((try? FileManager.default.attributesOfItem(atPath: segment.url.path))?[.size] as? NSNumber)?.int64Value ?? 0 > 0
        }
    }

    /// How long ago the newest segment holding something was written: read
    /// from the newest back, one look at each, not the whole ring every second.
    private func newestSegmentAge() -> Double? {
        for segment in segments().reversed() {
            guard let attributes = try? FileManager.default.attributesOfItem(atPath: segment.url.path),
                ((attributes[.size] as? NSNumber)?.int64Value ?? 0) > 0
            else { continue }
            return (attributes[.modificationDate] as? Date).map { clock.wallNow().timeIntervalSince($0) }
        }
        return nil
    }

    /// Deletes the segments older than `evidence.buffer`.
    private func prune() {
        let oldest = clock.wallNow().addingTimeInterval(-buffer.seconds)
        for segment in segments() where segment.start < oldest {
            try? FileManager.default.removeItem(at: segment.url)
        }
    }
}
