import Foundation
import GRDB
import Protocol

/// The prizes' tables (SPEC §15): each machine's counted stock and the log
/// of every change to it; the prizes won; the parcels they are shipped in.
///
/// A win's prize and its stock line are written with its game's end, in the
/// machine's transaction (``StoreChange/prize(_:)``, ``StoreChange/stock(_:)``);
/// an operator's restock is a machine's transition too, so a restock and a
/// win are ordered by the machine's lock. A player's choices and the
/// shipping are the ``PrizeDesk``'s, through the writer. SQLite itself
/// refuses what must never happen: a stock below 0, a line of the log
/// changed or deleted, a second prize for a game, a prize moving backwards,
/// into a second parcel, or both shipped and exchanged.
extension GameStore {
    static func registerPrizes(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v17-prizes") { db in
            try db.execute(
                sql: """
                    CREATE TABLE machine_stock (
                        machine TEXT PRIMARY KEY,
                        stock INTEGER NOT NULL CHECK (stock >= 0),
                        changes INTEGER NOT NULL
                    );
                    CREATE TABLE stock_log (
                        machine TEXT NOT NULL,
                        n INTEGER NOT NULL,
                        kind TEXT NOT NULL CHECK (kind IN ('set', 'add', 'won', 'oversold')),
                        change INTEGER NOT NULL,
                        stock INTEGER NOT NULL CHECK (stock >= 0),
                        reason TEXT,
                        game TEXT,
                        at TEXT NOT NULL,
                        PRIMARY KEY (machine, n),
                        CHECK ((kind IN ('won', 'oversold')) = (game IS NOT NULL))
                    );
                    CREATE UNIQUE INDEX stock_log_once_per_game ON stock_log (game) WHERE game IS NOT NULL;
                    CREATE TRIGGER stock_log_never_changed BEFORE UPDATE ON stock_log
                        BEGIN SELECT RAISE(ABORT, 'stock log lines are never changed'); END;
                    CREATE TRIGGER stock_log_never_deleted BEFORE DELETE ON stock_log
                        BEGIN SELECT RAISE(ABORT, 'stock log lines are never deleted'); END;
                    CREATE TABLE parcels (
                        id TEXT PRIMARY KEY,
                        provider TEXT NOT NULL,
                        account TEXT NOT NULL,
                        state TEXT NOT NULL CHECK (state IN ('to_ship', 'shipped', 'delivered')),
                        name TEXT,
                        phone TEXT,
                        address TEXT,
                        carrier TEXT,
                        tracking TEXT,
                        created_at TEXT NOT NULL,
                        shipped_at TEXT,
                        delivered_at TEXT,
                        forgotten_at TEXT
                    );
                    CREATE INDEX parcels_by_state ON parcels (state, created_at);
                    CREATE TRIGGER parcels_forward BEFORE UPDATE OF state ON parcels
                        WHEN NOT (OLD.state = NEW.state OR (OLD.state = 'to_ship' AND NEW.state = 'shipped')
                            OR (OLD.state = 'shipped' AND NEW.state = 'delivered'))
                        BEGIN SELECT RAISE(ABORT, 'a parcel moves only forward'); END;
                    CREATE TABLE prizes (
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
                            CHECK (state IN ('held', 'to_ship', 'shipped', 'delivered', 'exchanged')),
                        parcel TEXT REFERENCES parcels (id),
                        changed_at TEXT,
                        CHECK ((state IN ('held', 'exchanged')) = (parcel IS NULL))
                    );
                    CREATE INDEX prizes_by_player ON prizes (provider, account, won_at);
                    CREATE INDEX prizes_by_parcel ON prizes (parcel) WHERE parcel IS NOT NULL;
                    CREATE TRIGGER prizes_forward BEFORE UPDATE ON prizes
                        WHEN NOT (
                            NEW.id = OLD.id AND NEW.game = OLD.game AND NEW.provider = OLD.provider AND NEW.account = OLD.account
                            AND (
                                (OLD.state = NEW.state AND OLD.parcel IS NEW.parcel)
                                OR (OLD.state = 'held' AND NEW.state = 'to_ship' AND OLD.parcel IS NULL)
                                OR (OLD.state = 'held' AND NEW.state = 'exchanged')
                                OR (OLD.state = 'to_ship' AND NEW.state = 'shipped' AND OLD.parcel = NEW.parcel)
                                OR (OLD.state = 'shipped' AND NEW.state = 'delivered' AND OLD.parcel = NEW.parcel)))
                        BEGIN SELECT RAISE(ABORT, 'a prize moves only forward, into one parcel at most'); END;
                    CREATE TRIGGER prizes_never_deleted BEFORE DELETE ON prizes
                        BEGIN SELECT RAISE(ABORT, 'prizes are never deleted'); END;
                    """)
        }
    }

    // MARK: Writing (the writer's transaction)

    /// A line of a machine's stock log, and its stock after it: once (a
    /// line written again after a failed commit is the same line); the
    /// machine's stock moves only forward in its log.
    static func write(_ entry: StockEntry, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO stock_log (machine, n, kind, change, stock, reason, game, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (machine, n) DO NOTHING
                """,
            arguments: [
                entry.machine, entry.number, entry.kind.rawValue, entry.change, entry.stock, entry.reason, entry.game,
                Timestamp.string(entry.at),
            ])
        try keepStock(machine: entry.machine, StockLevel(stock: entry.stock, changes: entry.number), db)
    }

    /// A machine's counted stock as its image or its log says, unless the
    /// file already holds a later one.
    static func keepStock(machine: String, _ level: StockLevel, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO machine_stock (machine, stock, changes) VALUES (?, ?, ?)
                ON CONFLICT (machine) DO UPDATE SET stock = excluded.stock, changes = excluded.changes
                WHERE excluded.changes >= machine_stock.changes
                """,
            arguments: [machine, level.stock, level.changes])
    }

    /// A prize a win made: once per game.
    static func write(_ prize: PrizeRow, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO prizes (id, game, machine, provider, account, prize, name, cost, exchange, won_at, oversold)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (id) DO NOTHING
                """,
            arguments: [
                prize.id, prize.game, prize.machine, prize.player.provider, prize.player.accid, prize.prize, prize.name, prize.cost,
                prize.exchange, Timestamp.string(prize.wonAt), prize.oversold,
            ])
    }

    /// A parcel as it now is (its address only when it is made: a parcel
    /// written again never brings a forgotten address back).
    static func write(_ parcel: ParcelRow, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO parcels (id, provider, account, state, name, phone, address, carrier, tracking, created_at, shipped_at,
                    delivered_at)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET state = excluded.state, carrier = excluded.carrier, tracking = excluded.tracking,
                    shipped_at = excluded.shipped_at, delivered_at = excluded.delivered_at
                """,
            arguments: [
                parcel.id, parcel.player.provider, parcel.player.accid, parcel.state.rawValue, parcel.address?.name,
                parcel.address?.phone, parcel.address?.address, parcel.carrier, parcel.tracking, Timestamp.string(parcel.createdAt),
                parcel.shippedAt.map(Timestamp.string), parcel.deliveredAt.map(Timestamp.string),
            ])
    }

    /// Prizes moved to `state` (in `parcel`, for the shipping states).
    static func move(prizes ids: [String], to state: PrizeState, parcel: String?, at: Date, _ db: Database) throws {
        for id in ids {
            try db.execute(
                sql: "UPDATE prizes SET state = ?, parcel = ?, changed_at = ? WHERE id = ?",
                arguments: [state.rawValue, parcel, Timestamp.string(at), id])
            guard db.changesCount == 1 else { throw PrizeNotKept(id: id) }
        }
    }

    private struct PrizeNotKept: Error, CustomStringConvertible {
        var id: String
        var description: String { "prize \(id) is not in the file: its change cannot be written" }
    }

    // MARK: Reading

    /// A machine's counted stock, if an operator ever set it.
    static func stock(of machine: String, _ db: Database) throws -> StockLevel? {
        try Row.fetchOne(db, sql: "SELECT stock, changes FROM machine_stock WHERE machine = ?", arguments: [machine]).map {
            StockLevel(stock: $0["stock"], changes: $0["changes"])
        }
    }

    static let prizeColumns = """
        p.id, p.game, p.machine, p.provider, p.account, p.prize, p.name, p.cost, p.exchange, p.won_at, p.oversold, p.state, p.parcel
        """

    static func prize(_ row: Row) -> PrizeRow {
        PrizeRow(
            id: row["id"], game: row["game"], machine: row["machine"],
            player: PlayerAddress(accid: row["account"], provider: row["provider"]), prize: row["prize"], name: row["name"],
            cost: row["cost"], exchange: row["exchange"], wonAt: Timestamp.date(row["won_at"]) ?? Date(timeIntervalSince1970: 0),
            oversold: row["oversold"], state: PrizeState(rawValue: row["state"]) ?? .held, parcel: row["parcel"])
    }

    static func parcel(_ row: Row, prizes: [String]) -> ParcelRow {
        let kept = ShippingAddress.kept(name: row["name"], phone: row["phone"], address: row["address"])
        return ParcelRow(
            id: row["id"], player: PlayerAddress(accid: row["account"], provider: row["provider"]),
            state: ParcelState(rawValue: row["state"]) ?? .toShip, address: kept, carrier: row["carrier"], tracking: row["tracking"],
            createdAt: Timestamp.date(row["created_at"]) ?? Date(timeIntervalSince1970: 0),
            shippedAt: (row["shipped_at"] as String?).flatMap(Timestamp.date),
            deliveredAt: (row["delivered_at"] as String?).flatMap(Timestamp.date), prizes: prizes)
    }

    /// A player's prizes, newest first, with the parcels they are in (no address).
    func prizes(of player: PlayerAddress, limit: Int, offset: Int) async throws(StorageError) -> [(prize: PrizeRow, parcel: ParcelRow?)] {
        do {
            return try await pool.read { db in
                let prizes = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT \(Self.prizeColumns) FROM prizes p WHERE p.provider = ? AND p.account = ?
                        ORDER BY p.won_at DESC, p.rowid DESC LIMIT ? OFFSET ?
                        """,
                    arguments: [player.provider, player.accid, limit, offset]
                ).map(Self.prize)
                let parcels = try Self.parcels(ids: Set(prizes.compactMap(\.parcel)), db)
                return prizes.map { (prize: $0, parcel: $0.parcel.flatMap { parcels[$0] }) }
            }
        } catch {
            throw StorageError(path: path, operation: "read a player's prizes", underlying: error)
        }
    }

    /// The prizes with these ids, by id (those that exist).
    func prizes(ids: [String]) async throws(StorageError) -> [String: PrizeRow] {
        do {
            return try await pool.read { db in
                let rows = try Row.fetchAll(
                    db, sql: "SELECT \(Self.prizeColumns) FROM prizes p WHERE p.id IN (\(databaseQuestionMarks(count: ids.count)))",
                    arguments: StatementArguments(ids)
                ).map(Self.prize)
                return Dictionary(rows.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
            }
        } catch {
            throw StorageError(path: path, operation: "read prizes", underlying: error)
        }
    }

    /// Parcels in `state` (every state when nil), oldest first, with their
    /// prizes and address.
    func parcels(state: ParcelState?, limit: Int, offset: Int) async throws(StorageError) -> [ParcelRow] {
        do {
            return try await pool.read { db in
                let rows = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT * FROM parcels WHERE (?1 IS NULL OR state = ?1) ORDER BY created_at, rowid LIMIT ?2 OFFSET ?3
                        """,
                    arguments: [state?.rawValue, limit, offset])
                let contents = try Self.contents(of: rows.map { $0["id"] as String }, db)
                return rows.map { Self.parcel($0, prizes: contents[$0["id"] as String] ?? []) }
            }
        } catch {
            throw StorageError(path: path, operation: "read the parcels", underlying: error)
        }
    }

    /// One parcel with its prizes, if there is one of that id.
    func parcel(_ id: String) async throws(StorageError) -> ParcelRow? {
        do {
            return try await pool.read { db in try Self.parcels(ids: [id], db)[id] }
        } catch {
            throw StorageError(path: path, operation: "read a parcel", underlying: error)
        }
    }

    private static func parcels(ids: Set<String>, _ db: Database) throws -> [String: ParcelRow] {
        guard !ids.isEmpty else { return [:] }
        let list = Array(ids)
        let rows = try Row.fetchAll(
            db, sql: "SELECT * FROM parcels WHERE id IN (\(databaseQuestionMarks(count: list.count)))", arguments: StatementArguments(list))
        let contents = try contents(of: list, db)
        return Dictionary(uniqueKeysWithValues: rows.map { ($0["id"] as String, parcel($0, prizes: contents[$0["id"] as String] ?? [])) })
    }

    /// The prizes of each parcel, in the order they were won.
    private static func contents(of parcels: [String], _ db: Database) throws -> [String: [String]] {
        guard !parcels.isEmpty else { return [:] }
        var contents: [String: [String]] = [:]
        for row in try Row.fetchAll(
            db,
            sql: "SELECT parcel, id FROM prizes WHERE parcel IN (\(databaseQuestionMarks(count: parcels.count))) ORDER BY won_at, rowid",
            arguments: StatementArguments(parcels))
        {
            contents[row["parcel"] as String, default: []].append(row["id"])
        }
        return contents
    }

    /// The prize each of these games made, by game.
    static func prizes(ofGames games: [String], _ db: Database) throws -> [String: PrizeRow] {
        guard !games.isEmpty else { return [:] }
        let rows = try Row.fetchAll(
            db, sql: "SELECT \(prizeColumns) FROM prizes p WHERE p.game IN (\(databaseQuestionMarks(count: games.count)))",
            arguments: StatementArguments(games)
        ).map(prize)
        return Dictionary(rows.map { ($0.game, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// The records with the prize each game made, as a chain's records carry it.
    static func withPrizes(_ records: [GameRecord], _ db: Database) throws -> [GameRecord] {
        let prizes = try prizes(ofGames: records.filter { $0.outcome == .won }.map(\.id), db)
        guard !prizes.isEmpty else { return records }
        return records.map { record in
            var record = record
            record.prize = prizes[record.id]?.won
            return record
        }
    }

    /// Forgets the addresses of the parcels delivered at or before
    /// `deliveredBy` (SPEC §15: `prizes.forget_address` after delivery);
    /// returns how many. Other rooms' own table, written on GRDB's writer
    /// connection directly, as the tourists' are: no machine waits on it.
    func forgetAddresses(deliveredBy: Date, at now: Date) async throws(StorageError) -> Int {
        do {
            return try await pool.write { db in
                try db.execute(
                    sql: """
                        UPDATE parcels SET name = NULL, phone = NULL, address = NULL, forgotten_at = ?
                        WHERE state = 'delivered' AND delivered_at <= ? AND forgotten_at IS NULL
                        """,
                    arguments: [Timestamp.string(now), Timestamp.string(deliveredBy)])
                return db.changesCount
            }
        } catch {
            throw StorageError(path: path, operation: "forget delivered parcels' addresses", underlying: error)
        }
    }
}
