import DequeModule
import Foundation
import Synchronization

/// At most ``limit`` events per client address in any minute: what one host
/// may ask of something that costs (new IM accounts, logins). The table
/// holds only the last minute's callers.
final class AddressBudget: Sendable {
    let limit: Int
    private let recent = Mutex<[ClientAddress?: Deque<Date>]>([:])

    init(perMinute limit: Int) {
        self.limit = limit
    }

    /// Counts one event of `client`; nil when it is within its budget, else
    /// the seconds until it has room again (the event is not counted).
    func admit(_ client: ClientAddress?, at now: Date) -> Int? {
        recent.withLock { recent in
            let cutoff = now.addingTimeInterval(-60)
            if recent.count > 1024 { recent = recent.filter { ($0.value.last ?? .distantPast) > cutoff } }
            var mine = recent[client] ?? []
            while let first = mine.first, first <= cutoff { mine.removeFirst() }
            guard mine.count < limit else {
                recent[client] = mine
                return max(1, Int((mine.first ?? now).timeIntervalSince(cutoff).rounded(.up)))
            }
            mine.append(now)
            recent[client] = mine
            return nil
        }
    }
}
