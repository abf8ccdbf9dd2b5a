import Foundation
import GRDB

/// One entry of a player's wallet (SPEC §11): append-only, never changed or
/// deleted. Keyed where the spec keys it: a top-up by its order id, a debit
/// and a refund by the game's session (at most one of each per game), an
/// exchange by the prize taken as credits (SPEC §15: once per prize).
struct LedgerEntry: Sendable, Equatable {
    enum Kind: String, Sendable, CaseIterable {
        case topup, debit, refund, adjust, exchange
    }

    var wallet: PlayerAddress
    var kind: Kind
    /// Signed: a debit is negative, a top-up and a refund positive, an adjustment either.
    var credits: Int64
    /// A top-up's order id, a debit's or refund's session, an exchange's
    /// prize; an operator's
    /// adjustment's key (SPEC §11: once per wallet, kept beside the ledger
    /// with the balance it left, not in the ledger's own key); nil for a
    /// tourist's welcome.
    var key: String?
    /// An adjustment's reason (`welcome` for a new tourist's credits).
    var reason: String?
    /// A top-up's or an adjustment's body digest: the same key with other content is a conflict.
    var digest: String?
    var at: Date

    /// The key the ledger's own table keeps: an adjustment's is kept beside it.
    var ledgerKey: String? { kind == .adjust ? nil : key }
}

extension LedgerEntry {
    /// The rules every ledger's table holds its rows to, the site's SQLite
    /// and the chain's PostgreSQL alike: the kinds, each kind's sign, a key
    /// for all but an adjustment. Named, so that a later kind can replace
    /// them (``tableChecksBeforeExchange`` were the first tables', unnamed).
    static let tableChecks = """
        CONSTRAINT ledger_kinds CHECK (kind IN ('topup', 'debit', 'refund', 'adjust', 'exchange')),
        CONSTRAINT ledger_signs CHECK ((kind = 'debit' AND credits < 0)
            OR (kind IN ('topup', 'refund', 'exchange') AND credits > 0) OR (kind = 'adjust' AND credits <> 0)),
        CONSTRAINT ledger_keys CHECK ((kind = 'adjust') = (key IS NULL))
        """

    /// The rules of the ledger's first tables, as their migrations made
    /// them (a migration never changes): before `exchange` (SPEC §15).
    static let tableChecksBeforeExchange = """
        CHECK (kind IN ('topup', 'debit', 'refund', 'adjust')),
        CHECK ((kind = 'debit' AND credits < 0) OR (kind IN ('topup', 'refund') AND credits > 0) OR (kind = 'adjust' AND credits <> 0)),
        CHECK ((kind = 'adjust') = (key IS NULL))
        """
}

/// What became of an entry offered to the ledger.
enum LedgerAppend: Sendable, Equatable {
    /// Written; the wallet's balance after it.
    case written(balance: Int64)
    /// An entry with its kind and key is there already, with the same digest:
    /// nothing written (a top-up sent again, a debit asked twice).
    case duplicate(balance: Int64)
    /// An entry with its kind and key is there already, with another digest.
    case conflict
    /// It would take the balance below 0: nothing written.
    case insufficient(balance: Int64)
}

/// A wallet as read: its balance and a page of its entries, newest first.
struct WalletPage: Sendable, Equatable {
    var balance: Int64
    var entries: [LedgerEntry]
}

extension GameStore {
    /// The ledger's tables (SPEC §11): the entries, and each wallet's
    /// balance kept with them in the same transaction. SQLite itself refuses
    /// what must never happen: an entry changed or deleted, a second entry of
    /// one kind and key, a balance below 0.
    static func registerLedger(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v10-ledger") { db in
            try db.execute(
                sql: """
                    CREATE TABLE ledger (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        provider TEXT NOT NULL,
                        account TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        credits INTEGER NOT NULL,
                        key TEXT,
                        reason TEXT,
                        digest TEXT,
                        at TEXT NOT NULL,
                        \(LedgerEntry.tableChecksBeforeExchange)
                    );
                    CREATE UNIQUE INDEX ledger_once ON ledger (kind, key) WHERE key IS NOT NULL;
                    CREATE INDEX ledger_by_wallet ON ledger (provider, account, seq);
                    CREATE TRIGGER ledger_never_changed BEFORE UPDATE ON ledger
                        BEGIN SELECT RAISE(ABORT, 'ledger entries are never changed'); END;
                    CREATE TRIGGER ledger_never_deleted BEFORE DELETE ON ledger
                        BEGIN SELECT RAISE(ABORT, 'ledger entries are never deleted'); END;
                    CREATE TABLE wallets (
                        provider TEXT NOT NULL,
                        account TEXT NOT NULL,
                        balance INTEGER NOT NULL CHECK (balance >= 0),
                        PRIMARY KEY (provider, account)
                    );
                    """)
        }
    }

    /// A prize taken as credits is a ledger entry of its own kind, keyed by
    /// the prize (SPEC §11, §15). SQLite changes no CHECK in place: the
    /// table is made again with the new rules, its rows (and their numbers)
    /// copied as they are, its indexes and triggers made again.
    static func registerExchange(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v16-ledger-exchange") { db in
            try db.execute(
                sql: """
                    CREATE TABLE ledger_v15 (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        provider TEXT NOT NULL,
                        account TEXT NOT NULL,
                        kind TEXT NOT NULL,
                        credits INTEGER NOT NULL,
                        key TEXT,
                        reason TEXT,
                        digest TEXT,
                        at TEXT NOT NULL,
                        \(LedgerEntry.tableChecks)
                    );
                    INSERT INTO ledger_v15 (seq, provider, account, kind, credits, key, reason, digest, at)
                        SELECT seq, provider, account, kind, credits, key, reason, digest, at FROM ledger ORDER BY seq;
                    DROP TRIGGER ledger_never_changed;
                    DROP TRIGGER ledger_never_deleted;
                    DROP TABLE ledger;
                    ALTER TABLE ledger_v15 RENAME TO ledger;
                    CREATE UNIQUE INDEX ledger_once ON ledger (kind, key) WHERE key IS NOT NULL;
                    CREATE INDEX ledger_by_wallet ON ledger (provider, account, seq);
                    CREATE TRIGGER ledger_never_changed BEFORE UPDATE ON ledger
                        BEGIN SELECT RAISE(ABORT, 'ledger entries are never changed'); END;
                    CREATE TRIGGER ledger_never_deleted BEFORE DELETE ON ledger
                        BEGIN SELECT RAISE(ABORT, 'ledger entries are never deleted'); END;
                    """)
        }
    }

    /// Adjustments keyed by the operator (SPEC §11): once per wallet, with
    /// the body's digest and the balance the adjustment left, so that a
    /// retry is answered as the first was.
    static func registerAdjustKeys(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v14-adjust-keys") { db in
            try db.execute(
                sql: """
                    CREATE TABLE adjust_keys (
                        provider TEXT NOT NULL,
                        account TEXT NOT NULL,
                        key TEXT NOT NULL,
                        digest TEXT NOT NULL,
                        balance INTEGER NOT NULL,
                        PRIMARY KEY (provider, account, key)
                    );
                    """)
        }
    }

    /// Offers `entry` to the ledger in a transaction of its own.
    func append(_ entry: LedgerEntry) async throws(StorageError) -> LedgerAppend {
        do {
            return try await pool.write { db in try Self.append(entry, db) }
        } catch {
            throw StorageError(path: path, operation: "append to the ledger", underlying: error)
        }
    }

    /// Offers `entry` to the ledger within the caller's transaction, so that
    /// it is written with what causes it (a debit with its game's start, a
    /// refund with its end) or not at all.
    static func append(_ entry: LedgerEntry, _ db: Database) throws -> LedgerAppend {
        let balance = try self.balance(entry.wallet, db)
        if let kept = try taken(entry, db) {
            return kept.digest == entry.digest ? .duplicate(balance: kept.balance ?? balance) : .conflict
        }
        let after = balance + entry.credits
        guard after >= 0 else { return .insufficient(balance: balance) }
        try db.execute(
            sql: "INSERT INTO ledger (provider, account, kind, credits, key, reason, digest, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            arguments: [
                entry.wallet.provider, entry.wallet.accid, entry.kind.rawValue, entry.credits, entry.ledgerKey, entry.reason, entry.digest,
                Timestamp.string(entry.at),
            ])
        if entry.kind == .adjust, let key = entry.key {
            try db.execute(
                sql: "INSERT INTO adjust_keys (provider, account, key, digest, balance) VALUES (?, ?, ?, ?, ?)",
                arguments: [entry.wallet.provider, entry.wallet.accid, key, entry.digest ?? "", after])
        }
        try db.execute(
            sql: """
                INSERT INTO wallets (provider, account, balance) VALUES (?, ?, ?)
                ON CONFLICT (provider, account) DO UPDATE SET balance = excluded.balance
                """,
            arguments: [entry.wallet.provider, entry.wallet.accid, after])
        return .written(balance: after)
    }

    /// Every wallet's balance as kept: what ``Wallets`` starts from.
    func balances() throws(StorageError) -> [PlayerAddress: Int64] {
        do {
            return try pool.read { db in
                var balances: [PlayerAddress: Int64] = [:]
                for row in try Row.fetchAll(db, sql: "SELECT provider, account, balance FROM wallets") {
                    balances[PlayerAddress(accid: row["account"], provider: row["provider"])] = row["balance"]
                }
                return balances
            }
        } catch {
            throw StorageError(path: path, operation: "read the wallets", underlying: error)
        }
    }

    /// What the ledger holds already under `entry`'s key: its digest, and
    /// for an adjustment the balance it left (nil for other kinds); nil
    /// when the key is new (or `entry` has none).
    static func taken(_ entry: LedgerEntry, _ db: Database) throws -> (digest: String?, balance: Int64?)? {
        guard let key = entry.key else { return nil }
        if entry.kind == .adjust {
            guard
                let row = try Row.fetchOne(
                    db, sql: "SELECT digest, balance FROM adjust_keys WHERE provider = ? AND account = ? AND key = ?",
                    arguments: [entry.wallet.provider, entry.wallet.accid, key])
            else { return nil }
            return (row["digest"], row["balance"])
        }
        guard let row = try Row.fetchOne(db, sql: "SELECT digest FROM ledger WHERE kind = ? AND key = ?", arguments: [entry.kind.rawValue, key])
        else { return nil }
        return (row["digest"], nil)
    }

    /// What the ledger holds already under `entry`'s key (``taken(_:_:)``),
    /// read on GRDB's reader: never under a lock a machine takes.
    func taken(_ entry: LedgerEntry) async throws(StorageError) -> (digest: String?, balance: Int64?)? {
        do {
            return try await pool.read { db in try Self.taken(entry, db) }
        } catch {
            throw StorageError(path: path, operation: "read the ledger", underlying: error)
        }
    }

    /// A game's debit in credits (positive), if it was debited.
    static func debit(of session: String, _ db: Database) throws -> Int64? {
        try Int64.fetchOne(db, sql: "SELECT -credits FROM ledger WHERE kind = 'debit' AND key = ?", arguments: [session])
    }

    /// Writes an entry the wallets decided, with the writes it belongs to:
    /// written, or there already (a batch written again after a failure).
    /// Anything else means the file does not hold what the wallets hold
    /// (it was replaced, or changed by hand): the write fails, and queue
    /// changes are refused until an operator looks, rather than money being
    /// written that the file cannot account for.
    static func record(_ entry: LedgerEntry, _ db: Database) throws {
        switch try append(entry, db) {
        case .written, .duplicate: return
        case .conflict, .insufficient: throw LedgerOutOfStep(entry: entry)
        }
    }

    struct LedgerOutOfStep: Error, CustomStringConvertible {
        var entry: LedgerEntry
        var description: String {
            "the ledger in the file does not agree with the wallets: a \(entry.kind.rawValue) of \(entry.credits) for "
                + "\(entry.wallet.accid) of \(entry.wallet.provider) (key \(entry.key ?? "none")) cannot be written"
        }
    }

    /// A wallet's balance as kept (0 for a wallet with no entry).
    static func balance(_ wallet: PlayerAddress, _ db: Database) throws -> Int64 {
        try Int64.fetchOne(
            db, sql: "SELECT balance FROM wallets WHERE provider = ? AND account = ?", arguments: [wallet.provider, wallet.accid]) ?? 0
    }

    /// A wallet's balance and its entries, newest first.
    func wallet(_ wallet: PlayerAddress, limit: Int, offset: Int) async throws(StorageError) -> WalletPage {
        do {
            return try await pool.read { db in
                let entries = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT kind, credits, key, reason, digest, at FROM ledger WHERE provider = ? AND account = ?
                        ORDER BY seq DESC LIMIT ? OFFSET ?
                        """,
                    arguments: [wallet.provider, wallet.accid, limit, offset]
                ).map { row in
                    LedgerEntry(
                        wallet: wallet, kind: LedgerEntry.Kind(rawValue: row["kind"]) ?? .adjust, credits: row["credits"], key: row["key"],
                        reason: row["reason"], digest: row["digest"], at: Timestamp.date(row["at"]) ?? Date(timeIntervalSince1970: 0))
                }
                return WalletPage(balance: try Self.balance(wallet, db), entries: entries)
            }
        } catch {
            throw StorageError(path: path, operation: "read a wallet", underlying: error)
        }
    }

    /// Wallets whose kept balance is not the sum of their entries: none,
    /// unless the file was tampered with (a test checks it after its runs).
    func walletsOutOfBalance() throws(StorageError) -> [PlayerAddress] {
        do {
            return try pool.read { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT provider, account FROM (
                            SELECT w.provider, w.account, w.balance, COALESCE(SUM(l.credits), 0) AS total
                            FROM wallets w LEFT JOIN ledger l ON l.provider = w.provider AND l.account = w.account
                            GROUP BY w.provider, w.account
                        ) WHERE balance <> total
                        UNION
                        SELECT provider, account FROM ledger l WHERE NOT EXISTS (
                            SELECT 1 FROM wallets w WHERE w.provider = l.provider AND w.account = l.account)
                        """
                ).map { PlayerAddress(accid: $0["account"], provider: $0["provider"]) }
            }
        } catch {
            throw StorageError(path: path, operation: "check the wallets", underlying: error)
        }
    }
}
