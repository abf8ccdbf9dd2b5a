import Foundation
import Logging
import PostgresNIO
import Protocol

/// The chain's wallets in PostgreSQL (SPEC §11): a player pays at any site
/// from one balance. The same ledger as a site's SQLite (``LedgerEntry``):
/// entries never changed or deleted (the database refuses it), one entry per
/// kind and key (a top-up's order, a debit's or refund's session), each
/// wallet's balance kept with its entries in one transaction and never below
/// 0. A change to a wallet locks the wallet's row first, so that recorders
/// and requests changing one wallet take turns there.
extension RecorderStore {
    static let ledgerMigration = [
        """
        CREATE TABLE ledger (
            seq bigserial PRIMARY KEY,
            provider text NOT NULL,
            account text NOT NULL,
            kind text NOT NULL,
            credits bigint NOT NULL,
            key text,
            reason text,
            digest text,
            site text,
            at timestamptz NOT NULL DEFAULT now(),
            \(LedgerEntry.tableChecksBeforeExchange)
        )
        """,
        "CREATE UNIQUE INDEX ledger_once ON ledger (kind, key) WHERE key IS NOT NULL",
        "CREATE INDEX ledger_by_wallet ON ledger (provider, account, seq)",
        """
        CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'ledger entries are never changed or deleted'; END $$
        """,
        "CREATE TRIGGER ledger_append_only BEFORE UPDATE OR DELETE ON ledger FOR EACH ROW EXECUTE FUNCTION ledger_append_only()",
        """
        CREATE TABLE wallets (
            provider text NOT NULL,
            account text NOT NULL,
            balance bigint NOT NULL CHECK (balance >= 0),
            PRIMARY KEY (provider, account)
        )
        """,
    ]

    /// A prize taken as credits is a ledger entry of its own kind, keyed by
    /// the prize (SPEC §11, §15). The first table's checks were made
    /// unnamed (PostgreSQL named them); every check of the table is dropped
    /// by the name the catalogue holds, and the rules made again, named.
    static let exchangeMigration = [
        """
        DO $$
        DECLARE c record;
        BEGIN
            FOR c IN SELECT conname FROM pg_constraint WHERE conrelid = 'ledger'::regclass AND contype = 'c' LOOP
                EXECUTE format('ALTER TABLE ledger DROP CONSTRAINT %I', c.conname);
            END LOOP;
        END $$
        """,
        // The same named rules as a new table's, each an ADD of one ALTER.
        "ALTER TABLE ledger " + LedgerEntry.tableChecks.replacingOccurrences(of: "CONSTRAINT ", with: "ADD CONSTRAINT "),
    ]

    /// An operator's adjustment is keyed (SPEC §11): the key, once per
    /// wallet, kept beside its entry with the body's digest and the balance
    /// the adjustment left, so that a retry is answered as the first was.
    static let adjustKeysMigration = [
        """
        CREATE TABLE adjust_keys (
            provider text NOT NULL,
            account text NOT NULL,
            key text NOT NULL,
            digest text NOT NULL,
            balance bigint NOT NULL,
            at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (provider, account, key)
        )
        """
    ]

    /// Offers a top-up or an adjustment to the chain's ledger in a
    /// transaction of its own (a site's debits and refunds:
    /// ``settle(_:)``).
    /// - Parameter audit: an operator's adjustment, written with its audit entry (SPEC §16).
    func append(_ entry: LedgerEntry, audit: AuditDraft? = nil) async throws -> LedgerAppend {
        try await migrate()
        do {
            return try await appendOnce(entry, audit: audit)
        } catch where Self.isUniqueViolation(error) {
            // The same key for another wallet, written between our look and our insert: look again.
            return try await appendOnce(entry, audit: audit)
        }
    }

    private func appendOnce(_ entry: LedgerEntry, audit: AuditDraft?) async throws -> LedgerAppend {
        let (provider, account, kind) = (entry.wallet.provider, entry.wallet.accid, entry.kind.rawValue)
        let (key, digest, credits) = (entry.key, entry.digest, entry.credits)
        return try await timed { [client, logger] in
            try await client.withTransaction(logger: logger) { connection -> LedgerAppend in
                try await Self.commitDurably(connection, logger)
                let balance = try await Self.lockWallet(provider: provider, account: account, connection, logger)
                if let key, kind == LedgerEntry.Kind.adjust.rawValue {
                    for try await (kept, first) in try await connection.query(
                        "SELECT digest, balance FROM adjust_keys WHERE provider = \(provider) AND account = \(account) AND key = \(key)",
                        logger: logger
                    ).decode((String, Int64).self) {
                        return kept == digest ? .duplicate(balance: first) : .conflict
                    }
                } else if let key {
                    for try await kept in try await connection.query(
                        "SELECT digest FROM ledger WHERE kind = \(kind) AND key = \(key)", logger: logger
                    ).decode(String?.self) {
                        return kept == digest ? .duplicate(balance: balance) : .conflict
                    }
                }
                let after = balance + credits
                guard after >= 0 else { return .insufficient(balance: balance) }
                try await Self.write(entry, site: nil, after: after, connection, logger)
                if let audit {
                    let trail = audit.entry(before: AuditValue(["balance": balance]), after: AuditValue(["balance": after]), at: entry.at)
                    try await Self.appendAudit(trail, connection, logger)
                }
                if let key, kind == LedgerEntry.Kind.adjust.rawValue {
                    try await connection.query(
                        """
                        INSERT INTO adjust_keys (provider, account, key, digest, balance)
                        VALUES (\(provider), \(account), \(key), \(digest ?? ""), \(after))
                        """, logger: logger)
                }
                return .written(balance: after)
            }
        }
    }

    /// Locks a wallet's row (made at 0 if it has none) for the rest of the
    /// transaction, and returns its balance: every change to one wallet
    /// takes its turn here. The caller's transaction commits durably
    /// (``commitDurably(_:_:)``).
    static func lockWallet(provider: String, account: String, _ connection: PostgresConnection, _ logger: Logger) async throws -> Int64 {
        var balance: Int64 = 0
        for try await value in try await connection.query(
            """
            INSERT INTO wallets (provider, account, balance) VALUES (\(provider), \(account), 0)
            ON CONFLICT (provider, account) DO UPDATE SET balance = wallets.balance
            RETURNING balance
            """, logger: logger
        ).decode(Int64.self) {
            balance = value
        }
        return balance
    }

    /// Writes an entry whose wallet is locked, and the wallet's balance after it.
    /// An adjustment's key is not the ledger's (``adjustKeysMigration``).
    static func write(_ entry: LedgerEntry, site: String?, after: Int64, _ connection: PostgresConnection, _ logger: Logger) async throws {
        let (provider, account, kind) = (entry.wallet.provider, entry.wallet.accid, entry.kind.rawValue)
        let (key, reason, digest, credits, at) = (entry.ledgerKey, entry.reason, entry.digest, entry.credits, entry.at)
        // One statement, one round trip: the entry and the balance it leaves.
        try await connection.query(
            """
            WITH entry AS (
                INSERT INTO ledger (provider, account, kind, credits, key, reason, digest, site, at)
                VALUES (\(provider), \(account), \(kind), \(credits), \(key), \(reason), \(digest), \(site), \(at))
            )
            UPDATE wallets SET balance = \(after) WHERE provider = \(provider) AND account = \(account)
            """, logger: logger)
    }

    static func isUniqueViolation(_ error: any Error) -> Bool {
        var error: (any Error)? = error
        if let transaction = error as? PostgresTransactionError { error = transaction.closureError ?? transaction.commitError }
        return (error as? PSQLError)?.serverInfo?[.sqlState] == "23505"
    }

    /// A wallet's balance and its entries, newest first, as one moment saw
    /// them: one statement, so that the balance is the sum of the entries it
    /// shows with (a change committed between two reads would show a
    /// balance its entries do not explain); within the readers' share of the pool.
    func wallet(_ player: PlayerAddress, limit: Int, offset: Int) async throws -> WalletPage {
        let (provider, account) = (player.provider, player.accid)
        return try await read(
            """
            WITH w AS (SELECT balance FROM wallets WHERE provider = \(provider) AND account = \(account)),
                 e AS (SELECT seq, kind, credits, key, reason, digest, at FROM ledger
                       WHERE provider = \(provider) AND account = \(account)
                       ORDER BY seq DESC LIMIT \(Int64(limit)) OFFSET \(Int64(offset)))
            SELECT COALESCE((SELECT balance FROM w), 0), e.kind, e.credits, e.key, e.reason, e.digest, e.at
            FROM (SELECT 1) AS one LEFT JOIN e ON true
            ORDER BY e.seq DESC
            """
        ) { rows in
            var balance: Int64 = 0
            var entries: [LedgerEntry] = []
            for try await (kept, kind, credits, key, reason, digest, at) in rows.decode(
                (Int64, String?, Int64?, String?, String?, String?, Date?).self)
            {
                balance = kept
                guard let kind, let credits, let at else { continue }
                entries.append(
                    LedgerEntry(
                        wallet: player, kind: LedgerEntry.Kind(rawValue: kind) ?? .adjust, credits: credits, key: key, reason: reason,
                        digest: digest, at: at))
            }
            return WalletPage(balance: balance, entries: entries)
        }
    }

    /// Wallets whose kept balance is not the sum of their entries: none,
    /// unless the database was changed by hand (the chain's tests check it).
    func walletsOutOfBalance() async throws -> [PlayerAddress] {
        try await read(
            """
            SELECT w.provider, w.account FROM wallets w LEFT JOIN ledger l ON l.provider = w.provider AND l.account = w.account
            GROUP BY w.provider, w.account, w.balance HAVING w.balance <> COALESCE(SUM(l.credits), 0)
            UNION
            SELECT l.provider, l.account FROM ledger l
            WHERE NOT EXISTS (SELECT 1 FROM wallets w WHERE w.provider = l.provider AND w.account = l.account)
            """
        ) { rows in
            var out: [PlayerAddress] = []
            for try await (provider, account) in rows.decode((String, String).self) {
                out.append(PlayerAddress(accid: account, provider: provider))
            }
            return out
        }
    }
}

/// The chain's wallets as the top-up, adjustment and wallet routes see them
/// (SPEC §11): served by the recorder, kept in its PostgreSQL.
struct ChainWallets: WalletKeeper {
    let store: RecorderStore
    let logger: Logger

    func topUp(_ entry: LedgerEntry) async -> WalletChange {
        await change(entry)
    }

    func adjust(_ entry: LedgerEntry, audit: AuditDraft?) async -> WalletChange {
        await change(entry, audit: audit)
    }

    func wallet(_ player: PlayerAddress, limit: Int, offset: Int) async throws -> WalletPage {
        try await store.wallet(player, limit: limit, offset: offset)
    }

    private func change(_ entry: LedgerEntry, audit: AuditDraft? = nil) async -> WalletChange {
        do {
            switch try await store.append(entry, audit: audit) {
            case .written(let balance): return .written(balance: balance)
            case .duplicate(let balance): return .duplicate(balance: balance)
            case .conflict: return .conflict
            case .insufficient(let balance): return .insufficient(balance: balance)
            }
        } catch {
            logger.warning(
                "Wallet change not written: the database is unreachable",
                metadata: RecorderStore.shape(error, "write a wallet change").metadata(["ledger.kind": "\(entry.kind.rawValue)"]))
            return .unavailable
        }
    }
}
