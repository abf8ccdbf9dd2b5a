import Foundation
import GRDB
import Protocol
import Synchronization

/// The durable side of every machine, in one SQLite file: the waiting
/// queues, the game records, and each machine's snapshot sequence and pause
/// flag.
///
/// WAL with `synchronous = FULL`: a transaction is on the disk (the WAL
/// `fsync`ed) when its commit returns, so what was answered or acted on
/// after it (a top-up's 200, a debit's coin, a queue place) outlives a
/// power cut, not only the process being killed (SPEC §11). The writer
/// commits many machines' writes in one transaction: one `fsync` for all.
///
/// Writes go through one ``StorageWriter`` thread, never from a machine's
/// lock or the cooperative pool; reads for the API are async on GRDB's
/// reader queues. Every write is idempotent (whole records, upserts), so a
/// batch written twice after a failure leaves the same rows.
final class GameStore: Sendable {
    let path: String
    /// A site of a chain: every game gets a sequence number for shipping in
    /// the transaction that ends it (SPEC §10). Without a chain, none.
    let shipsRecords: Bool
    /// The machines whose clips are kept (SPEC §14): in a chain, a started
    /// game of theirs is numbered in the transaction that writes its clips
    /// (``keep(_:)``), so that its record carries them.
    let clipsFirst: Set<String>
    /// The open file; replaced by ``reopen()`` when the file was removed.
    private let opened: Mutex<Opened>

    private struct Opened {
        var pool: DatabasePool
        /// Which file the pool has open, to notice it being removed or replaced.
        var identity: FileIdentity?
        /// The file's shipping epoch (SPEC §10), and the shipping number it
        /// starts after: record `n` of the epoch is the game numbered `base + n`.
        var epoch: ShipEpoch
    }

    init(path: String, shipsRecords: Bool = false, clipsFirst: Set<String> = []) throws(StorageError) {
        self.path = path
        self.shipsRecords = shipsRecords
        self.clipsFirst = clipsFirst
        opened = Mutex(try Self.open(path, shipsRecords: shipsRecords, clipsFirst: clipsFirst))
    }

    private static func open(_ path: String, shipsRecords: Bool, clipsFirst: Set<String>) throws(StorageError) -> Opened {
        do {
            let folder = URL(fileURLWithPath: path).deletingLastPathComponent()
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            var configuration = Configuration()
            configuration.label = "claw-gateway"
            // Only the writer thread writes, and readers never block it in WAL
            // mode: a busy database means something else holds the file.
            configuration.busyMode = .timeout(0.5)
            let pool = try DatabasePool(path: path, configuration: configuration)
            // After the pool is made: GRDB sets `synchronous = NORMAL` on the
            // writer when it turns WAL on, after `prepareDatabase` has run
            // (the power-cut test found a top-up answered 200 gone). Only the
            // writer's connection writes.
            try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
            try migrator.migrate(pool)
            if shipsRecords { try pool.write { db in try numberUnshippedGames(db, clipsFirst: clipsFirst) } }
            let epoch = try pool.read { db in try ShipEpoch.read(db) }
            return Opened(pool: pool, identity: FileIdentity(path: path), epoch: epoch)
        } catch let error as StorageError {
            throw error
        } catch {
            throw StorageError(path: path, operation: "open", underlying: error)
        }
    }

    /// The open file; other features' tables (the app server's tourists) are read and written through it too.
    var pool: DatabasePool { opened.withLock { $0.pool } }

    /// The shipping epoch of the open file (SPEC §10): random, made with
    /// the file. A site whose file is replaced (reinstalled, lost) numbers
    /// its games from 1 again, in the new file's epoch; one restored from a
    /// backup starts a new epoch when the chain says it has records of the
    /// file's epoch beyond the file's (``startEpoch()``).
    var epoch: ShipEpoch { opened.withLock { $0.epoch } }

    /// Starts a new epoch after the last number given: the chain holds
    /// records of this file's epoch that the file does not (it was restored
    /// from a backup), so the games from now on are numbered 1, 2, … anew.
    @discardableResult
    func startEpoch() async throws(StorageError) -> ShipEpoch {
        do {
            let epoch = try await pool.write { db -> ShipEpoch in
                let base = try Self.lastShipNumber(db)
                let epoch = ShipEpoch(id: Signatures.nonce(bytes: 8), base: base)
                try epoch.write(db)
                return epoch
            }
            opened.withLock { $0.epoch = epoch }
            return epoch
        } catch {
            throw StorageError(path: path, operation: "start a shipping epoch", underlying: error)
        }
    }

    /// Whether the file the database has open is no longer the one at
    /// ``path`` (removed, or replaced by another): SQLite would go on writing
    /// into a file nobody can find.
    func fileWasReplaced() -> Bool {
        let current = FileIdentity(path: path)
        return opened.withLock { $0.identity != current }
    }

    /// Opens the file at ``path`` afresh, creating it if it is gone; what it
    /// must hold is then rewritten by the writer.
    func reopen() throws(StorageError) {
        let fresh = try Self.open(path, shipsRecords: shipsRecords, clipsFirst: clipsFirst)
        let old = opened.withLock { opened in
            defer { opened = fresh }
            return opened.pool
        }
        try? old.close()
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE queue_entries (
                        machine TEXT NOT NULL,
                        accid TEXT NOT NULL,
                        nick TEXT NOT NULL,
                        provider TEXT NOT NULL,
                        ord INTEGER NOT NULL,
                        joined_at TEXT NOT NULL,
                        PRIMARY KEY (machine, accid)
                    );
                    CREATE INDEX queue_entries_order ON queue_entries (machine, ord);
                    CREATE TABLE games (
                        id TEXT PRIMARY KEY,
                        machine TEXT NOT NULL,
                        player TEXT NOT NULL,
                        nick TEXT NOT NULL,
                        provider TEXT NOT NULL,
                        offered_at TEXT NOT NULL,
                        started_at TEXT,
                        ended_at TEXT,
                        outcome TEXT,
                        commands INTEGER NOT NULL DEFAULT 0
                    );
                    CREATE INDEX games_by_machine ON games (machine, offered_at);
                    CREATE INDEX games_open ON games (machine) WHERE ended_at IS NULL;
                    CREATE TABLE machine_meta (
                        machine TEXT PRIMARY KEY,
                        snapshot_seq INTEGER NOT NULL,
                        paused INTEGER NOT NULL DEFAULT 0
                    );
                    """)
        }
        // A player is the pair (provider, account) (SPEC §5): the same account
        // may wait once for each provider. Every existing row keeps the
        // provider it was written with: `provider` has been stored with each
        // queue entry and game since v1 (the provider of the notification
        // that queued the player, or of their latest one before their turn's
        // record was written), which is the provider the player most likely
        // had; nothing is guessed.
        migrator.registerMigration("v2-player-is-provider-and-account") { db in
            try db.execute(
                sql: """
                    CREATE TABLE queue_entries_v2 (
                        machine TEXT NOT NULL,
                        provider TEXT NOT NULL,
                        accid TEXT NOT NULL,
                        nick TEXT NOT NULL,
                        ord INTEGER NOT NULL,
                        joined_at TEXT NOT NULL,
                        PRIMARY KEY (machine, provider, accid)
                    );
                    INSERT INTO queue_entries_v2 (machine, provider, accid, nick, ord, joined_at)
                        SELECT machine, provider, accid, nick, ord, joined_at FROM queue_entries;
                    DROP TABLE queue_entries;
                    ALTER TABLE queue_entries_v2 RENAME TO queue_entries;
                    CREATE INDEX queue_entries_order ON queue_entries (machine, ord);
                    """)
        }
        // A site of a chain ships every game that ended, in order (SPEC §10).
        migrator.registerMigration("v3-ship-seq") { db in
            try db.execute(
                sql: """
                    ALTER TABLE games ADD COLUMN ship_seq INTEGER;
                    CREATE UNIQUE INDEX games_by_ship_seq ON games (ship_seq) WHERE ship_seq IS NOT NULL;
                    """)
        }
        // The app server's tourist accounts (SPEC §8): NetEase IM accounts the
        // gateway created, valid until `expires_at`, kept after it.
        migrator.registerMigration("v4-tourists") { db in
            try db.execute(
                sql: """
                    CREATE TABLE tourists (
                        accid TEXT PRIMARY KEY,
                        nickname TEXT NOT NULL,
                        token TEXT NOT NULL,
                        created_at TEXT NOT NULL,
                        expires_at TEXT NOT NULL
                    );
                    """)
        }
        // Who may come back as whom (SPEC §8): a tourist's secret sid, kept
        // as its hash. Tourists of before have none: with `sessions: secret`
        // they log in anew (their old sid was their public account id).
        migrator.registerMigration("v5-tourist-secrets") { db in
            try db.execute(
                sql: """
                    ALTER TABLE tourists ADD COLUMN sid_hash TEXT;
                    CREATE UNIQUE INDEX tourists_by_sid ON tourists (sid_hash) WHERE sid_hash IS NOT NULL;
                    CREATE INDEX tourists_by_expiry ON tourists (expires_at);
                    """)
        }
        // The file's shipping epoch (SPEC §10): random, made with the file.
        // A file of before that holds games keeps the epoch "" its records
        // were shipped in, so that the chain does not get them all again.
        migrator.registerMigration("v6-epoch") { db in
            try db.execute(sql: "CREATE TABLE site_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            let old = try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM games)") ?? false
            try ShipEpoch(id: old ? "" : Signatures.nonce(bytes: 8), base: 0).write(db)
        }
        // What an open game needs to be taken up again after a restart (SPEC
        // §13). Games open in an older file have none: they are closed at
        // start as before.
        migrator.registerMigration("v7-open-games") { db in
            try db.execute(
                sql: """
                    ALTER TABLE games ADD COLUMN phase TEXT;
                    ALTER TABLE games ADD COLUMN deadline_at TEXT;
                    ALTER TABLE games ADD COLUMN coin_serial INTEGER;
                    ALTER TABLE games ADD COLUMN coin_acked INTEGER NOT NULL DEFAULT 0;
                    """)
        }
        migrator.registerMigration("v8-machine-settings") { db in
            // Board settings an operator set at runtime (SPEC §12), over the file's.
            try db.execute(sql: "CREATE TABLE machine_settings (machine TEXT PRIMARY KEY, settings TEXT NOT NULL)")
        }
        migrator.registerMigration("v9-machine-maintenance") { db in
            // Why a machine is out of play (SPEC §12): its fault, an operator's reason.
            try db.execute(sql: "CREATE TABLE machine_maintenance (machine TEXT PRIMARY KEY, maintenance TEXT NOT NULL)")
        }
        registerLedger(&migrator)
        registerChainWallet(&migrator)
        registerEvidence(&migrator)
        registerResumedGames(&migrator)
        registerAdjustKeys(&migrator)
        migrator.registerMigration("v15-continues") { db in
            // A continue (SPEC §3), the how-manyth in a row: an open one is taken up as a continue after a restart.
            try db.execute(sql: "ALTER TABLE games ADD COLUMN continues INTEGER NOT NULL DEFAULT 0")
        }
        registerExchange(&migrator)
        registerPrizes(&migrator)
        registerAudit(&migrator)
        registerCorrections(&migrator)
        return migrator
    }

    /// Reads a machine back after a start: its queue in order, its snapshot
    /// sequence and pause flag, and the games that were open when the
    /// gateway stopped (cleanly or not). It changes nothing: the machine
    /// closes those games as its first transition, through the writer, and
    /// tells their players once that is durable (SPEC §3).
    func restore(machine: String) throws(StorageError) -> RestoredMachine {
        do {
            return try pool.read { db in
                let open = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT id, player, nick, provider, offered_at, started_at, commands, phase, deadline_at, coin_serial, coin_acked,
                            serials, continues
                        FROM games WHERE machine = ? AND ended_at IS NULL ORDER BY offered_at, rowid
                        """,
                    arguments: [machine]
                ).map { row in
                    GameRow(
                        id: row["id"], machine: machine, player: row["player"], nick: row["nick"], provider: row["provider"],
                        offeredAt: Timestamp.date(row["offered_at"]) ?? Date(timeIntervalSince1970: 0),
                        startedAt: (row["started_at"] as String?).flatMap(Timestamp.date), endedAt: nil, outcome: nil,
                        commands: row["commands"], open: Self.openGame(row), paid: try Self.paid(for: row["id"], db))
                }
                let queue = try Row.fetchAll(
                    db, sql: "SELECT accid, nick, provider FROM queue_entries WHERE machine = ? ORDER BY ord",
                    arguments: [machine]
                ).map { QueueEntry(accid: $0["accid"], nick: $0["nick"], provider: $0["provider"]) }
                let meta = try Row.fetchOne(
                    db, sql: "SELECT snapshot_seq, paused FROM machine_meta WHERE machine = ?", arguments: [machine])
                let lost = try Int.fetchOne(
                    db,
                    sql: """
                        SELECT COUNT(*) FROM games WHERE machine = ?1 AND outcome = 'lost'
                        AND ended_at > COALESCE((SELECT MAX(ended_at) FROM games WHERE machine = ?1 AND outcome = 'won'), '')
                        """,
                    arguments: [machine]) ?? 0
                let settings = try Self.kept(MachineSettings.self, in: "machine_settings", column: "settings", machine: machine, db)
                let maintenance = try Self.kept(Maintenance.self, in: "machine_maintenance", column: "maintenance", machine: machine, db)
                return RestoredMachine(
                    queue: queue, snapshotSeq: meta?["snapshot_seq"] ?? 0, paused: meta?["paused"] ?? false, openGames: open,
                    lostInARow: lost, settings: settings, maintenance: maintenance, lastResult: try Self.lastResult(of: machine, db),
                    stock: try Self.stock(of: machine, db))
            }
        } catch {
            throw StorageError(path: path, operation: "restore \(machine)", underlying: error)
        }
    }

    /// The open game's phase, deadline and coin, when the row has them.
    private static func openGame(_ row: Row) -> OpenGame? {
        guard let phase = (row["phase"] as String?).flatMap(OpenGame.Phase.init(rawValue:)),
            let deadline = (row["deadline_at"] as String?).flatMap(Timestamp.date)
        else { return nil }
        return OpenGame(
            phase: phase, deadline: deadline, coinSerial: row["coin_serial"], coinAcked: row["coin_acked"] ?? false,
            serials: Self.serials(row["serials"]), continues: row["continues"] ?? 0)
    }

    /// Writes `changes` and every machine image in `images`, all in one
    /// transaction: the writer's group commit.
    func write(_ changes: some Sequence<StoreChange>, images: [DurableMachine] = []) throws(StorageError) {
        do {
            try pool.write { db in
                for image in images { try Self.rewrite(image, db) }
                for change in changes { try Self.apply(change, db, shipsRecords: shipsRecords, clipsFirst: clipsFirst) }
            }
        } catch {
            throw StorageError(path: path, operation: "write", underlying: error)
        }
    }

    /// A machine's games, newest first; read on GRDB's reader queue.
    func games(machine: String, limit: Int, offset: Int) async throws(StorageError) -> [GameRecord] {
        do {
            return try await pool.read { db in try Self.games(db, machine: machine, limit: limit, offset: offset) }
        } catch {
            throw StorageError(path: path, operation: "read games of \(machine)", underlying: error)
        }
    }

    /// Games still open on machines that are not `machines`: a machine
    /// taken out of the file while one of its games was open (the gateway
    /// killed while the machine finished its last game after a reload, or
    /// stopped and started without it).
    func openGames(notOn machines: Set<String>) throws(StorageError) -> [GameRow] {
        do {
            return try pool.read { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT id, machine, player, nick, provider, offered_at, started_at, commands
                        FROM games WHERE ended_at IS NULL ORDER BY offered_at, rowid
                        """
                ).compactMap { row in
                    let machine: String = row["machine"]
                    guard !machines.contains(machine) else { return nil }
                    return GameRow(
                        id: row["id"], machine: machine, player: row["player"], nick: row["nick"], provider: row["provider"],
                        offeredAt: Timestamp.date(row["offered_at"]) ?? Date(timeIntervalSince1970: 0),
                        startedAt: (row["started_at"] as String?).flatMap(Timestamp.date), endedAt: nil, outcome: nil,
                        commands: row["commands"], paid: try Self.paid(for: row["id"], db))
                }
            }
        } catch {
            throw StorageError(path: path, operation: "read the open games", underlying: error)
        }
    }

    /// The same, blocking the caller: for tests and start-up.
    func gamesNow(machine: String, limit: Int, offset: Int) throws(StorageError) -> [GameRecord] {
        do {
            return try pool.read { db in try Self.games(db, machine: machine, limit: limit, offset: offset) }
        } catch {
            throw StorageError(path: path, operation: "read games of \(machine)", underlying: error)
        }
    }

    /// The games a machine started, and won, since `midnight`: where its
    /// statistics' counts for today start after a restart. A game won today
    /// was offered at most an hour before midnight (its timers are minutes
    /// at most), so the (machine, offered_at) index bounds the scan.
    func today(machine: String, since midnight: Date) throws(StorageError) -> (games: Int, wins: Int) {
        do {
            return try pool.read { db in
                let start = Timestamp.string(midnight)
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT COALESCE(SUM(started_at >= ?1), 0) AS games,
                               COALESCE(SUM(\(Self.countedOutcome) = 'won' AND ended_at >= ?1), 0) AS wins
                        FROM games WHERE machine = ?2 AND offered_at >= ?3
                        """,
                    arguments: [start, machine, Timestamp.string(midnight.addingTimeInterval(-3600))])
                return (row?["games"] ?? 0, row?["wins"] ?? 0)
            }
        } catch {
            throw StorageError(path: path, operation: "count today's games of \(machine)", underlying: error)
        }
    }

    /// The accounts in a machine's stored queue, in order: for tests and diagnostics.
    func queuedNow(machine: String) throws(StorageError) -> [String] {
        do {
            return try pool.read { db in
                try String.fetchAll(db, sql: "SELECT accid FROM queue_entries WHERE machine = ? ORDER BY ord", arguments: [machine])
            }
        } catch {
            throw StorageError(path: path, operation: "read the queue of \(machine)", underlying: error)
        }
    }

    private static func games(_ db: Database, machine: String, limit: Int, offset: Int) throws -> [GameRecord] {
        let records = try Row.fetchAll(
            db,
            sql: """
                SELECT id, machine, player, provider, nick, outcome, offered_at, started_at, ended_at, commands, corrected
                FROM games WHERE machine = ? ORDER BY offered_at DESC, rowid DESC LIMIT ? OFFSET ?
                """,
            arguments: [machine, limit, offset]
        ).map(record)
        return try withEvidence(records, db)
    }

    static func record(_ row: Row) -> GameRecord {
        var record = GameRecord(
            id: row["id"], machine: row["machine"], player: row["player"], provider: row["provider"], nick: row["nick"],
            outcome: (row["outcome"] as String?).flatMap(GameOutcome.init(rawValue:)),
            offeredAt: row["offered_at"], startedAt: row["started_at"], endedAt: row["ended_at"],
            commands: row["commands"])
        // Only where the query selected them.
        if row.hasColumn("strong") { record.strong = row["strong"] ?? false }
        if row.hasColumn("corrected") {
            record.corrected = (row["corrected"] as String?).flatMap { JSONCoding.decode(GameCorrection.self, from: Array($0.utf8)) }
        }
        return record
    }

    /// What a site ships to the chain next (SPEC §10, §16): the ended games
    /// and the audit entries numbered after `seq` of `epoch`, in order, at
    /// most `limit`, each with its number in the epoch.
    func shipments(of epoch: ShipEpoch, after seq: Int64, limit: Int) async throws(StorageError) -> [(seq: Int64, record: Shipment)] {
        let games = try await records(after: epoch.base + seq, limit: limit).map { (seq: $0.seq, record: Shipment.game($0.game)) }
        let entries: [(seq: Int64, record: Shipment)]
        do {
            entries = try await pool.read { db in
                try Self.shippedAudit(after: epoch.base + seq, limit: limit, db).map { (seq: $0.seq, record: Shipment.audit($0.entry)) }
            }
        } catch {
            throw StorageError(path: path, operation: "read the audit entries to ship", underlying: error)
        }
        return (games + entries).sorted { $0.seq < $1.seq }.prefix(limit).map { (seq: $0.seq - epoch.base, record: $0.record) }
    }

    /// Ended games numbered above `seq`, in order, at most `limit`.

    func records(after seq: Int64, limit: Int) async throws(StorageError) -> [(seq: Int64, game: GameRecord)] {
        do {
            return try await pool.read { db in
                let rows = try Row.fetchAll(
                    db,
                    sql: """
                        SELECT ship_seq, id, machine, player, provider, nick, outcome, offered_at, started_at, ended_at, commands, strong
                        FROM games WHERE ship_seq > ? ORDER BY ship_seq LIMIT ?
                        """,
                    arguments: [seq, limit])
                // A chain's record carries its game's prize (SPEC §15) and clips (§14).
                let games = try Self.withPrizes(try Self.withEvidence(rows.map(Self.record), db), db)
                return zip(rows, games).map { row, game in (seq: row["ship_seq"], game: game) }
            }
        } catch {
            throw StorageError(path: path, operation: "read the games to ship", underlying: error)
        }
    }

    /// The highest shipping number given so far; 0 before the first.
    func lastRecordNumber() async throws(StorageError) -> Int64 {
        do {
            return try await pool.read { db in try Self.lastShipNumber(db) }
        } catch {
            throw StorageError(path: path, operation: "read the last shipping number", underlying: error)
        }
    }

    /// Whether the file can be read: for `/readyz`, with the writer's own health.
    func readable() async -> Bool {
        (try? await pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }) == 1
    }

    /// Checkpoints the WAL into the main file and closes it.
    func close() throws(StorageError) {
        do {
            try pool.writeWithoutTransaction { db in _ = try db.checkpoint(.truncate) }
            try pool.close()
        } catch {
            throw StorageError(path: path, operation: "close", underlying: error)
        }
    }

    // MARK: SQL

    private static func apply(_ change: StoreChange, _ db: Database, shipsRecords: Bool, clipsFirst: Set<String> = []) throws {
        switch change {
        case .enqueue(let machine, let entry, let atHead, let at):
            try enqueue(db, machine: machine, entry: entry, atHead: atHead, at: at)
        case .dequeue(let machine, let player):
            try db.execute(
                sql: "DELETE FROM queue_entries WHERE machine = ? AND provider = ? AND accid = ?",
                arguments: [machine, player.provider, player.accid])
        case .game(let game):
            try upsert(game, db)
            // A started game whose clips are kept is numbered with its clips.
            if shipsRecords, game.endedAt != nil, game.startedAt == nil || !clipsFirst.contains(game.machine) {
                try number(game: game.id, db)
            }
        case .meta(let machine, let seq, let paused):
            try db.execute(
                sql: """
                    INSERT INTO machine_meta (machine, snapshot_seq, paused) VALUES (?, ?, ?)
                    ON CONFLICT (machine) DO UPDATE SET snapshot_seq = excluded.snapshot_seq, paused = excluded.paused
                    """,
                arguments: [machine, seq, paused])
        case .settings(let machine, let settings):
            try keep(settings, in: "machine_settings", column: "settings", machine: machine, db)
        case .maintenance(let machine, let maintenance):
            try keep(maintenance, in: "machine_maintenance", column: "maintenance", machine: machine, db)
        case .ledger(let entry):
            try record(entry, db)
        case .chainWallet(let ask):
            try keep(ask, db)
        case .chainRefundAnswered(let session):
            try db.execute(sql: "UPDATE chain_wallet SET answered = 1 WHERE kind = 'refund' AND session = ?", arguments: [session])
        case .stock(let entry):
            try write(entry, db)
        case .prize(let prize):
            try write(prize, db)
        case .parcel(let parcel):
            try write(parcel, db)
        case .prizes(let ids, let state, let parcel, let at):
            try move(prizes: ids, to: state, parcel: parcel, at: at, db)
        case .audit(let entry):
            try appendAudit(entry, db, ships: shipsRecords)
        case .correction(let game, let correction):
            try correct(game: game, correction, db)
        case .holdClips(let machine, let game, let reason):
            try db.execute(
                sql: "UPDATE evidence SET held = 1, hold_reason = ? WHERE machine = ? AND game = ?", arguments: [reason, machine, game])
        }
    }

    /// A machine's value of a table that holds one JSON value per machine
    /// (``keep(_:in:column:machine:_:)``), if it has one.
    private static func kept<Value: Decodable>(
        _ type: Value.Type, in table: String, column: String, machine: String, _ db: Database
    ) throws -> Value? {
        try String.fetchOne(db, sql: "SELECT \(column) FROM \(table) WHERE machine = ?", arguments: [machine])
            .flatMap { JSONCoding.decode(type, from: Array($0.utf8)) }
    }

    /// A machine's one value of a table that holds one JSON value per
    /// machine (its settings, its maintenance): written over what was
    /// there, or deleted for nil.
    private static func keep(_ value: (some Encodable)?, in table: String, column: String, machine: String, _ db: Database) throws {
        guard let value else {
            try db.execute(sql: "DELETE FROM \(table) WHERE machine = ?", arguments: [machine])
            return
        }
        try db.execute(
            sql: """
                INSERT INTO \(table) (machine, \(column)) VALUES (?, ?)
                ON CONFLICT (machine) DO UPDATE SET \(column) = excluded.\(column)
                """,
            arguments: [machine, String(decoding: JSONCoding.encode(value), as: UTF8.self)])
    }

    /// The whole record, over what was there: a start or an end whose
    /// earlier write was lost still leaves a complete row.
    private static func upsert(_ game: GameRow, _ db: Database) throws {
        try db.execute(
            sql: """
                INSERT INTO games (id, machine, player, nick, provider, offered_at, started_at, ended_at, outcome, commands,
                    phase, deadline_at, coin_serial, coin_acked, serials, result_serial, continues, strong)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (id) DO UPDATE SET
                    started_at = excluded.started_at, ended_at = excluded.ended_at,
                    outcome = excluded.outcome, commands = excluded.commands, phase = excluded.phase,
                    deadline_at = excluded.deadline_at, coin_serial = excluded.coin_serial, coin_acked = excluded.coin_acked,
                    serials = excluded.serials, result_serial = excluded.result_serial,
                    continues = MAX(continues, excluded.continues), strong = MAX(strong, excluded.strong)
                """,
            arguments: [
                game.id, game.machine, game.player, game.nick, game.provider, Timestamp.string(game.offeredAt),
                game.startedAt.map(Timestamp.string), game.endedAt.map(Timestamp.string), game.outcome?.rawValue,
                game.commands, game.open?.phase.rawValue, game.open.map { Timestamp.string($0.deadline) }, game.open?.coinSerial,
                game.open?.coinAcked ?? false, game.open.map { Self.serialsText($0.serials) }, game.resultSerial, game.open?.continues ?? 0,
                game.strong,
            ])
        // An upsert touches exactly one row; anything else means the record was not written.
        guard db.changesCount == 1 else {
            throw GameNotWritten(id: game.id, changes: db.changesCount)
        }
    }

    /// Gives an ended game the next shipping sequence number, once: a game
    /// written again keeps its number.
    static func number(game id: String, _ db: Database) throws {
        try db.execute(sql: "UPDATE games SET ship_seq = ? WHERE id = ? AND ship_seq IS NULL", arguments: [try lastShipNumber(db) + 1, id])
    }

    /// Numbers every ended game that has no number yet, in the order they
    /// ended: the games of a site that joined a chain are shipped too. A
    /// started game of a machine in `clipsFirst` without its clips is left to
    /// the evidence keeper, which cuts them and numbers it
    /// (``awaitingClips(machines:endedSince:)``).
    private static func numberUnshippedGames(_ db: Database, clipsFirst: Set<String>) throws {
        let machines = Array(clipsFirst)
        let ids = try String.fetchAll(
            db,
            sql: """
                SELECT id FROM games WHERE ended_at IS NOT NULL AND ship_seq IS NULL
                  AND NOT (machine IN (\(databaseQuestionMarks(count: machines.count))) AND \(awaitsClips))
                ORDER BY ended_at, rowid
                """,
            arguments: StatementArguments(machines))
        var next = try lastShipNumber(db)
        for id in ids {
            next += 1
            try db.execute(sql: "UPDATE games SET ship_seq = ? WHERE id = ?", arguments: [next, id])
        }
        // The audit entries of a site that joined a chain travel too (SPEC §16), after its games.
        for seq in try Int64.fetchAll(db, sql: "SELECT seq FROM audit WHERE ship_seq IS NULL ORDER BY seq") {
            next += 1
            try db.execute(sql: "UPDATE audit SET ship_seq = ? WHERE seq = ?", arguments: [next, seq])
        }
    }

    /// Idempotent: a player already queued keeps their place, unless they
    /// go back to the head.
    private static func enqueue(_ db: Database, machine: String, entry: QueueEntry, atHead: Bool, at: Date) throws {
        let edge = atHead ? "MIN(ord) - 1" : "MAX(ord) + 1"
        let verb = atHead ? "INSERT OR REPLACE" : "INSERT OR IGNORE"
        try db.execute(
            sql: """
                \(verb) INTO queue_entries (machine, accid, nick, provider, ord, joined_at)
                VALUES (?, ?, ?, ?, (SELECT COALESCE(\(edge), 0) FROM queue_entries WHERE machine = ?), ?)
                """,
            arguments: [machine, entry.accid, entry.nick, entry.provider, machine, Timestamp.string(at)])
    }

    /// Replaces what storage holds for one machine with `image`.
    private static func rewrite(_ image: DurableMachine, _ db: Database) throws {
        try db.execute(sql: "DELETE FROM queue_entries WHERE machine = ?", arguments: [image.machine])
        let now = Timestamp.string(Date())
        for (index, entry) in image.queue.enumerated() {
            try db.execute(
                sql: "INSERT INTO queue_entries (machine, accid, nick, provider, ord, joined_at) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [image.machine, entry.accid, entry.nick, entry.provider, index, now])
        }
        try apply(.meta(machine: image.machine, snapshotSeq: image.snapshotSeq, paused: image.paused), db, shipsRecords: false)
        if let game = image.openGame { try upsert(game, db) }
        try apply(.settings(machine: image.machine, image.settings), db, shipsRecords: false)
        try apply(.maintenance(machine: image.machine, image.maintenance), db, shipsRecords: false)
        if let stock = image.stock { try keepStock(machine: image.machine, stock, db) }
    }

    private struct GameNotWritten: Error, CustomStringConvertible {
        var id: String
        var changes: Int
        var description: String { "game \(id): the upsert changed \(changes) rows instead of 1" }
    }
}

/// The device and inode of a file, or nil when there is no file.
struct FileIdentity: Equatable, Sendable {
    var device: UInt64
    var inode: UInt64

    init?(path: String) {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        device = UInt64(info.st_dev)
        inode = UInt64(info.st_ino)
    }
}

/// One durable write decided by a machine's transition.
enum StoreChange: Sendable, Equatable {
    case enqueue(machine: String, QueueEntry, atHead: Bool, at: Date)
    case dequeue(machine: String, player: PlayerAddress)
    /// The whole record of a game as it stands now.
    case game(GameRow)
    case meta(machine: String, snapshotSeq: Int64, paused: Bool)
    /// The board settings an operator set at runtime; nil: the file's again.
    case settings(machine: String, MachineSettings?)
    /// Why the machine is out of play; nil: it is in play.
    case maintenance(machine: String, Maintenance?)
    /// An entry of a player's wallet (SPEC §11), decided by ``Wallets``.
    case ledger(LedgerEntry)
    /// In a chain: a debit asked of the chain's ledger, or a refund owed
    /// by it, kept until answered (``GameStore/unansweredRefunds()``).
    case chainWallet(ChainWalletAsk)
    /// The chain's ledger answered the refund of this session.
    case chainRefundAnswered(session: String)
    /// A line of a machine's stock log, and the stock after it (SPEC §15).
    case stock(StockEntry)
    /// A prize a won game made, with the game's end.
    case prize(PrizeRow)
    /// A parcel as it now is (made, shipped, delivered).
    case parcel(ParcelRow)
    /// Prizes moved to a state (into a parcel, for the shipping states).
    case prizes([String], PrizeState, parcel: String?, at: Date)
    /// A line of the audit trail (SPEC §16), in the transaction of the change it records.
    case audit(AuditEntry)
    /// An operator's correction of an ended game's result (SPEC §16), over any before it.
    case correction(game: String, GameCorrection)
    /// Every clip of a game held, with why (a correction holds them: SPEC §16).
    case holdClips(machine: String, game: String, reason: String)
}

/// A record a site ships to the chain: a game's, or an audit entry (SPEC §16).
enum Shipment: Sendable, Equatable {
    case game(GameRecord)
    case audit(AuditEntry)
}

/// A game's record as it is written.
struct GameRow: Sendable, Equatable {
    var id: String
    var machine: String
    var player: String
    var nick: String
    var provider: String
    var offeredAt: Date
    var startedAt: Date?
    var endedAt: Date?
    var outcome: GameOutcome?
    var commands: Int
    /// For a game still open: what taking it up again after a restart
    /// needs (SPEC §13). Nil once it has ended, and for a game open in a
    /// file written before the gateway resumed games.
    var open: OpenGame? = nil
    /// What the game's player paid for it (SPEC §11): read back from the
    /// ledger when the game is restored, never written with the record.
    var paid: Int64? = nil
    /// The PC's serial of the result that ended it, when the PC numbers
    /// its results: a repeat after a restart is known (SPEC §4).
    var resultSerial: Int64? = nil
    /// Its coin was the full-power grab (`guarantee_after`, SPEC §12): for
    /// the fairness report (SPEC §16). Once written true, it stays.
    var strong = false
}

/// What a game still open needs to be taken up again after a restart (SPEC
/// §13): its phase, its deadline as an absolute time (one that passed while
/// the gateway was away fires at once), and its coin.
struct OpenGame: Sendable, Equatable {
    enum Phase: String, Sendable {
        case offered
        case playing
        case awaitingResult = "awaiting_result"
    }

    var phase: Phase
    var deadline: Date
    /// The gateway serial of the game's coin (1001); nil while it is offered.
    var coinSerial: Int64?
    /// Whether the PC acked the coin: until it has, the game's commands wait.
    var coinAcked: Bool
    /// The players' serials already forwarded in the game, oldest first
    /// (``SerialWindow``): a copy that comes again after a restart is dropped.
    var serials: [Int64] = []
    /// A continue (SPEC §3): the how-manyth in a row; 0 for a turn of the queue.
    var continues = 0
}

/// What ``GameStore/restore(machine:)`` read back.
struct RestoredMachine: Sendable, Equatable {
    var queue: [QueueEntry]
    var snapshotSeq: Int64
    var paused: Bool
    /// Games open when the gateway stopped, oldest first: turns offered or
    /// started that the gateway never saw end.
    var openGames: [GameRow] = []
    /// Games that ended `lost` since the machine's last `won` (SPEC §12,
    /// `guarantee_after`).
    var lostInARow = 0
    /// Board settings an operator set at runtime, over the file's.
    var settings: MachineSettings? = nil
    /// Why the machine was out of play, if it was.
    var maintenance: Maintenance? = nil
    /// The result that ended its last game, when the PC numbered it.
    var lastResult: TakenResult? = nil
    /// Its counted stock of prizes (SPEC §15), if an operator ever set it.
    var stock: StockLevel? = nil
}

/// The storage failed; says which file and what it was doing.
struct StorageError: Error {
    var path: String
    var operation: String
    var underlying: any Error
}

/// A file's shipping epoch (SPEC §10): its id, and the shipping number the
/// epoch starts after.
struct ShipEpoch: Sendable, Equatable {
    var id: String
    var base: Int64

    static func read(_ db: Database) throws -> ShipEpoch {
        let rows = try Row.fetchAll(db, sql: "SELECT key, value FROM site_meta WHERE key IN ('epoch', 'epoch_base')")
        let values = Dictionary(uniqueKeysWithValues: rows.map { ($0["key"] as String, $0["value"] as String) })
        return ShipEpoch(id: values["epoch"] ?? "", base: values["epoch_base"].flatMap { Int64($0) } ?? 0)
    }

    func write(_ db: Database) throws {
        try db.execute(
            sql: "INSERT INTO site_meta (key, value) VALUES ('epoch', ?), ('epoch_base', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            arguments: [id, String(base)])
    }
}

extension StorageError: ShapedError {
    var shape: ErrorShape {
        ErrorShape(code: "storage", message: "\(operation) failed on \(path)", cause: String(describing: underlying))
    }
}
