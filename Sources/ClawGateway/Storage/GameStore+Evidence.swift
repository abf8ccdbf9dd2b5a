import Foundation
import GRDB
import Protocol

/// A game's clips (SPEC §14), one row per game and camera: the clip's file
/// and duration, or why there is none; whether an operator holds it for a
/// dispute. Written by ``EvidenceKeeper`` after the game ended, never by a
/// machine's transition: a game never waits for its video.
struct EvidenceRow: Sendable, Equatable {
    var game: String
    var machine: String
    var camera: String
    /// The clip's file; nil when there is none (``missing`` says why) or it was deleted.
    var path: String?
    var durationSeconds: Double?
    var bytes: Int64 = 0
    var missing: String?
    var endedAt: Date
    var held = false
    var holdReason: String?
}

/// A game's clips as the audit trail shows a hold before and after it.
struct HoldView: Encodable {
    var held: Bool
    var reason: String?
}

extension GameStore {
    static func registerEvidence(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v12-evidence") { db in
            try db.execute(
                sql: """
                    CREATE TABLE evidence (
                        game TEXT NOT NULL,
                        machine TEXT NOT NULL,
                        camera TEXT NOT NULL,
                        path TEXT,
                        duration_s REAL,
                        bytes INTEGER NOT NULL DEFAULT 0,
                        missing TEXT,
                        ended_at TEXT NOT NULL,
                        held INTEGER NOT NULL DEFAULT 0,
                        hold_reason TEXT,
                        PRIMARY KEY (game, camera)
                    );
                    CREATE INDEX evidence_by_end ON evidence (ended_at);
                    """)
        }
    }

    /// The start and end of an ended game of `machine`, if it started.
    func playedTimes(game: String, machine: String) async throws(StorageError) -> (started: Date, ended: Date)? {
        do {
            return try await pool.read { db in
                guard
                    let row = try Row.fetchOne(
                        db, sql: "SELECT started_at, ended_at FROM games WHERE id = ? AND machine = ?", arguments: [game, machine]),
                    let started = (row["started_at"] as String?).flatMap(Timestamp.date),
                    let ended = (row["ended_at"] as String?).flatMap(Timestamp.date)
                else { return nil }
                return (started, ended)
            }
        } catch {
            throw StorageError(path: path, operation: "read a game's times", underlying: error)
        }
    }

    /// Writes a game's clips, and in a chain numbers the game for shipping
    /// in the same transaction (its record waited for them, ``clipsFirst``).
    func keep(_ rows: [EvidenceRow]) async throws(StorageError) {
        let numbers = shipsRecords
        do {
            try await pool.write { db in
                if numbers {
                    for game in Set(rows.map(\.game)) { try Self.number(game: game, db) }
                }
                for row in rows {
                    try db.execute(
                        sql: """
                            INSERT INTO evidence (game, machine, camera, path, duration_s, bytes, missing, ended_at, held, hold_reason)
                            SELECT ?, ?, ?, ?, ?, ?, ?, ?, corrected IS NOT NULL,
                                CASE WHEN corrected IS NOT NULL THEN 'result corrected' END
                            FROM (SELECT (SELECT corrected FROM games WHERE id = ?) AS corrected) WHERE true
                            ON CONFLICT (game, camera) DO UPDATE SET path = excluded.path, duration_s = excluded.duration_s,
                                bytes = excluded.bytes, missing = excluded.missing
                            """,
                        // A game corrected before its clips were cut has them held from the start (SPEC §16).
                        arguments: [
                            row.game, row.machine, row.camera, row.path, row.durationSeconds, row.bytes, row.missing,
                            Timestamp.string(row.endedAt), row.game,
                        ])
                }
            }
        } catch {
            throw StorageError(path: path, operation: "write a game's clips", underlying: error)
        }
    }

    /// Of a game of a machine whose clips are kept: it waits for them (it
    /// started, and none is written). ``numberUnshippedGames`` leaves such a
    /// game to the keeper, ``awaitingClips(machines:endedSince:)`` finds it.
    static let awaitsClips = "started_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM evidence WHERE evidence.game = games.id)"

    /// The started games of `machines` that ended with no clips written:
    /// those that ended since `endedSince` (their segments may still be in
    /// the ring) and, in a chain, every one not yet numbered for shipping.
    /// A gateway that stopped between a game's end and its clips leaves them.
    func awaitingClips(machines: Set<String>, endedSince: Date) async throws(StorageError) -> [(game: String, machine: String, recent: Bool)] {
        let ships = shipsRecords
        do {
            return try await pool.read { db in
                var found: [(game: String, machine: String, recent: Bool)] = []
                let since = Timestamp.string(endedSince)
                let unclipped = "ended_at IS NOT NULL AND \(Self.awaitsClips)"
                for machine in machines.sorted() {
                    // A game ends within an hour of its offer (the timers), found on (machine, offered_at).
                    let earliest = Timestamp.string(endedSince.addingTimeInterval(-3600))
                    for row in try Row.fetchAll(
                        db,
                        sql: "SELECT id, ended_at FROM games WHERE machine = ? AND offered_at >= ? AND \(unclipped) ORDER BY ended_at",
                        arguments: [machine, earliest])
                    where (row["ended_at"] as String) >= since {
                        found.append((row["id"], machine, true))
                    }
                }
                guard ships, !machines.isEmpty else { return found }
                let recent = Set(found.map(\.game))
                let marks = databaseQuestionMarks(count: machines.count)
                for row in try Row.fetchAll(
                    db,
                    sql: "SELECT id, machine FROM games WHERE ship_seq IS NULL AND machine IN (\(marks)) AND \(unclipped) ORDER BY ended_at, rowid",
                    arguments: StatementArguments(machines.sorted()))
                where !recent.contains(row["id"]) {
                    found.append((row["id"], row["machine"], false))
                }
                return found
            }
        } catch {
            throw StorageError(path: path, operation: "read the games awaiting clips", underlying: error)
        }
    }

    /// Numbers for shipping a game whose clips will never be cut (its
    /// segments are gone): its record goes to the chain without them.
    func numberWithoutClips(game: String) async throws(StorageError) {
        do {
            try await pool.write { db in try Self.number(game: game, db) }
        } catch {
            throw StorageError(path: path, operation: "number a game for shipping", underlying: error)
        }
    }

    /// One camera's clip of a game of `machine`.
    func evidence(machine: String, game: String, camera: String) async throws(StorageError) -> EvidenceRow? {
        try await evidenceRows(sql: "WHERE machine = ? AND game = ? AND camera = ?", [machine, game, camera]).first
    }

    /// Holds (or lets go) every clip of a game of `machine`; how many rows
    /// it touched. An operator's hold is written with its audit entry (SPEC §16).
    func hold(
        machine: String, game: String, held: Bool, reason: String?, audit: AuditDraft? = nil, at: Date = Date()
    ) async throws(StorageError) -> Int {
        do {
            return try await pool.write { db in
                let before = try Row.fetchOne(
                    db, sql: "SELECT MAX(held) AS held, MAX(hold_reason) AS reason FROM evidence WHERE machine = ? AND game = ?",
                    arguments: [machine, game])
                try db.execute(
                    sql: "UPDATE evidence SET held = ?, hold_reason = ? WHERE machine = ? AND game = ?",
                    arguments: [held, held ? reason : nil, machine, game])
                let touched = db.changesCount
                if touched > 0, let audit {
                    let was = HoldView(held: (before?["held"] as Int64?) == 1, reason: before?["reason"])
                    let entry = audit.entry(before: AuditValue(was), after: AuditValue(HoldView(held: held, reason: held ? reason : nil)), at: at)
                    try Self.appendAudit(entry, db, ships: shipsRecords)
                }
                return touched
            }
        } catch {
            throw StorageError(path: path, operation: "hold a game's clips", underlying: error)
        }
    }

    /// The clips on disk, oldest game first: what retention walks.
    func clipsOnDisk() async throws(StorageError) -> [EvidenceRow] {
        try await evidenceRows(sql: "WHERE path IS NOT NULL ORDER BY ended_at", [])
    }

    /// A clip deleted by retention: its row stays, saying why.
    func clipDeleted(game: String, camera: String, reason: String) async throws(StorageError) {
        do {
            try await pool.write { db in
                try db.execute(
                    sql: "UPDATE evidence SET path = NULL, bytes = 0, missing = ? WHERE game = ? AND camera = ?",
                    arguments: [reason, game, camera])
            }
        } catch {
            throw StorageError(path: path, operation: "note a deleted clip", underlying: error)
        }
    }

    private func evidenceRows(sql: String, _ arguments: StatementArguments) async throws(StorageError) -> [EvidenceRow] {
        do {
            return try await pool.read { db in
                try Row.fetchAll(
                    db, sql: "SELECT game, machine, camera, path, duration_s, bytes, missing, ended_at, held, hold_reason FROM evidence \(sql)",
                    arguments: arguments
                ).map(Self.evidenceRow)
            }
        } catch {
            throw StorageError(path: path, operation: "read clips", underlying: error)
        }
    }

    private static func evidenceRow(_ row: Row) -> EvidenceRow {
        EvidenceRow(
            game: row["game"], machine: row["machine"], camera: row["camera"], path: row["path"], durationSeconds: row["duration_s"],
            bytes: row["bytes"], missing: row["missing"], endedAt: Timestamp.date(row["ended_at"]) ?? Date(timeIntervalSince1970: 0),
            held: row["held"], holdReason: row["hold_reason"])
    }

    /// Adds each game's clips, and the cameras without one, to its record (SPEC §14).
    static func withEvidence(_ records: [GameRecord], _ db: Database) throws -> [GameRecord] {
        guard !records.isEmpty else { return records }
        let marks = databaseQuestionMarks(count: records.count)
        let rows = try Row.fetchAll(
            db, sql: "SELECT game, machine, camera, path, duration_s, bytes, missing, ended_at, held, hold_reason FROM evidence WHERE game IN (\(marks)) ORDER BY camera",
            arguments: StatementArguments(records.map(\.id))
        ).map(evidenceRow)
        guard !rows.isEmpty else { return records }
        let byGame = Dictionary(grouping: rows, by: \.game)
        return records.map { record in
            guard let clips = byGame[record.id] else { return record }
            var record = record
            record.evidence = clips.compactMap { row in
                row.path.map { EvidenceClip(camera: row.camera, path: $0, durationSeconds: row.durationSeconds ?? 0) }
            }
            record.evidenceMissing = clips.compactMap { row in
                row.path == nil ? EvidenceGap(camera: row.camera, reason: row.missing ?? "no clip") : nil
            }
            return record
        }
    }
}
