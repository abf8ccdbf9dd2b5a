import Foundation

/// The room left on the evidence folder's filesystem: a full disk stops
/// the recording and the cutting (SPEC §14: the gateway plays on), and
/// says so in the reasons, the log and `claw_evidence_disk_free_bytes`.
enum DiskSpace {
    /// Below this, the disk counts as full: ffmpeg cannot write a segment.
    static let fullBelow: Int64 = 1 << 20

    /// Bytes the gateway's user may still write on the filesystem holding
    /// `path` (what `df` shows as available); nil when it cannot be read.
    static func available(at path: String) -> Int64? {
        var info = statvfs()
        guard statvfs(path, &info) == 0 else { return nil }
        return Int64(info.f_bavail) * Int64(info.f_frsize)
    }

    /// "the disk is full (12 KiB free)" when it is, to add to why a
    /// recording or a cut failed; nil otherwise.
    static func full(at path: String) -> String? {
        guard let free = available(at: path), free < fullBelow else { return nil }
        return "the disk is full (\(free >> 10) KiB free)"
    }
}
