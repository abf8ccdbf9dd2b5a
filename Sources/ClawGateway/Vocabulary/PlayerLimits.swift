import Protocol
import Synchronization

/// What one player may cost everyone else, kept per player (the pair of
/// provider and account, SPEC §5) across the gateway (SPEC §2): a budget of `game.max_commands_per_second`
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
        var current: [PlayerAddress: Player] = [:]
        var previous: [PlayerAddress: Player] = [:]

        mutating func with<R>(_ player: PlayerAddress, make: () -> Player, limit: Int, _ body: (inout Player) -> R) -> R {
            var kept = current.removeValue(forKey: player) ?? previous.removeValue(forKey: player) ?? make()
            let result = body(&kept)
            if current.count >= limit {
                previous = current
                current = [:]
            }
            current[player] = kept
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

    private func stripe(_ player: PlayerAddress) -> Locked {
        stripes[Int(UInt(bitPattern: player.hashValue) % UInt(stripes.count))]
    }

    /// Takes one notification from the player's budget; false when it is spent.
    func admit(_ player: PlayerAddress, now: Duration) -> Bool {
        stripe(player).stripe.withLock { stripe in
            stripe.with(player, make: { Player(budget: TokenBucket(perSecond: rate, now: now)) }, limit: stripeLimit) { player in
                player.budget.take(now: now)
            }
        }
    }

    /// Whether a refusal with `code` may be sent to the player now: at most one
    /// of each code a second.
    func mayRefuse(_ player: PlayerAddress, code: ErrorCode, now: Duration) -> Bool {
        stripe(player).stripe.withLock { stripe in
            stripe.with(player, make: { Player(budget: TokenBucket(perSecond: rate, now: now)) }, limit: stripeLimit) { player in
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
