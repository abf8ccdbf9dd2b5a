import DequeModule
import Foundation
import Logging
import Protocol
import Synchronization

/// The demo's tourist login (SPEC §8): a valid `sid` gets its own account
/// back, for another `app_server.tourist_ttl`; anyone else gets a new IM
/// account made through NetEase's `user/create.action`, kept durably. At
/// most ``maxNewPerMinute`` new accounts are asked for per client address
/// a minute, so that nobody can fill the app's account quota from one host.
final class Tourists: Sendable {
    static let maxNewPerMinute = 10
    /// Accounts NetEase accepts: at most 32 characters.
    static let maxAccountBytes = 32

    enum Outcome: Sendable, Equatable {
        case returning(TouristAccount)
        case created(TouristAccount)
        /// Over the address's budget: try again in this many seconds.
        case rateLimited(retryAfter: Int)
        /// NetEase or storage failed: nothing was kept.
        case failed
    }

    private let store: GameStore
    private let accounts: any NetEaseAccounts
    private let ttl: Duration
    private let wallNow: @Sendable () -> Date
    private let logger: Logger
    private let warnings = LogLimiter()
    /// When each address last asked for new accounts, within the last minute.
    private let recent = Mutex<[ClientAddress?: Deque<Date>]>([:])

    init(store: GameStore, accounts: any NetEaseAccounts, ttl: Duration, wallNow: @escaping @Sendable () -> Date, logger: Logger) {
        self.store = store
        self.accounts = accounts
        self.ttl = ttl
        self.wallNow = wallNow
        self.logger = logger
    }

    /// The `tourist` call: `sid` as the client sent it, `client` where it came from.
    func login(sid: String?, client: ClientAddress?) async -> Outcome {
        let now = wallNow()
        if let sid, let kept = await valid(sid, at: now) {
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
        if let wait = admit(client, at: now) {
            AppServerMetrics.touristsRateLimited.increment()
            return .rateLimited(retryAfter: wait)
        }
        let accid = "tourist_" + Signatures.nonce(bytes: 8)
        let nickname = "玩家" + String(100_000 + Int.random(in: 0..<900_000))
        do {
            let user = try await accounts.createUser(accid: accid, name: nickname)
            let tourist = TouristAccount(
                accid: user.accid, nickname: user.name.isEmpty ? nickname : user.name, token: user.token,
                expiresAt: now.addingTimeInterval(ttl.seconds))
            try await store.save(tourist, createdAt: now)
            AppServerMetrics.touristsCreated.increment()
            logger.info("Tourist account created", metadata: ["player.accid": .string(tourist.accid)])
            return .created(tourist)
        } catch let error as NetEaseAPIError {
            fail("Tourist account not created: NetEase's user/create failed", error: error.description)
        } catch {
            fail("Tourist account not kept: storage failed", error: String(describing: error))
        }
        return .failed
    }

    /// The kept tourist of `sid` while it is valid; nil when unknown or expired.
    func valid(_ sid: String, at now: Date) async -> TouristAccount? {
        guard !sid.isEmpty, sid.utf8.count <= Self.maxAccountBytes, let kept = try? await store.tourist(accid: sid), kept.expiresAt > now
        else { return nil }
        return kept
    }

    /// Counts a request for a new account from `client`; nil when within its
    /// budget, else the seconds until it has room again.
    private func admit(_ client: ClientAddress?, at now: Date) -> Int? {
        recent.withLock { recent in
            let cutoff = now.addingTimeInterval(-60)
            // Forget addresses whose last request is a minute old: the map stays as small as the last minute's callers.
            if recent.count > 1024 { recent = recent.filter { ($0.value.last ?? .distantPast) > cutoff } }
            var mine = recent[client] ?? []
            while let first = mine.first, first <= cutoff { mine.removeFirst() }
            guard mine.count < Self.maxNewPerMinute else {
                recent[client] = mine
                return max(1, Int((mine.first ?? now).timeIntervalSince(cutoff).rounded(.up)))
            }
            mine.append(now)
            recent[client] = mine
            return nil
        }
    }

    private func fail(_ message: Logger.Message, error: String) {
        AppServerMetrics.touristsFailed.increment()
        warnings.log("\(message)") { heldBack in
            var metadata: Logger.Metadata = ["error": .string(error)]
            if heldBack > 0 { metadata["log.held_back"] = .stringConvertible(heldBack) }
            logger.warning(message, metadata: metadata)
        }
    }
}
