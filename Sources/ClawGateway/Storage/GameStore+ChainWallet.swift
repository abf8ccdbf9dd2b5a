import Foundation
import GRDB
import Protocol

/// A chain site's side of the chain's ledger (SPEC §11): the debits it
/// asked and the refunds it owes, in `chain_wallet`, one row per kind and
/// session, written with the game change that causes them.
///
/// A debit's row is written with the ask (before it goes out): a restart
/// then knows the turn may have been debited, and its end asks for it
/// back. A refund's row is written with the game's end and is the outbox:
/// sent to the chain's ledger until it answers (`answered`).
extension GameStore {
    static func registerChainWallet(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v11-chain-wallet") { db in
            try db.execute(
                sql: """
                    CREATE TABLE chain_wallet (
                        kind TEXT NOT NULL CHECK (kind IN ('debit', 'refund')),
                        session TEXT NOT NULL,
                        provider TEXT NOT NULL,
                        account TEXT NOT NULL,
                        credits INTEGER NOT NULL CHECK (credits > 0),
                        machine TEXT,
                        at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
                        answered INTEGER NOT NULL DEFAULT 0,
                        PRIMARY KEY (kind, session)
                    );
                    CREATE INDEX chain_wallet_owed ON chain_wallet (kind, answered);
                    """)
        }
    }

    /// Writes an ask; one of a kind per session (an ask written again after
    /// a failed commit is the same ask).
    static func keep(_ ask: ChainWalletAsk, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO chain_wallet (kind, session, provider, account, credits, machine) VALUES (?, ?, ?, ?, ?, ?)
                ON CONFLICT (kind, session) DO NOTHING
                """,
            arguments: [ask.kind.rawValue, ask.session, ask.provider, ask.account, ask.credits, ask.machine])
    }

    /// What a game's player paid for it: its debit in this file's ledger,
    /// or in a chain what the chain's ledger was asked to debit.
    static func paid(for session: String, _ db: Database) throws -> Int64? {
        if let debit = try debit(of: session, db) { return debit }
        return try Int64.fetchOne(db, sql: "SELECT credits FROM chain_wallet WHERE kind = 'debit' AND session = ?", arguments: [session])
    }

    /// The refunds the chain's ledger has not answered yet, oldest first.
    func unansweredRefunds(limit: Int) async throws(StorageError) -> [ChainWalletAsk] {
        do {
            return try await pool.read { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT session, provider, account, credits, machine FROM chain_wallet
                        WHERE kind = 'refund' AND answered = 0 ORDER BY rowid LIMIT ?
                        """,
                    arguments: [limit]
                ).map { row in
                    ChainWalletAsk(
                        kind: .refund, session: row["session"], provider: row["provider"], account: row["account"], credits: row["credits"],
                        machine: row["machine"])
                }
            }
        } catch {
            throw StorageError(path: path, operation: "read the refunds owed by the chain", underlying: error)
        }
    }
}
