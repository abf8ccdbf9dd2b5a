import Foundation

/// Which clips retention deletes, and why (SPEC §14): a plain function of
/// the clips on disk, the time and the room left on their disk, so that
/// the rules are tested without files or a clock.
///
/// Oldest game first, held clips never: a clip goes when its game ended
/// more than `keep` ago, while the clips take more than `max_disk`, or
/// while less than `min_free` is free on the evidence folder's disk (the
/// database's disk too, usually: the video must never fill it).
struct ClipRetention: Sendable, Equatable {
    enum Reason: Sendable, Equatable {
        case expired
        case maxDisk
        case minFree
    }

    struct Deletion: Sendable, Equatable {
        var clip: EvidenceRow
        var reason: Reason
    }

    var deletions: [Deletion]
    /// What the clips take once the deletions are done.
    var diskBytes: Int64

    /// - Parameters:
    ///   - clips: the clips on disk, oldest game first (``GameStore/clipsOnDisk()``).
    ///   - free: the room left on their disk now; nil when it cannot be read (then `min_free` deletes nothing).
    static func plan(clips: [EvidenceRow], now: Date, settings: EvidenceSettings, free: Int64?) -> ClipRetention {
        let expired = now.addingTimeInterval(-settings.keep.seconds)
        var total = clips.reduce(Int64(0)) { $0 + $1.bytes }
        var room = free
        var deletions: [Deletion] = []
        for clip in clips where !clip.held {
            let reason: Reason
            if clip.endedAt < expired {
                reason = .expired
            } else if total > settings.maxDisk {
                reason = .maxDisk
            } else if let left = room, left < settings.minFree {
                reason = .minFree
            } else {
                continue
            }
            deletions.append(Deletion(clip: clip, reason: reason))
            total -= clip.bytes
            room = room.map { $0 + clip.bytes }
        }
        return ClipRetention(deletions: deletions, diskBytes: total)
    }

    /// What a deleted clip's row says in place of the clip.
    static func text(_ reason: Reason, _ settings: EvidenceSettings) -> String {
        switch reason {
        case .expired: "deleted after \(ConfigDuration.format(settings.keep))"
        case .maxDisk: "deleted to keep the clips within max_disk"
        case .minFree: "deleted to keep min_free (\(EvidenceSettings.format(settings.minFree))) free on the disk"
        }
    }
}
