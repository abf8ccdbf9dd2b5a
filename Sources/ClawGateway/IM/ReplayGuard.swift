import DequeModule
import Foundation
import Synchronization

/// The generic notifications already accepted, by signature, for as long as
/// their timestamp is within the clock-skew window: the same signed bytes
/// sent again are refused (SPEC §5, 409 `replayed`), so a captured `leave`
/// or `join` cannot be played back. Memory is bounded by what was accepted
/// within the window; each entry is 16 bytes of the signature and an expiry.
final class ReplayGuard: Sendable {
    private struct Key: Hashable {
        var high: UInt64
        var low: UInt64
    }

    private struct State {
        var seen: Set<Key> = []
        /// In the order accepted; expiries are near that order (a timestamp
        /// is within the window of its arrival), so the front expires first.
        var order = Deque<(expires: Int64, key: Key)>()
    }

    private let window: Duration
    private let state = Mutex(State())

    init(window: Duration) {
        self.window = window
    }

    /// Records a notification whose signature and timestamp were checked;
    /// false when the same signature was already accepted within the window.
    func accept(signature: String, timestamp: Int64, now: Date) -> Bool {
        guard let key = Self.key(signature) else { return true }
        let expires = timestamp + Int64(window.components.seconds)
        let current = Int64(now.timeIntervalSince1970)
        return state.withLock { state in
            while let first = state.order.first, first.expires < current {
                state.seen.remove(first.key)
                state.order.removeFirst()
            }
            guard state.seen.insert(key).inserted else { return false }
            state.order.append((expires, key))
            return true
        }
    }

    /// Forgets a signature recorded by ``accept(signature:timestamp:now:)``
    /// whose notification was turned away for a passing reason (over the
    /// sender's budget, storage failing): it was not accepted, so the same
    /// bytes may come again. Its entry in the expiry order goes with time.
    func forget(signature: String) {
        guard let key = Self.key(signature) else { return }
        _ = state.withLock { $0.seen.remove(key) }
    }

    /// Signatures remembered right now (for tests).
    var count: Int { state.withLock { $0.seen.count } }

    /// The first 128 bits of a hex signature.
    private static func key(_ hex: String) -> Key? {
        let digits = Array(hex.utf8.prefix(32))
        guard digits.count == 32 else { return nil }
        var values: [UInt64] = [0, 0]
        for (index, digit) in digits.enumerated() {
            let nibble: UInt8
            switch digit {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = digit - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = digit - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = digit - UInt8(ascii: "A") + 10
            default: return nil
            }
            values[index / 16] = values[index / 16] << 4 | UInt64(nibble)
        }
        return Key(high: values[0], low: values[1])
    }
}
