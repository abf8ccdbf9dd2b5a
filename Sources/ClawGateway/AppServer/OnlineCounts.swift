import Logging
import ServiceLifecycle
import Synchronization

/// Each room's chatroom online count for the room list, asked of
/// `chatroom/get.action` in the background every ``interval`` (SPEC §8):
/// a room list never waits on NetEase, and a crowd listing rooms costs
/// NetEase one call per room per interval. A room reads 0 until its first
/// answer; after a failed call it keeps its last count.
final class OnlineCounts: Service, Sendable {
    static let interval: Duration = .seconds(10)

    private let rooms: [Int64]
    private let api: any ChatroomAPI
    private let clock: GameClock
    private let logger: Logger
    private let warnings = LogLimiter()
    private let counts = Mutex<[Int64: Int]>([:])

    init(rooms: [Int64], api: any ChatroomAPI, clock: GameClock, logger: Logger) {
        self.rooms = rooms
        self.api = api
        self.clock = clock
        self.logger = logger
    }

    /// The room's last count; 0 before the first answer.
    func count(room: Int64) -> Int {
        counts.withLock { $0[room] ?? 0 }
    }

    func run() async throws {
        try? await cancelWhenGracefulShutdown { [self] in
            while !Task.isCancelled {
                let started = clock.now()
                await refresh()
                try await clock.sleep(started + Self.interval)
            }
        }
    }

    /// Asks for every room's count once, one after the other.
    func refresh() async {
        for room in rooms where !Task.isCancelled {
            do {
                let count = try await api.onlineUserCount(room: room)
                counts.withLock { $0[room] = count }
                AppServerMetrics.onlineCountsOK.increment()
            } catch {
                AppServerMetrics.onlineCountsFailed.increment()
                warnings.warning(
                    "failed", "Chatroom online count not read",
                    error.shape.metadata(["chatroom.id": .stringConvertible(room)]),
                    on: logger)
            }
        }
    }
}
