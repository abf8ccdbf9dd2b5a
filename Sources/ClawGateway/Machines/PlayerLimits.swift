import Protocol
import Synchronization

/// What one player may cost everyone else, kept per player across the
/// gateway (SPEC §2): a budget of `game.max_commands_per_second`
/// notifications a second, whatever they are and whichever machine they are
/// for, checked before any machine is looked at; and at most one refusal of
/// each code a second sent back.
///
/// Memory is bounded: players are kept in two generations of at most
/// `capacity / 2` each; when the newer fills up the older is dropped, so a
/// player not heard from for a while starts afresh (with a full budget),
/// which costs nothing. Players are spread over stripes, each with its own
/// lock, so that the event loops seldom wait for each other.
final class PlayerLimits: Sendable {
    private struct Player {
        var budget: TokenBucket
        /// When a refusal of each code was last sent, on the game clock.
        var refused: [ErrorCode: Duration] = [:]
    }

    private struct Stripe {
        var current: [String: Player] = [:]
        var previous: [String: Player] = [:]

        mutating func with<R>(_ accid: String, make: () -> Player, limit: Int, _ body: (inout Player) -> R) -> R {
            var player = current.removeValue(forKey: accid) ?? previous.removeValue(forKey: accid) ?? make()
            let result = body(&player)
            if current.count >= limit {
                previous = current
                current = [:]
            }
            current[accid] = player
            return result
        }
    }

    /// One stripe's lock and players.
    private final class Locked: Sendable {
        let stripe = Mutex(Stripe())
    }

    private let rate: Int
    private let stripeLimit: Int
    private let stripes: [Locked]

    /// - Parameters:
    ///   - perSecond: notifications a player may send a second.
    ///   - capacity: players kept at most.
    init(perSecond: Int, capacity: Int = 100_000, stripes: Int = 16) {
        rate = perSecond
        stripeLimit = max(1, capacity / stripes / 2)
        self.stripes = (0..<stripes).map { _ in Locked() }
    }

    private func stripe(_ accid: String) -> Locked {
        stripes[Int(UInt(bitPattern: accid.hashValue) % UInt(stripes.count))]
    }

    /// Takes one notification from the player's budget; false when it is spent.
    func admit(_ accid: String, now: Duration) -> Bool {
        stripe(accid).stripe.withLock { stripe in
            stripe.with(accid, make: { Player(budget: TokenBucket(perSecond: rate, now: now)) }, limit: stripeLimit) { player in
                player.budget.take(now: now)
            }
        }
    }

    /// Whether a refusal with `code` may be sent to the player now: at most one
    /// of each code a second.
    func mayRefuse(_ accid: String, code: ErrorCode, now: Duration) -> Bool {
        stripe(accid).stripe.withLock { stripe in
            stripe.with(accid, make: { Player(budget: TokenBucket(perSecond: rate, now: now)) }, limit: stripeLimit) { player in
                if let last = player.refused[code], now - last < .seconds(1) { return false }
                player.refused[code] = now
                return true
            }
        }
    }

    /// Players kept right now (for tests).
    var count: Int {
        stripes.reduce(0) { total, locked in total + locked.stripe.withLock { $0.current.count + $0.previous.count } }
    }
}
