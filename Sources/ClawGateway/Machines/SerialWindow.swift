/// The last ``capacity`` player serials of a game, to drop a command whose IM
/// copy arrived twice (SPEC §2, `duplicate_serial`).
///
/// Bounded, and O(1) per command whatever the length of the game: a serial
/// older than the window is no longer recognised, which only matters for a
/// copy delivered hundreds of commands late.
struct SerialWindow: Sendable {
    static let capacity = 256

    private var members: Set<Int64> = []
    /// The members in arrival order, as a ring once full.
    private var ring: [Int64] = []
    private var oldest = 0

    init() {}

    /// The window of a game taken up after a restart: its serials as
    /// ``inOrder`` wrote them, the newest ``capacity`` kept.
    init(_ serials: [Int64]) {
        for serial in serials { insert(serial) }
    }

    /// The serials, oldest first: what the open game's record keeps.
    var inOrder: [Int64] {
        Array(ring[oldest...] + ring[..<oldest])
    }

    func contains(_ serial: Int64) -> Bool {
        members.contains(serial)
    }

    mutating func insert(_ serial: Int64) {
        guard members.insert(serial).inserted else { return }
        if ring.count < Self.capacity {
            ring.append(serial)
        } else {
            members.remove(ring[oldest])
            ring[oldest] = serial
            oldest = (oldest + 1) % Self.capacity
        }
    }

    var count: Int { members.count }
}
