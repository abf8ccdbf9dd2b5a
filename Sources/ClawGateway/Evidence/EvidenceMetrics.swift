import Prometheus
import ServiceLifecycle
import Synchronization

/// The evidence on `/metrics` (SPEC §14), brought up to date from the
/// keeper at scrape time: each camera's recording, the clips, the disk.
enum EvidenceMetrics {
    private static var registry: PrometheusCollectorRegistry { GatewayMetrics.registry }

    private static func family(_ name: String, _ unit: String, _ help: String) -> MetricNameDescriptor {
        MetricNameDescriptor(namespace: "claw", metricName: name, unitName: unit, helpText: help)
    }

    private static let clipResults = ["cut", "missing", "failed", "deleted"]
    private static let clips = Dictionary(
        uniqueKeysWithValues: clipResults.map { result in
            (
                result,
                Mirror(
                    registry.makeCounter(
                        descriptor: family(
                            "evidence_clips", "total",
                            "Clips of games by what became of them: cut, missing (the camera's recording was down, or it has no stream), failed (ffmpeg could not cut it), deleted (past evidence.keep, over evidence.max_disk, or for evidence.min_free)."),
                        labels: [("result", result)]))
            )
        })
    private static let disk = registry.makeGauge(
        descriptor: family("evidence_disk", "bytes", "What the clips take on disk (the ring of segments is bounded by evidence.buffer)."))
    private static let pending = registry.makeGauge(
        descriptor: family("evidence_pending", "", "Games ended whose clips are not cut yet."))
    private static let free = registry.makeGauge(
        descriptor: family(
            "evidence_disk_free", "bytes",
            "Room left on the evidence folder's filesystem; below evidence.min_free the oldest unheld clips go, then recording and cutting stop (the games play on, without clips)."))
    private static let lowDisk = registry.makeGauge(
        descriptor: family(
            "evidence_low_disk", "",
            "1 while recording and cutting are stopped: less than evidence.min_free is free on the evidence folder's disk with the unheld clips deleted."))

    /// Each camera's two series, made once with the keeper's recorders.
    private static let cameras = Mutex<[(recorder: CameraRecorder, up: Gauge, restarts: Gauge)]>([])

    /// Makes the series, so that the first scrape shows them.
    static func prepare(_ keeper: EvidenceKeeper) {
        _ = (clips, disk, pending, free, lowDisk)
        var series: [(recorder: CameraRecorder, up: Gauge, restarts: Gauge)] = []
        for (machine, recorders) in keeper.recorders {
            for (camera, recorder) in recorders {
                let labels = [("machine", machine), ("camera", camera)]
                series.append((
                    recorder,
                    registry.makeGauge(
                        descriptor: family("evidence_recording_up", "", "1 while the camera's stream is being recorded into the ring."),
                        labels: labels),
                    registry.makeGauge(
                        descriptor: family("evidence_recording_restarts", "", "Times the camera's ffmpeg was started again (it exited, or stalled)."),
                        labels: labels)
                ))
            }
        }
        cameras.withLock { $0 = series }
        export(keeper)
    }

    static func export(_ keeper: EvidenceKeeper) {
        let counts = keeper.counts
        clips["cut"]?.sync(to: counts.cut)
        clips["missing"]?.sync(to: counts.missing)
        clips["failed"]?.sync(to: counts.failed)
        clips["deleted"]?.sync(to: counts.deleted)
        disk.set(to: Double(counts.diskBytes))
        pending.set(to: Double(counts.pending))
        if let room = DiskSpace.available(at: keeper.dir.path) { free.set(to: Double(room)) }
        lowDisk.set(to: keeper.room.problem == nil ? 0 : 1)
        for camera in cameras.withLock({ $0 }) {
            let status = camera.recorder.status
            camera.up.set(to: status.up ? 1 : 0)
            camera.restarts.set(to: Double(status.restarts))
        }
    }
}

/// The keeper as a service: records and cuts until graceful shutdown.
struct EvidenceService: Service {
    let keeper: EvidenceKeeper

    func run() async throws {
        let keeper = keeper
        await cancelWhenGracefulShutdown {
            await keeper.run()
        }
    }
}
