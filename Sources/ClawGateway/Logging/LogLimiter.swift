import Logging
import Synchronization

/// At most one log line of each kind per period: what a misbehaving PC or
/// client sends can be counted, but cannot fill the journal. The line that
/// is let through says how many were held back since the last one.
///
/// Kinds are the caller's constant reasons (never text from outside), so the
/// table stays as small as the list of reasons.
final class LogLimiter: Sendable {
    private struct Kind {
        var last: ContinuousClock.Instant
        var heldBack: Int
    }

    private let period: Duration
    private let now: @Sendable () -> ContinuousClock.Instant
    private let kinds = Mutex<[String: Kind]>([:])

    /// - Parameter now: the clock; tests pass their own.
    init(period: Duration = .seconds(10), now: @escaping @Sendable () -> ContinuousClock.Instant = { ContinuousClock.now }) {
        self.period = period
        self.now = now
    }

    /// Calls `log` with the number held back since the last line of `kind`,
    /// or holds this one back.
    func log(_ kind: String, _ log: (_ heldBack: Int) -> Void) {
        let now = now()
        let heldBack: Int? = kinds.withLock { kinds in
            if let seen = kinds[kind], now - seen.last < period {
                kinds[kind]?.heldBack += 1
                return nil
            }
            let heldBack = kinds[kind]?.heldBack ?? 0
            kinds[kind] = Kind(last: now, heldBack: 0)
            return heldBack
        }
        if let heldBack { log(heldBack) }
    }

    /// A line of `kind` on `logger`, or none when one went out in the
    /// period; the line let through carries `log.held_back` when any were.
    func log(_ kind: String, _ level: Logger.Level, _ message: Logger.Message, _ metadata: Logger.Metadata, on logger: Logger) {
        log(kind) { heldBack in
            var metadata = metadata
            if heldBack > 0 { metadata["log.held_back"] = .stringConvertible(heldBack) }
            logger.log(level: level, message, metadata: metadata)
        }
    }

    func warning(_ kind: String, _ message: Logger.Message, _ metadata: Logger.Metadata, on logger: Logger) {
        log(kind, .warning, message, metadata, on: logger)
    }
}
