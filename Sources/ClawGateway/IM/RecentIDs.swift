import Synchronization

/// The last `capacity` message ids seen, to drop NetEase copies delivered twice.
///
/// An id is kept as a 128-bit digest (two of Swift's per-process seeded
/// hashes), not as its text: 16 bytes in the set and 16 in the ring instead
/// of a heap string each, about 2.8 MiB for the window of 50,000 instead of
/// 6. Two different ids share a digest with a chance of about 2^-128 per
/// pair: the window would wrongly drop one copy in about 10^29.
final class RecentIDs: Sendable {
    struct Digest: Hashable {
        var high: UInt64
        var low: UInt64

        init(_ id: String) {
            var first = Hasher()
            first.combine(0 as UInt8)
            first.combine(id)
            var second = Hasher()
            second.combine(1 as UInt8)
            second.combine(id)
            high = UInt64(UInt(bitPattern: first.finalize()))
            low = UInt64(UInt(bitPattern: second.finalize()))
        }
    }

    private struct Window {
        var members: Set<Digest> = []
        var ring: [Digest] = []
        var next = 0
    }

    private let capacity: Int
    private let window = Mutex(Window())

    init(capacity: Int = 50_000) {
        self.capacity = capacity
    }

    /// Records `id`; false when it was already among the recent ones.
    func insert(_ id: String) -> Bool {
        let digest = Digest(id)
        return window.withLock { window in
            guard window.members.insert(digest).inserted else { return false }
            if window.ring.count < capacity {
                window.ring.append(digest)
            } else {
                window.members.remove(window.ring[window.next])
                window.ring[window.next] = digest
                window.next = (window.next + 1) % capacity
            }
            return true
        }
    }
}
