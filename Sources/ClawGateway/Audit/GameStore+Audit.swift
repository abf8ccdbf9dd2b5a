import Foundation
import GRDB
import Protocol

/// What `GET /v1/audit` asks of the trail (SPEC §16): every filter optional,
/// newest first.
struct AuditQuery: Sendable, Equatable {
    var operatorName: String?
    var target: String?
    var action: AuditAction?
    /// Inclusive.
    var since: Date?
    var limit = 50
    var offset = 0
    /// At the chain's recorder: one site's entries.
    var site: String? = nil
}

extension GameStore {
    /// The trail, and the corrections of game results it records (SPEC §16).
    static func registerAudit(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v18-audit") { db in
            try db.execute(
                sql: """
                    CREATE TABLE audit (
                        seq INTEGER PRIMARY KEY AUTOINCREMENT,
                        at TEXT NOT NULL,
                        operator TEXT NOT NULL,
                        action TEXT NOT NULL,
                        target TEXT NOT NULL,
                        before TEXT NOT NULL,
                        after TEXT NOT NULL,
                        reason TEXT,
                        address TEXT,
                        ship_seq INTEGER
                    );
                    CREATE INDEX audit_by_operator ON audit (operator, seq);
                    CREATE INDEX audit_by_target ON audit (target, seq);
                    CREATE UNIQUE INDEX audit_by_ship_seq ON audit (ship_seq) WHERE ship_seq IS NOT NULL;
                    CREATE TRIGGER audit_never_changed BEFORE UPDATE ON audit
                        WHEN NOT (
                            OLD.ship_seq IS NULL AND NEW.seq = OLD.seq AND NEW.at = OLD.at AND NEW.operator = OLD.operator
                            AND NEW.action = OLD.action AND NEW.target = OLD.target AND NEW.before = OLD.before
                            AND NEW.after = OLD.after AND NEW.reason IS OLD.reason AND NEW.address IS OLD.address)
                        BEGIN SELECT RAISE(ABORT, 'audit entries are never changed (only numbered once, to ship)'); END;
                    CREATE TRIGGER audit_never_deleted BEFORE DELETE ON audit
                        BEGIN SELECT RAISE(ABORT, 'audit entries are never deleted'); END;
                    ALTER TABLE games ADD COLUMN corrected TEXT;
                    ALTER TABLE games ADD COLUMN strong INTEGER NOT NULL DEFAULT 0;
                    """)
        }
    }

    /// Prize states and stock lines of corrections (SPEC §16): a prize may
    /// be `voided` (its win taken back while it was held) and held again; a
    /// correction's stock line names its game. SQLite keeps CHECKs in the
    /// table, so both tables are made anew, rows and rules as they were.
    static func registerCorrections(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v19-corrections") { db in
            try db.execute(
                sql: """
                    DROP TRIGGER prizes_forward;
                    DROP TRIGGER prizes_never_deleted;
                    CREATE TABLE prizes_v19 (
                        id TEXT PRIMARY KEY,
                        game TEXT NOT NULL UNIQUE,
                        machine TEXT NOT NULL,
                        provider TEXT NOT NULL,
                        account TEXT NOT NULL,
                        prize TEXT NOT NULL,
                        name TEXT NOT NULL,
                        cost INTEGER NOT NULL CHECK (cost >= 0),
                        exchange INTEGER NOT NULL CHECK (exchange >= 0),
                        won_at TEXT NOT NULL,
                        oversold INTEGER NOT NULL DEFAULT 0,
                        state TEXT NOT NULL DEFAULT 'held'
                            CHECK (state IN ('held', 'to_ship', 'shipped', 'delivered', 'exchanged', 'voided')),
                        parcel TEXT REFERENCES parcels (id),
                        changed_at TEXT,
                        CHECK ((state IN ('held', 'exchanged', 'voided')) = (parcel IS NULL))
                    );
                    INSERT INTO prizes_v19 (id, game, machine, provider, account, prize, name, cost, exchange, won_at, oversold, state,
                        parcel, changed_at)
                        SELECT id, game, machine, provider, account, prize, name, cost, exchange, won_at, oversold, state, parcel, changed_at
                        FROM prizes;
                    DROP TABLE prizes;
                    ALTER TABLE prizes_v19 RENAME TO prizes;
                    CREATE INDEX prizes_by_player ON prizes (provider, account, won_at);
                    CREATE INDEX prizes_by_parcel ON prizes (parcel) WHERE parcel IS NOT NULL;
                    CREATE TRIGGER prizes_forward BEFORE UPDATE ON prizes
                        WHEN NOT (
                            NEW.id = OLD.id AND NEW.game = OLD.game AND NEW.provider = OLD.provider AND NEW.account = OLD.account
                            AND (
                                (OLD.state = NEW.state AND OLD.parcel IS NEW.parcel)
                                OR (OLD.state = 'held' AND NEW.state = 'to_ship' AND OLD.parcel IS NULL)
                                OR (OLD.state = 'held' AND NEW.state = 'exchanged')
                                OR (OLD.state = 'held' AND NEW.state = 'voided')
                                OR (OLD.state = 'voided' AND NEW.state = 'held')
                                OR (OLD.state = 'to_ship' AND NEW.state = 'shipped' AND OLD.parcel = NEW.parcel)
                                OR (OLD.state = 'shipped' AND NEW.state = 'delivered' AND OLD.parcel = NEW.parcel)))
                        BEGIN SELECT RAISE(ABORT, 'a prize moves only forward, into one parcel at most'); END;
                    CREATE TRIGGER prizes_never_deleted BEFORE DELETE ON prizes
                        BEGIN SELECT RAISE(ABORT, 'prizes are never deleted'); END;

                    DROP TRIGGER stock_log_never_changed;
                    DROP TRIGGER stock_log_never_deleted;
                    CREATE TABLE stock_log_v19 (
                        machine TEXT NOT NULL,
                        n INTEGER NOT NULL,
                        kind TEXT NOT NULL CHECK (kind IN ('set', 'add', 'won', 'oversold', 'corrected')),
                        change INTEGER NOT NULL,
                        stock INTEGER NOT NULL CHECK (stock >= 0),
                        reason TEXT,
                        game TEXT,
                        at TEXT NOT NULL,
                        PRIMARY KEY (machine, n),
                        CHECK ((kind IN ('won', 'oversold', 'corrected')) = (game IS NOT NULL))
                    );
                    INSERT INTO stock_log_v19 SELECT machine, n, kind, change, stock, reason, game, at FROM stock_log;
                    DROP TABLE stock_log;
                    ALTER TABLE stock_log_v19 RENAME TO stock_log;
                    CREATE UNIQUE INDEX stock_log_once_per_game ON stock_log (game) WHERE kind IN ('won', 'oversold');
                    CREATE TRIGGER stock_log_never_changed BEFORE UPDATE ON stock_log
                        BEGIN SELECT RAISE(ABORT, 'stock log lines are never changed'); END;
                    CREATE TRIGGER stock_log_never_deleted BEFORE DELETE ON stock_log
                        BEGIN SELECT RAISE(ABORT, 'stock log lines are never deleted'); END;
                    """)
        }
    }

    /// The outcome the figures count, in SQL over `games`: the operator's when corrected (SPEC §16).
    static let countedOutcome = "COALESCE(json_extract(corrected, '$.outcome'), outcome)"

    /// Writes a game's correction over any before it (the audit trail keeps each).
    static func correct(game: String, _ correction: GameCorrection, _ db: Database) throws {
        try db.execute(
            sql: "UPDATE games SET corrected = ? WHERE id = ? AND ended_at IS NOT NULL",
            arguments: [String(decoding: JSONCoding.encode(correction), as: UTF8.self), game])
        guard db.changesCount == 1 else { throw GameNotEnded(id: game) }
    }

    private struct GameNotEnded: Error, CustomStringConvertible {
        var id: String
        var description: String { "game \(id) is not an ended game in the file: its correction cannot be written" }
    }

    /// One game of `machine` as a correction reads it: its record (with
    /// any correction) and its prize, if it made one.
    func correctable(game: String, machine: String) async throws(StorageError) -> (record: GameRecord, prize: PrizeRow?)? {
        do {
            return try await pool.read { db in
                guard
                    let row = try Row.fetchOne(
                        db,
                        sql: """
                            SELECT id, machine, player, provider, nick, outcome, offered_at, started_at, ended_at, commands, corrected
                            FROM games WHERE id = ? AND machine = ?
                            """,
                        arguments: [game, machine])
                else { return nil }
                let prize = try Row.fetchOne(db, sql: "SELECT * FROM prizes WHERE game = ?", arguments: [game]).map(Self.prize)
                return (Self.record(row), prize)
            }
        } catch {
            throw StorageError(path: path, operation: "read a game to correct", underlying: error)
        }
    }

    /// Appends `entry` inside the caller's transaction: the change it records
    /// is in the same one. In a chain (`ships`) it takes the next shipping
    /// number, and travels to the recorder like a game's record (SPEC §16).
    static func appendAudit(_ entry: AuditEntry, _ db: Database, ships: Bool) throws {
        try db.execute(
            sql: """
                INSERT INTO audit (at, operator, action, target, before, after, reason, address, ship_seq)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
                """,
            arguments: [
                Timestamp.string(entry.at), entry.operatorName, entry.action.rawValue, entry.target, entry.before.json,
                entry.after.json, entry.reason, entry.address, ships ? try lastShipNumber(db) + 1 : nil,
            ])
    }

    /// The last shipping number given, to a game or an audit entry: the one
    /// place a chain record's number is read from; the next is one more.
    static func lastShipNumber(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(
            db,
            sql: """
                SELECT MAX(n) FROM (
                    SELECT COALESCE(MAX(ship_seq), 0) AS n FROM games WHERE ship_seq IS NOT NULL
                    UNION ALL SELECT COALESCE(MAX(ship_seq), 0) FROM audit WHERE ship_seq IS NOT NULL)
                """) ?? 0
    }

    /// The audit entries numbered after `seq`, in order, at most `limit`: what a site ships with its games.
    static func shippedAudit(after seq: Int64, limit: Int, _ db: Database) throws -> [(seq: Int64, entry: AuditEntry)] {
        try Row.fetchAll(
            db,
            sql: """
                SELECT ship_seq, seq, at, operator, action, target, before, after, reason, address
                FROM audit WHERE ship_seq > ? ORDER BY ship_seq LIMIT ?
                """,
            arguments: [seq, limit]
        ).map { (seq: $0["ship_seq"], entry: auditEntry($0)) }
    }

    /// The entries `query` asks for, newest first.
    func audit(_ query: AuditQuery) async throws(StorageError) -> [AuditEntry] {
        var conditions: [String] = []
        var arguments: StatementArguments = []
        if let name = query.operatorName {
            conditions.append("operator = ?")
            arguments += [name]
        }
        if let target = query.target {
            conditions.append("target = ?")
            arguments += [target]
        }
        if let action = query.action {
            conditions.append("action = ?")
            arguments += [action.rawValue]
        }
        if let since = query.since {
            // Timestamps are written in one fixed-width UTC form: they sort as text.
            conditions.append("at >= ?")
            arguments += [Timestamp.string(since)]
        }
        let filter = conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND ")
        arguments += [query.limit, query.offset]
        let sql = "SELECT seq, at, operator, action, target, before, after, reason, address FROM audit \(filter) ORDER BY seq DESC LIMIT ? OFFSET ?"
        let bound = arguments
        do {
            return try await pool.read { db in
                try Row.fetchAll(db, sql: sql, arguments: bound).map(Self.auditEntry)
            }
        } catch {
            throw StorageError(path: path, operation: "read the audit trail", underlying: error)
        }
    }

    static func auditEntry(_ row: Row) -> AuditEntry {
        AuditEntry(
            seq: row["seq"], at: (row["at"] as String?).flatMap(Timestamp.date) ?? .distantPast, operatorName: row["operator"],
            action: AuditAction(rawValue: row["action"]) ?? .reload, target: row["target"],
            before: AuditValue(json: row["before"]), after: AuditValue(json: row["after"]), reason: row["reason"],
            address: row["address"])
    }
}
