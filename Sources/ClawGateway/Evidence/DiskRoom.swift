import Synchronization

/// Whether the evidence folder's disk has the room `evidence.min_free`
/// keeps (SPEC §14): the disk the database lives on, usually, which the
/// video must never fill. Below it, once retention has deleted what it may,
/// recording and cutting stop, saying why, until there is room again.
///
/// The keeper decides (``EvidenceKeeper/watchRoom()``); each camera's
/// recorder and the cutting read it.
final class DiskRoom: Sendable {
    private let stopped = Mutex<String?>(nil)

    /// Why recording and cutting are stopped; nil while there is room.
    var problem: String? { stopped.withLock { $0 } }

    /// Stops (with `why`) or lets go (nil); true when that changed anything.
    @discardableResult
    func set(_ why: String?) -> Bool {
        stopped.withLock { problem in
            defer { problem = why }
            return (problem == nil) != (why == nil)
        }
    }

    /// Whether recording should be stopped with `free` bytes left on the
    /// disk: below `minFree`, and once stopped until `minFree` and an
    /// eighth more are free, so that a disk hovering at the edge does not
    /// start and stop ffmpeg every second. An unreadable disk changes nothing.
    static func stops(free: Int64?, minFree: Int64, stopped: Bool) -> Bool {
        guard let free else { return stopped }
        return free < (stopped ? resumeAt(minFree) : minFree)
    }

    /// Where recording comes back after it stopped for `min_free`.
    static func resumeAt(_ minFree: Int64) -> Int64 {
        minFree + minFree / 8
    }

    /// The reason a stop gives, as the recordings and the games' records say it.
    static func reason(free: Int64, minFree: Int64) -> String {
        "less than min_free (\(EvidenceSettings.format(minFree))) is free on the disk (\(free >> 20) MiB left)"
    }
}
