import Foundation
import Logging
import PostgresNIO
import Protocol

/// A site's debits and refunds in the chain's ledger (SPEC §9, §11), keyed
/// by the game's session, with the wallet's row locked first (as every
/// change to a wallet is, ``RecorderStore/append(_:)``).
///
/// - A debit is taken only with a router's voucher (``VoucherPolicy``),
///   checked before anything is read: made with the routers' key for the
///   asking site, that player and session, for the price asked, young
///   enough, and never used for another game. A debit refused for its
///   voucher says nothing of the wallet.
/// - A debit asked twice is written once: the second finds the first (same
///   wallet, same site) and is answered `debited` again.
/// - A refund pays back exactly what the session's debit took, once, and
///   only to the wallet and site the debit was for.
/// - A refund that finds no debit closes the session for its site: the site
///   asks it for every turn whose debit it asked and whose game never
///   started, and a debit still on its way (delivered after the refund)
///   must then be refused, or it would take credits for no game.
///
/// Asks are settled in groups (``settle(_:)``): one transaction, one
/// durable commit (one `fsync`) for many, each ask in a savepoint of its own
/// so that one that fails leaves the others written.
extension RecorderStore {
    static let closedSessionsMigration = [
        """
        CREATE TABLE closed_sessions (
            site text NOT NULL,
            session text NOT NULL,
            at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (site, session)
        )
        """
    ]

    /// SPEC §9: the vouchers debits were taken with, each used once; and
    /// both tables kept only as long as a voucher lives.
    static let vouchersMigration = [
        """
        CREATE TABLE vouchers (
            copy text PRIMARY KEY,
            site text NOT NULL,
            session text NOT NULL,
            at timestamptz NOT NULL DEFAULT now()
        )
        """,
        "CREATE INDEX vouchers_at ON vouchers (at)",
        "CREATE INDEX closed_sessions_at ON closed_sessions (at)",
    ]

    /// Longest session, account and provider a site may name; anything longer is refused.
    static let maxWalletField = 256

    /// One site's debit or refund, as it came on the site's `wallet` topic.
    struct SiteAsk: Sendable {
        var site: String
        var ask: ChainWalletAsk
    }

    /// Answers a site's debit or refund, once the ledger's transaction is
    /// committed (a group of one: ``settle(_:)``).
    func settle(_ ask: ChainWalletAsk, site: String) async throws -> ChainWalletAnswer? {
        try await settle([SiteAsk(site: site, ask: ask)]).first ?? nil
    }

    /// Settles `asks` in one transaction, in their order for each wallet,
    /// and answers each once it is committed: nil for an ask that could not
    /// be settled (it is not answered: a debit's site gives up after its
    /// wallet timeout, a refund comes again). Throws when the database cannot
    /// be reached: nothing is answered.
    ///
    /// The wallets are locked in one order (by provider and account) so that
    /// two recorders settling groups at once cannot deadlock; the asks of one
    /// wallet keep the order they came in.
    func settle(_ asks: [SiteAsk]) async throws -> [ChainWalletAnswer?] {
        guard !asks.isEmpty else { return [] }
        try await migrate()
        let order = asks.indices.sorted { a, b in
            let (x, y) = (asks[a].ask, asks[b].ask)
            return (x.provider, x.account, a) < (y.provider, y.account, b)
        }
        return try await timed { [client, logger] in
            try await client.withTransaction(logger: logger) { connection -> [ChainWalletAnswer?] in
                try await Self.commitDurably(connection, logger)
                var answers = [ChainWalletAnswer?](repeating: nil, count: asks.count)
                for index in order {
                    answers[index] = try await Self.settleInSavepoint(asks[index], connection, logger)
                }
                return answers
            }
        }
    }

    /// One ask within the group's transaction: in a savepoint, tried again
    /// once when another recorder wrote the same key between our look and
    /// our insert; nil when it still fails for what it holds.
    private static func settleInSavepoint(_ item: SiteAsk, _ connection: PostgresConnection, _ logger: Logger) async throws
        -> ChainWalletAnswer?
    {
        for attempt in 1...2 {
            try await connection.query("SAVEPOINT ask", logger: logger)
            do {
                let answer = try await settleOnce(item.ask, site: item.site, connection, logger)
                try await connection.query("RELEASE SAVEPOINT ask", logger: logger)
                return answer
            } catch where isUniqueViolation(error) || isDataRefusal(error) {
                try await connection.query("ROLLBACK TO SAVEPOINT ask", logger: logger)
                if attempt == 2 || !isUniqueViolation(error) {
                    logger.warning(
                        "A debit or refund the ledger refused as data: not answered",
                        metadata: shape(error, "settle a wallet ask").metadata([
                            "chain.site": .string(item.site), "game.session": .string(item.ask.session),
                        ]))
                    return nil
                }
            }
        }
        return nil
    }

    private static func settleOnce(_ ask: ChainWalletAsk, site: String, _ connection: PostgresConnection, _ logger: Logger) async throws
        -> ChainWalletAnswer
    {
        let (provider, account, session, credits, kind) = (ask.provider, ask.account, ask.session, ask.credits, ask.kind)
        func answer(_ result: ChainWalletAnswer.Result, _ balance: Int64?) -> ChainWalletAnswer {
            ChainWalletAnswer(kind: kind, session: session, result: result, balance: balance)
        }
        func entry(_ kind: LedgerEntry.Kind, _ credits: Int64) -> LedgerEntry {
            LedgerEntry(
                wallet: PlayerAddress(accid: account, provider: provider), kind: kind, credits: credits, key: session, reason: nil,
                digest: nil, at: Date())
        }
        if kind == .debit, let voucher = ask.voucher {
            // Used once: by this site for this session (the same debit asked again), or never.
            let copy = voucher.copy
            let fresh = try await connection.query(
                "INSERT INTO vouchers (copy, site, session) VALUES (\(copy), \(site), \(session)) ON CONFLICT (copy) DO NOTHING RETURNING 1",
                logger: logger
            ).collect().count == 1
            if !fresh {
                for try await (usedSite, usedSession) in try await connection.query(
                    "SELECT site, session FROM vouchers WHERE copy = \(copy)", logger: logger
                ).decode((String, String).self) where usedSite != site || usedSession != session {
                    return answer(.refused, nil)
                }
            }
        }
        let balance = try await lockWallet(provider: provider, account: account, connection, logger)
        // In one round trip: the session's debit, if any (whose, from which
        // site, how much), its refund, and whether this site closed it.
        var debit: (provider: String, account: String, site: String?, credits: Int64)?
        var refunded = false
        var closed = false
        for try await (what, rowProvider, rowAccount, rowSite, rowCredits) in try await connection.query(
            """
            SELECT kind, provider, account, site, credits FROM ledger WHERE kind IN ('debit', 'refund') AND key = \(session)
            UNION ALL
            SELECT 'closed', '', '', site, 0 FROM closed_sessions WHERE site = \(site) AND session = \(session)
            """, logger: logger
        ).decode((String, String, String, String?, Int64).self) {
            switch what {
            case "debit": debit = (rowProvider, rowAccount, rowSite, rowCredits)
            case "refund": refunded = true
            default: closed = true
            }
        }
        let ours = debit.map { $0.provider == provider && $0.account == account && $0.site == site } ?? false
        switch kind {
        case .debit:
            if debit != nil { return ours ? answer(.debited, balance) : answer(.refused, nil) }
            if closed { return answer(.refused, nil) }
            guard balance >= credits else { return answer(.insufficient, balance) }
            try await write(entry(.debit, -credits), site: site, after: balance - credits, connection, logger)
            return answer(.debited, balance - credits)
        case .refund:
            guard let debit, ours else {
                try await connection.query(
                    "INSERT INTO closed_sessions (site, session) VALUES (\(site), \(session)) ON CONFLICT DO NOTHING", logger: logger)
                return answer(.nothingToRefund, nil)
            }
            if refunded { return answer(.refunded, balance) }
            try await write(entry(.refund, -debit.credits), site: site, after: balance - debit.credits, connection, logger)
            return answer(.refunded, balance - debit.credits)
        }
    }

    /// Forgets the vouchers used and the sessions closed longer ago than a
    /// voucher lives (`keep`): a debit that comes after that carries a
    /// voucher too old to be taken anyway. A site's refunds of sessions it
    /// never had so fill the table for that long at most.
    func forgetSpentVouchers(olderThan keep: Duration) async throws {
        try await migrate()
        let seconds = Double(keep.milliseconds) / 1000
        try await timed { [client, logger] in
            try await client.withTransaction(logger: logger) { connection in
                try await connection.query(
                    "DELETE FROM vouchers WHERE at < now() - make_interval(secs => \(seconds))", logger: logger)
                try await connection.query(
                    "DELETE FROM closed_sessions WHERE at < now() - make_interval(secs => \(seconds))", logger: logger)
            }
        }
    }
}

/// The recorder's rules for a debit's voucher (SPEC §9), checked before the
/// database is asked anything: an ask that fails them is refused, and its
/// answer says nothing of the wallet.
struct VoucherPolicy: Sendable {
    /// `recorder.ledger_key`; nil: no debit is taken at all.
    var key: String?
    /// `recorder.voucher_max_age`.
    var maxAge: Duration
    /// How far ahead of the recorder's clock a router's may be.
    static let skew: Duration = .seconds(5)

    /// Why `ask` (a debit of `site`) is refused at `now`, or nil when its voucher may be used.
    func problem(_ ask: ChainWalletAsk, site: String, now: Date) -> String? {
        guard ask.kind == .debit else { return nil }
        guard let key else { return "the recorder has no ledger_key: it takes no debit" }
        guard let voucher = ask.voucher else { return "no voucher" }
        guard voucher.copy.utf8.count <= ChainVoucher.maxCopyBytes, !voucher.copy.isEmpty else { return "the voucher's copy id is not one" }
        guard voucher.isValid(key: key, site: site, provider: ask.provider, account: ask.account, session: ask.session) else {
            return "the voucher is not the routers' for this site, player and session"
        }
        guard voucher.price == ask.credits else { return "the voucher is for a price of \(voucher.price), not \(ask.credits)" }
        let age = Duration.milliseconds(ChainCopy.milliseconds(now) - voucher.receivedMS)
        guard age <= maxAge, age >= .zero - Self.skew else { return "the voucher is \(age.milliseconds) ms old" }
        return nil
    }

    /// How long a used voucher and a closed session are remembered: past
    /// it, any voucher they could stop is too old to be taken.
    var remembered: Duration { maxAge + Self.skew + .seconds(5) }
}

extension RecorderStore {
    /// Whether PostgreSQL refused an ask's values themselves (``dataRefusal(_:)``).
    static func isDataRefusal(_ error: any Error) -> Bool {
        dataRefusal(error) != nil
    }
}
