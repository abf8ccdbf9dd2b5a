import Foundation
import GRDB
import Logging
import NIOPosix
import Protocol
import Synchronization
import Testing

@testable import ClawGateway

/// The writer's thread against a real SQLite file: group commit, tickets in
/// order, and what happens when the file is taken away.
@Suite struct StorageWriterTests {
    static func game(_ id: String, outcome: GameOutcome? = nil) -> GameRow {
        GameRow(
            id: id, machine: "m1", player: "p-\(id)", nick: "P", provider: "test", offeredAt: Date(timeIntervalSince1970: 1),
            startedAt: nil, endedAt: outcome == nil ? nil : Date(timeIntervalSince1970: 2), outcome: outcome, commands: 0)
    }

    /// Stand-ins for the arcade reading the writer's reports: a fixed image
    /// per machine, handed over when the writer fails, and a record of the
    /// machines it said were made durable.
    final class FakeMachines: Sendable {
        let images = Mutex<[DurableMachine]>([])
        let durable = Recorder<Int>()
        let failures = Recorder<Int>()

        /// Reads the writer's reports until it stops.
        func read(_ writer: StorageWriter) -> Task<Void, Never> {
            Task {
                for await report in writer.reports {
                    switch report {
                    case .durable(let machines):
                        durable.append(contentsOf: machines)
                    case .failing:
                        failures.append(1)
                        writer.rewrite { images.withLock { $0 } }
                    }
                }
            }
        }
    }

    /// What the ingress's fast path waits with: told on its own event loop,
    /// true once durable, false when the deadline passes or the writer stops.
    @Test func anEventLoopIsToldOnItsOwnThreadWhetherATicketBecameDurable() async throws {
        let directory = try TemporaryDirectory.make(prefix: "writer")
        let store = try GameStore(path: directory.appendingPathComponent("g.sqlite").path)
        let writer = StorageWriter(store: store, logger: Logger(label: "test"))
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        func told(_ ticket: StorageWriter.Ticket, timeout: Duration) async -> (durable: Bool, onLoop: Bool) {
            await withCheckedContinuation { continuation in
                writer.whenDurable(ticket, timeout: timeout, on: loop) { durable in
                    continuation.resume(returning: (durable, loop.inEventLoop))
                }
            }
        }
        // Not started: nothing is committed, so the deadline answers.
        let waiting = writer.submit([.game(Self.game("w1"))], machine: 0)
        let expired = await told(waiting, timeout: .milliseconds(50))
        #expect(expired.durable == false && expired.onLoop)

        let machines = FakeMachines()
        let reading = machines.read(writer)
        writer.start()
        let ticket = writer.submit([.game(Self.game("w2"))], machine: 0)
        let durable = await told(ticket, timeout: .seconds(30))
        #expect(durable.durable && durable.onLoop)
        #expect(await told(waiting, timeout: .seconds(30)).durable, "an earlier ticket is durable too")

        await writer.stop()
        await reading.value
        let afterStop = writer.submit([.game(Self.game("w3"))], machine: 0)
        let stopped = await told(afterStop, timeout: .seconds(30))
        #expect(stopped.durable == false && stopped.onLoop, "a stopped writer answers at once, not at the deadline")
    }

    @Test func ticketsBecomeDurableInOrderAndTheMachinesAreTold() async throws {
        let directory = try TemporaryDirectory.make(prefix: "writer")
        let store = try GameStore(path: directory.appendingPathComponent("g.sqlite").path)
        let writer = StorageWriter(store: store, logger: Logger(label: "test"))
        let machines = FakeMachines()
        let reading = machines.read(writer)
        writer.start()
        var tickets: [StorageWriter.Ticket] = []
        for index in 0..<200 {
            tickets.append(writer.submit([.game(Self.game("g\(index)"))], machine: index % 3))
        }
        #expect(tickets == tickets.sorted())
        #expect(await writer.waitDurable(tickets[199], timeout: .seconds(10)))
        #expect(tickets.allSatisfy(writer.isDurable))
        #expect(try store.gamesNow(machine: "m1", limit: 500, offset: 0).count == 200)
        #expect(writer.isWritable)
        await writer.stop()
        await reading.value
        #expect(Set(machines.durable.items) == [0, 1, 2], "reported, the writer's stream ended with it")
    }

    @Test func aRemovedFileIsReopenedAndEveryMachineRewrittenWithNoRecordLost() async throws {
        let directory = try TemporaryDirectory.make(prefix: "writer")
        let path = directory.appendingPathComponent("g.sqlite").path
        let store = try GameStore(path: path)
        let writer = StorageWriter(store: store, logger: Logger(label: "test"), retryDelay: .milliseconds(10)...(.milliseconds(50)))
        let machines = FakeMachines()
        let bob = QueueEntry(accid: "bob", nick: "Bob", provider: "test")
        machines.images.withLock {
            $0 = [DurableMachine(machine: "m1", queue: [bob], snapshotSeq: 7, paused: true, openGame: Self.game("open"))]
        }
        let reading = machines.read(writer)
        writer.start()
        let first = writer.submit([.game(Self.game("before", outcome: .won))], machine: 0)
        #expect(await writer.waitDurable(first, timeout: .seconds(10)))

        // An operator removes the file (and its WAL) while the gateway runs.
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
        let refund = LedgerEntry(
            wallet: PlayerAddress(accid: "bob", provider: "test"), kind: .refund, credits: 2, key: "after", reason: nil, digest: nil,
            at: Date(timeIntervalSince1970: 1_795_000_000))
        let closed = writer.submit([.game(Self.game("after", outcome: .lost)), .ledger(refund)], machine: 0)
        #expect(await writer.waitDurable(closed, timeout: .seconds(10)), "made durable by the rewrite")
        #expect(writer.isWritable)
        #expect(FileManager.default.fileExists(atPath: path))
        let games = try store.gamesNow(machine: "m1", limit: 10, offset: 0)
        #expect(Set(games.map(\.id)) == ["after", "open"], "the closed game and the open one; the rest went with the old file")
        #expect(try store.queuedNow(machine: "m1") == ["bob"])
        let kept = try await store.wallet(refund.wallet, limit: 10, offset: 0)
        #expect(kept.balance == 2 && kept.entries.map(\.key) == ["after"], "the ledger entry was kept and written")
        let reopened = try GameStore(path: path).restore(machine: "m1")
        #expect(reopened.snapshotSeq == 7)
        #expect(reopened.paused)
        #expect(machines.failures.items.count == 1, "the writer said it was failing, once")
        await writer.stop()
        await reading.value
    }

    /// SPEC §5: every field of a game, `null` where it has no value yet.
    @Test func aGameRecordHasEveryFieldNullWhereUnset() throws {
        let directory = try TemporaryDirectory.make(prefix: "writer")
        let store = try GameStore(path: directory.appendingPathComponent("g.sqlite").path)
        try store.write([.game(Self.game("open")), .game(Self.game("closed", outcome: .won))])
        let json = try JSONEncoder().encode(GameList(games: try store.gamesNow(machine: "m1", limit: 10, offset: 0)))
        let games = try #require(try JSONSerialization.jsonObject(with: json) as? [String: [[String: Any]]])["games"] ?? []
        let fields: Set = ["id", "machine", "player", "provider", "nick", "outcome", "offered_at", "started_at", "ended_at", "commands"]
        #expect(games.count == 2)
        for game in games { #expect(Set(game.keys) == fields) }
        let open = try #require(games.first { $0["id"] as? String == "open" })
        #expect(open["outcome"] is NSNull && open["started_at"] is NSNull && open["ended_at"] is NSNull)
        let closed = try #require(games.first { $0["id"] as? String == "closed" })
        #expect(closed["outcome"] as? String == "won" && closed["ended_at"] is String)
        #expect(closed["started_at"] is NSNull, "never started: null, not left out")
        try store.close()
    }

    /// A file of the first schema, where a queue entry was keyed by account
    /// alone, opens with every row and its provider kept, and then takes the
    /// same account for another provider.
    @Test func aFileOfTheFirstSchemaIsMigratedKeepingEveryRowsProvider() throws {
        let directory = try TemporaryDirectory.make(prefix: "writer")
        let path = directory.appendingPathComponent("g.sqlite").path
        let old = try DatabaseQueue(path: path)
        try old.write { db in
            try db.execute(
                sql: """
                    CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);
                    INSERT INTO grdb_migrations VALUES ('v1');
                    CREATE TABLE queue_entries (machine TEXT NOT NULL, accid TEXT NOT NULL, nick TEXT NOT NULL, provider TEXT NOT NULL,
                        ord INTEGER NOT NULL, joined_at TEXT NOT NULL, PRIMARY KEY (machine, accid));
                    CREATE INDEX queue_entries_order ON queue_entries (machine, ord);
                    CREATE TABLE games (id TEXT PRIMARY KEY, machine TEXT NOT NULL, player TEXT NOT NULL, nick TEXT NOT NULL,
                        provider TEXT NOT NULL, offered_at TEXT NOT NULL, started_at TEXT, ended_at TEXT, outcome TEXT,
                        commands INTEGER NOT NULL DEFAULT 0);
                    CREATE TABLE machine_meta (machine TEXT PRIMARY KEY, snapshot_seq INTEGER NOT NULL, paused INTEGER NOT NULL DEFAULT 0);
                    INSERT INTO queue_entries VALUES ('m1', 'alice', 'Alice', 'netease', 1, '2026-11-21T10:00:00.000Z');
                    INSERT INTO queue_entries VALUES ('m1', 'bob', 'Bob', 'generic', 2, '2026-11-21T10:00:01.000Z');
                    """)
        }
        try old.close()
        let store = try GameStore(path: path)
        #expect(try store.restore(machine: "m1").queue == [
            QueueEntry(accid: "alice", nick: "Alice", provider: "netease"), QueueEntry(accid: "bob", nick: "Bob", provider: "generic"),
        ])
        try store.write([.enqueue(machine: "m1", QueueEntry(accid: "alice", nick: "A", provider: "generic"), atHead: false, at: Date())])
        #expect(try store.queuedNow(machine: "m1") == ["alice", "bob", "alice"], "the generic alice is another player")
        try store.write([.dequeue(machine: "m1", player: PlayerAddress(accid: "alice", provider: "netease"))])
        #expect(try store.restore(machine: "m1").queue.map(\.provider) == ["generic", "generic"])
        try store.close()
    }

    @Test func aWaitThatOutlastsItsTimeoutSaysSo() async throws {
        let directory = try TemporaryDirectory.make(prefix: "writer")
        let store = try GameStore(path: directory.appendingPathComponent("g.sqlite").path)
        // Never started: nothing becomes durable.
        let writer = StorageWriter(store: store, logger: Logger(label: "test"))
        let ticket = writer.submit([.meta(machine: "m1", snapshotSeq: 1, paused: false)], machine: 0)
        #expect(await !writer.waitDurable(ticket, timeout: .milliseconds(50)))
        #expect(!writer.isDurable(ticket))
    }
}
