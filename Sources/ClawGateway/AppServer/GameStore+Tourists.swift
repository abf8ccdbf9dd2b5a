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
}

extension GameStore {
    /// The tourist with this account, valid or not; nil when there is none.
    func tourist(accid: String) async throws(StorageError) -> TouristAccount? {
        do {
            return try await pool.read { db in
                try Row.fetchOne(
                    db, sql: "SELECT accid, nickname, token, expires_at FROM tourists WHERE accid = ?", arguments: [accid]
                ).map { row in
                    TouristAccount(
                        accid: row["accid"], nickname: row["nickname"], token: row["token"],
                        expiresAt: Timestamp.date(row["expires_at"]) ?? Date(timeIntervalSince1970: 0))
                }
            }
        } catch {
            throw StorageError(path: path, operation: "read a tourist", underlying: error)
        }
    }

    /// Keeps a new tourist, or moves a kept one's expiry.
    func save(_ tourist: TouristAccount, createdAt: Date) async throws(StorageError) {
        do {
            try await pool.write { db in
                try db.execute(
                    sql: """
                        INSERT INTO tourists (accid, nickname, token, created_at, expires_at) VALUES (?, ?, ?, ?, ?)
                        ON CONFLICT (accid) DO UPDATE SET expires_at = excluded.expires_at
                        """,
                    arguments: [
                        tourist.accid, tourist.nickname, tourist.token, Timestamp.string(createdAt),
                        Timestamp.string(tourist.expiresAt),
                    ])
            }
        } catch {
            throw StorageError(path: path, operation: "write a tourist", underlying: error)
        }
    }
}
