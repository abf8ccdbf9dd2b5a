/// A command budget: `rate` tokens a second, at most `rate` saved up.
struct TokenBucket: Sendable {
    let rate: Double
    private var tokens: Double
    private var updated: Duration

    init(perSecond rate: Int, now: Duration) {
        self.rate = Double(rate)
        tokens = Double(rate)
        updated = now
    }

    /// Takes a token if there is one.
    mutating func take(now: Duration) -> Bool {
        if now > updated {
            tokens = min(rate, tokens + (now - updated).seconds * rate)
            updated = now
        }
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
