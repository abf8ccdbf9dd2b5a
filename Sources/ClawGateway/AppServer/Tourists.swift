import Crypto
import Foundation
import Logging
import Protocol
import ServiceLifecycle

/// The demo's tourist login (SPEC §8).
///
/// A new tourist gets a new IM account, made through NetEase's
/// `user/create.action` and kept durably. Who may come back as that account
/// is ``AppServerSettings/Sessions``: with `secret` (the default) the new
/// account's answer carries a random `sid` of 128 bits, kept only as its
/// SHA-256, and only that secret brings the account back; with `accid` the
/// account id does, as in the demo's own server.
///
/// Every address is held to budgets: ``maxNewPerMinute`` new accounts (the
/// app's account quota), ``maxReturningPerMinute`` returning logins, and
/// ``TokenThrottle``'s 10 unknown or expired sids a minute, after which the
/// address gets 429 for a minute on every app-server route.
///
/// A tourist expires `app_server.tourist_ttl` after its last login. Expired
/// tourists are swept every ``sweepInterval``: the account's IM token is
/// refreshed (`user/refreshToken.action`), so that the token its client
/// holds stops working, and the tourist is deleted.
final class Tourists: Service, Sendable {
    static let maxNewPerMinute = 10
    static let maxReturningPerMinute = 60
    /// Accounts NetEase accepts: at most 32 characters.
    static let maxAccountBytes = 32
    /// A sid longer than any this server gives is not looked up.
    static let maxSidBytes = 64
    static let sweepInterval: Duration = .seconds(60)
    /// Tokens refreshed per sweep at most: a backlog of expired tourists
    /// spends the app's API quota a little at a time.
    static let sweepBatch = 100

    enum Outcome: Sendable, Equatable {
        case returning(TouristAccount)
        /// A new account; `sid` is the secret to come back with (nil with `sessions: accid`).
        case created(TouristAccount, sid: String?)
        /// Over the address's budget: try again in this many seconds.
        case rateLimited(retryAfter: Int)
        /// NetEase or storage failed: nothing was kept.
        case failed
    }

    /// A sid presented to a route that needs a live tourist (`room/list`, `wallet`).
    enum Lookup: Sendable, Equatable {
        case valid(TouristAccount)
        /// Unknown or expired: 401.
        case invalid
        /// Too many invalid sids from this address: 429 for this many seconds.
        case blocked(retryAfter: Int)
    }

    let sessions: AppServerSettings.Sessions
    private let store: GameStore
    private let accounts: any NetEaseAccounts
    private let ttl: Duration
    private let clock: GameClock
    private let logger: Logger
    private let warnings = LogLimiter()
    private let newAccounts = AddressBudget(perMinute: Tourists.maxNewPerMinute)
    private let returning = AddressBudget(perMinute: Tourists.maxReturningPerMinute)
    private let badSids: TokenThrottle
    /// Where a new tourist's welcome credits go (`credits.welcome`, SPEC §11).
    private let wallets: Wallets?

    init(
        store: GameStore, accounts: any NetEaseAccounts, ttl: Duration, sessions: AppServerSettings.Sessions, clock: GameClock,
        wallets: Wallets? = nil, logger: Logger
    ) {
        self.wallets = wallets
        self.store = store
        self.accounts = accounts
        self.ttl = ttl
        self.sessions = sessions
        self.clock = clock
        self.logger = logger
        badSids = TokenThrottle(now: clock.wallNow)
    }

    /// The `tourist` call: `sid` as the client sent it, `client` where it came from.
    func login(sid: String?, client: ClientAddress?) async -> Outcome {
        if let wait = badSids.blockedFor(client) { return rateLimited(wait) }
        let now = clock.wallNow()
        if let sid, !sid.isEmpty {
            if let kept = await live(sid, at: now) {
                if let wait = returning.admit(client, at: now) { return rateLimited(wait) }
                var renewed = kept
                renewed.expiresAt = now.addingTimeInterval(ttl.seconds)
                do {
                    try await store.save(renewed, createdAt: now)
                } catch {
                    fail("Tourist not renewed: storage failed", error: String(describing: error))
                    return .failed
                }
                AppServerMetrics.touristsReturning.increment()
                return .returning(renewed)
            }
            // Not a live sid: counted, and a new account, as an unknown sid always got.
            refused(client)
            if let wait = badSids.blockedFor(client) { return rateLimited(wait) }
        }
        if let wait = newAccounts.admit(client, at: now) { return rateLimited(wait) }
        let accid = "tourist_" + Signatures.nonce(bytes: 8)
        let nickname = "玩家" + String(100_000 + Int.random(in: 0..<900_000))
        let secret = sessions == .secret ? Signatures.nonce(bytes: 16) : nil
        do {
            let user = try await accounts.createUser(accid: accid, name: nickname)
            let tourist = TouristAccount(
                accid: user.accid, nickname: user.name.isEmpty ? nickname : user.name, token: user.token,
                expiresAt: now.addingTimeInterval(ttl.seconds), sidHash: secret.map(Self.hash))
            try await store.save(tourist, createdAt: now)
            AppServerMetrics.touristsCreated.increment()
            logger.info("Tourist account created", metadata: ["player.accid": .string(tourist.accid)])
            await welcome(tourist, at: now)
            return .created(tourist, sid: secret)
        } catch let error as NetEaseAPIError {
            fail("Tourist account not created: NetEase's user/create failed", error: error.description)
        } catch {
            fail("Tourist account not kept: storage failed", error: String(describing: error))
        }
        return .failed
    }

    /// A new tourist's welcome credits: an adjustment with reason `welcome`.
    /// One that storage does not take is logged; the account stands.
    private func welcome(_ tourist: TouristAccount, at now: Date) async {
        guard let wallets, wallets.settings.welcome > 0 else { return }
        let entry = LedgerEntry(
            wallet: PlayerAddress(accid: tourist.accid, provider: "netease"), kind: .adjust, credits: wallets.settings.welcome, key: nil,
            reason: "welcome", digest: nil, at: now)
        if case .written = await wallets.adjust(entry, audit: nil) { return }
        fail("Welcome credits not saved in time: storage is failing", error: "written once storage is back, if it took them")
    }

    /// The live tourist of a sid sent to a route that needs one.
    func lookup(sid: String, client: ClientAddress?) async -> Lookup {
        if let wait = badSids.blockedFor(client) {
            AppServerMetrics.touristsRateLimited.increment()
            return .blocked(retryAfter: wait)
        }
        if let kept = await live(sid, at: clock.wallNow()) { return .valid(kept) }
        refused(client)
        return .invalid
    }

    /// The kept tourist that `sid` names while it is valid: by the secret's
    /// hash, or by the account id with `sessions: accid`.
    private func live(_ sid: String, at now: Date) async -> TouristAccount? {
        guard sid.utf8.count <= Self.maxSidBytes else { return nil }
        let kept: TouristAccount?
        switch sessions {
        case .secret:
            let hash = Self.hash(sid)
            // Looked up by the hash, compared again in constant time.
            kept = try? await store.tourist(sidHash: hash).flatMap { Signatures.hexEqual($0.sidHash ?? "", hash) ? $0 : nil }
        case .accid:
            guard sid.utf8.count <= Self.maxAccountBytes else { return nil }
            kept = try? await store.tourist(accid: sid)
        }
        guard let kept, kept.expiresAt > now else { return nil }
        return kept
    }

    static func hash(_ sid: String) -> String {
        SHA256.hash(data: Array(sid.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    private func refused(_ client: ClientAddress?) {
        AppServerMetrics.touristsBadSid.increment()
        badSids.failed(client)
    }

    private func rateLimited(_ seconds: Int) -> Outcome {
        AppServerMetrics.touristsRateLimited.increment()
        return .rateLimited(retryAfter: seconds)
    }

    // MARK: Expiry

    func run() async throws {
        try? await cancelWhenGracefulShutdown { [self] in
            while !Task.isCancelled {
                let started = clock.now()
                await sweep()
                try await clock.sleep(started + Self.sweepInterval)
            }
        }
    }

    /// Refreshes the token of up to ``sweepBatch`` expired tourists and
    /// deletes them; one whose refresh fails stays for the next sweep.
    /// Returns how many were deleted.
    @discardableResult
    func sweep() async -> Int {
        let expired: [TouristAccount]
        do {
            expired = try await store.expiredTourists(at: clock.wallNow(), limit: Self.sweepBatch)
        } catch {
            fail("Expired tourists not read: storage failed", error: String(describing: error))
            return 0
        }
        var deleted = 0
        for tourist in expired where !Task.isCancelled {
            do {
                try await accounts.refreshToken(accid: tourist.accid)
                try await store.deleteTourist(accid: tourist.accid)
                AppServerMetrics.touristsExpired.increment()
                deleted += 1
            } catch let error as NetEaseAPIError {
                AppServerMetrics.touristsRefreshFailed.increment()
                warn("refresh", "An expired tourist's token not refreshed: kept for the next sweep", tourist, error.description)
                break
            } catch {
                warn("delete", "An expired tourist not deleted: storage failed", tourist, String(describing: error))
                break
            }
        }
        if deleted > 0 { logger.info("Expired tourists deleted, their IM tokens refreshed", metadata: ["tourists.deleted": "\(deleted)"]) }
        return deleted
    }

    private func warn(_ kind: String, _ message: Logger.Message, _ tourist: TouristAccount, _ error: String) {
        warnings.warning(kind, message, ["player.accid": .string(tourist.accid), "error.message": .string(error)], on: logger)
    }

    private func fail(_ message: Logger.Message, error: String) {
        AppServerMetrics.touristsFailed.increment()
        warnings.warning("\(message)", message, ["error.message": .string(error)], on: logger)
    }
}
