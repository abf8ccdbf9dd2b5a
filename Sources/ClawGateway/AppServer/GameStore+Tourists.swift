import Foundation
import GRDB

/// A tourist account as kept: the IM account the gateway created for a
/// demo client, valid until `expiresAt`.
struct TouristAccount: Sendable, Equatable {
    var accid: String
    var nickname: String
    /// The IM token: given to its client, never logged.
    var token: String
    var expiresAt: Date
    /// SHA-256 of its secret sid (hex), with `app_server.sessions: secret`; never the sid itself.
    var sidHash: String? = nil
}

extension GameStore {
    /// The tourist with this account, valid or not; nil when there is none.
    func tourist(accid: String) async throws(StorageError) -> TouristAccount? {
        try await tourists(where: "accid = ?", [accid], limit: 1).first
    }

    /// The tourist whose secret sid hashes to `sidHash`, valid or not.
    func tourist(sidHash: String) async throws(StorageError) -> TouristAccount? {
        try await tourists(where: "sid_hash = ?", [sidHash], limit: 1).first
    }

    /// Tourists whose expiry has passed, the longest expired first.
    func expiredTourists(at now: Date, limit: Int) async throws(StorageError) -> [TouristAccount] {
        try await tourists(where: "expires_at <= ? ORDER BY expires_at", [Timestamp.string(now)], limit: limit)
    }

    private func tourists(where condition: String, _ arguments: StatementArguments, limit: Int) async throws(StorageError) -> [TouristAccount] {
        do {
            return try await pool.read { db in
                try Row.fetchAll(
                    db, sql: "SELECT accid, nickname, token, expires_at, sid_hash FROM tourists WHERE \(condition) LIMIT \(limit)",
                    arguments: arguments
                ).map { row in
                    TouristAccount(
                        accid: row["accid"], nickname: row["nickname"], token: row["token"],
                        expiresAt: Timestamp.date(row["expires_at"]) ?? Date(timeIntervalSince1970: 0), sidHash: row["sid_hash"])
                }
            }
        } catch {
            throw StorageError(path: path, operation: "read tourists", underlying: error)
        }
    }

    func deleteTourist(accid: String) async throws(StorageError) {
        do {
            try await pool.write { db in try db.execute(sql: "DELETE FROM tourists WHERE accid = ?", arguments: [accid]) }
        } catch {
            throw StorageError(path: path, operation: "delete a tourist", underlying: error)
        }
    }

    /// Keeps a new tourist, or moves a kept one's expiry.
    func save(_ tourist: TouristAccount, createdAt: Date) async throws(StorageError) {
        do {
            try await pool.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO tourists (accid, nickname, token, created_at, expires_at, sid_hash) VALUES (?, ?, ?, ?, ?, ?)
                        ON CONFLICT (accid) DO UPDATE SET expires_at = excluded.expires_at
                        """,
                    arguments: [
                        tourist.accid, tourist.nickname, tourist.token, Timestamp.string(createdAt),
                        Timestamp.string(tourist.expiresAt), tourist.sidHash,
                    ])
            }
        } catch {
            throw StorageError(path: path, operation: "write a tourist", underlying: error)
        }
    }
}
