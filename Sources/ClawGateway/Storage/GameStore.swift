import Foundation
import GRDB
import Protocol
import Synchronization

/// The durable side of every machine: the waiting queues, the game records and
/// each machine's snapshot sequence and pause flag, in one SQLite file.
///
/// WAL with `synchronous = NORMAL`: a committed transaction survives the
/// process being killed (it is in the WAL, in the OS's page cache); only a
/// power cut can lose the last moments before a checkpoint.
///
/// Calls are synchronous and short; each ``apply(machine:_:)`` is one
/// transaction, so a queue change and the snapshot sequence it produced are
/// never written apart.
final class GameStore: Sendable {
    let path: String
    private let pool: DatabasePool
    /// Set while writes fail (disk full, file removed): `/readyz` reports it.
    private let writesFailing = Atomic<Bool>(false)

    init(path: String) throws(StorageError) {
        self.path = path
        do {
            let folder = URL(fileURLWithPath: path).deletingLastPathComponent()
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            var configuration = Configuration()
            configuration.label = "claw-gateway"
            configuration.busyMode = .timeout(5)
            configuration.prepareDatabase { db in
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
            pool = try DatabasePool(path: path, configuration: configuration)
            try Self.migrator.migrate(pool)
        } catch {
            throw StorageError(path: path, operation: "open", underlying: error)
        }
    }

    private static var migrator: DatabaseMigrator {
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
        return migrator
    }

    /// Reads a machine back after a start: its queue in order, its snapshot
    /// sequence and pause flag. Games that were open when the gateway stopped
    /// are settled first: an offer nobody accepted is undone (the player goes
    /// back to the head of the queue), a game that had started is closed as
    /// `no_result`, since its result can no longer be matched.
    func restore(machine: String, now: Date) throws(StorageError) -> RestoredMachine {
        do {
            return try pool.write { db in
                let open = try Row.fetchAll(
                    db, sql: "SELECT id, player, nick, provider, started_at FROM games WHERE machine = ? AND ended_at IS NULL",
                    arguments: [machine])
                var closed: [String] = []
                var requeued: [String] = []
                for row in open {
                    let id: String = row["id"]
                    if row["started_at"] as String? == nil {
                        let entry = QueueEntry(accid: row["player"], nick: row["nick"], provider: row["provider"])
                        try Self.enqueue(db, machine: machine, entry: entry, atHead: true, at: now)
                        try db.execute(sql: "DELETE FROM games WHERE id = ?", arguments: [id])
                        requeued.append(entry.accid)
                    } else {
                        try db.execute(
                            sql: "UPDATE games SET ended_at = ?, outcome = ? WHERE id = ?",
                            arguments: [Timestamp.string(now), GameOutcome.noResult.rawValue, id])
                        closed.append(id)
                    }
                }
                let queue = try Row.fetchAll(
                    db, sql: "SELECT accid, nick, provider FROM queue_entries WHERE machine = ? ORDER BY ord",
                    arguments: [machine]
                ).map { QueueEntry(accid: $0["accid"], nick: $0["nick"], provider: $0["provider"]) }
                let meta = try Row.fetchOne(
                    db, sql: "SELECT snapshot_seq, paused FROM machine_meta WHERE machine = ?", arguments: [machine])
                return RestoredMachine(
                    queue: queue, snapshotSeq: meta?["snapshot_seq"] ?? 0, paused: meta?["paused"] ?? false,
                    closedGames: closed, requeuedOffers: requeued)
            }
        } catch {
            throw StorageError(path: path, operation: "restore \(machine)", underlying: error)
        }
    }

    /// Writes what one transition of a machine changed, in one transaction.
    func apply(machine: String, _ changes: [StoreChange]) throws(StorageError) {
        guard !changes.isEmpty else { return }
        do {
            try pool.write { db in
                for change in changes {
                    try Self.apply(change, machine: machine, db)
                }
            }
            writesFailing.store(false, ordering: .relaxed)
        } catch {
            writesFailing.store(true, ordering: .relaxed)
            throw StorageError(path: path, operation: "write \(machine)", underlying: error)
        }
    }

    /// A machine's games, newest first.
    func games(machine: String, limit: Int, offset: Int) throws(StorageError) -> [GameRecord] {
        do {
            return try pool.read { db in
                try Row.fetchAll(
                    db,
                    sql: """
                        SELECT id, machine, player, nick, outcome, offered_at, started_at, ended_at, commands
                        FROM games WHERE machine = ? ORDER BY offered_at DESC, rowid DESC LIMIT ? OFFSET ?
                        """,
                    arguments: [machine, limit, offset]
                ).map { row in
                    GameRecord(
                        id: row["id"], machine: row["machine"], player: row["player"], nick: row["nick"],
                        outcome: (row["outcome"] as String?).flatMap(GameOutcome.init(rawValue:)),
                        offeredAt: row["offered_at"], startedAt: row["started_at"], endedAt: row["ended_at"],
                        commands: row["commands"])
                }
            }
        } catch {
            throw StorageError(path: path, operation: "read games of \(machine)", underlying: error)
        }
    }

    /// Whether the file can be read and the last write succeeded: for `/readyz`.
    func check() -> Bool {
        !writesFailing.load(ordering: .relaxed) && (try? pool.read { db in try Int.fetchOne(db, sql: "SELECT 1") }) == 1
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

    private static func apply(_ change: StoreChange, machine: String, _ db: Database) throws {
        switch change {
        case .enqueue(let entry, let atHead, let at):
            try enqueue(db, machine: machine, entry: entry, atHead: atHead, at: at)
        case .dequeue(let accid):
            try db.execute(sql: "DELETE FROM queue_entries WHERE machine = ? AND accid = ?", arguments: [machine, accid])
        case .openGame(let id, let entry, let offeredAt):
            try db.execute(
                sql: "DELETE FROM queue_entries WHERE machine = ? AND accid = ?", arguments: [machine, entry.accid])
            try db.execute(
                sql: "INSERT INTO games (id, machine, player, nick, provider, offered_at) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [id, machine, entry.accid, entry.nick, entry.provider, Timestamp.string(offeredAt)])
        case .startGame(let id, let at):
            try db.execute(
                sql: "UPDATE games SET started_at = ? WHERE id = ?", arguments: [Timestamp.string(at), id])
        case .closeGame(let id, let outcome, let at, let commands):
            try db.execute(
                sql: "UPDATE games SET ended_at = ?, outcome = ?, commands = ? WHERE id = ?",
                arguments: [Timestamp.string(at), outcome.rawValue, commands, id])
        case .meta(let seq, let paused):
            try db.execute(
                sql: """
                    INSERT INTO machine_meta (machine, snapshot_seq, paused) VALUES (?, ?, ?)
                    ON CONFLICT (machine) DO UPDATE SET snapshot_seq = excluded.snapshot_seq, paused = excluded.paused
                    """,
                arguments: [machine, seq, paused])
        }
    }

    private static func enqueue(_ db: Database, machine: String, entry: QueueEntry, atHead: Bool, at: Date) throws {
        let edge = atHead ? "MIN(ord) - 1" : "MAX(ord) + 1"
        try db.execute(
            sql: """
                INSERT OR REPLACE INTO queue_entries (machine, accid, nick, provider, ord, joined_at)
                VALUES (?, ?, ?, ?, (SELECT COALESCE(\(edge), 0) FROM queue_entries WHERE machine = ?), ?)
                """,
            arguments: [machine, entry.accid, entry.nick, entry.provider, machine, Timestamp.string(at)])
    }
}

/// One write of a machine transition.
enum StoreChange: Sendable, Equatable {
    case enqueue(QueueEntry, atHead: Bool, at: Date)
    case dequeue(accid: String)
    /// The head of the queue was offered the turn: out of the queue, into a game record.
    case openGame(id: String, QueueEntry, offeredAt: Date)
    case startGame(id: String, at: Date)
    case closeGame(id: String, GameOutcome, at: Date, commands: Int)
    case meta(snapshotSeq: Int64, paused: Bool)
}

/// What ``GameStore/restore(machine:now:)`` read back.
struct RestoredMachine: Sendable, Equatable {
    var queue: [QueueEntry]
    var snapshotSeq: Int64
    var paused: Bool
    /// Games that had started and were closed as `no_result`.
    var closedGames: [String]
    /// Players whose unaccepted offer was undone and who are back at the head.
    var requeuedOffers: [String]
}

/// A game as recorded, for the read API.
struct GameRecord: Sendable, Equatable, Codable {
    var id: String
    var machine: String
    var player: String
    var nick: String
    var outcome: GameOutcome?
    var offeredAt: String
    var startedAt: String?
    var endedAt: String?
    var commands: Int

    enum CodingKeys: String, CodingKey {
        case id, machine, player, nick, outcome
        case offeredAt = "offered_at"
        case startedAt = "started_at"
        case endedAt = "ended_at"
        case commands
    }
}

/// The storage failed; says which file and what it was doing.
struct StorageError: Error, CustomStringConvertible {
    var path: String
    var operation: String
    var underlying: any Error

    var description: String { "storage \(path): \(operation) failed: \(underlying)" }
}
