import Synchronization

/// The last `capacity` message ids seen, to drop NetEase copies delivered twice.
final class RecentIDs: Sendable {
    private struct Window {
        var members: Set<String> = []
        var ring: [String] = []
        var next = 0
    }

    private let capacity: Int
    private let window = Mutex(Window())

    init(capacity: Int = 50_000) {
        self.capacity = capacity
    }

    /// Records `id`; false when it was already among the recent ones.
    func insert(_ id: String) -> Bool {
        window.withLock { window in
            guard window.members.insert(id).inserted else { return false }
            if window.ring.count < capacity {
                window.ring.append(id)
            } else {
                window.members.remove(window.ring[window.next])
                window.ring[window.next] = id
                window.next = (window.next + 1) % capacity
            }
            return true
        }
    }
}
