import Foundation
import GRDB
import Logging
import Testing

@testable import ClawGateway

/// The site's ledger in SQLite (SPEC §11): append-only entries, each key
/// once, a balance that never goes below 0, kept with its entries in one
/// transaction.
@Suite struct LedgerStoreTests {
    static let alice = PlayerAddress(accid: "alice", provider: "netease")
    static let at = Date(timeIntervalSince1970: 1_795_000_000)

    static func store() throws -> GameStore {
        let directory = try TemporaryDirectory.make(prefix: "ledger")
        return try GameStore(path: GameHarness.databasePath(in: directory))
    }

    static func entry(
        _ kind: LedgerEntry.Kind, _ credits: Int64, key: String?, digest: String? = nil, reason: String? = nil,
        wallet: PlayerAddress = alice
    ) -> LedgerEntry {
        LedgerEntry(wallet: wallet, kind: kind, credits: credits, key: key, reason: reason, digest: digest, at: at)
    }

    @Test func topUpsDebitsAndRefundsEachOncePerKey() async throws {
        let store = try Self.store()
        #expect(try await store.append(Self.entry(.topup, 10, key: "order-1", digest: "d1")) == .written(balance: 10))
        #expect(try await store.append(Self.entry(.topup, 10, key: "order-1", digest: "d1")) == .duplicate(balance: 10), "sent again")
        #expect(try await store.append(Self.entry(.topup, 99, key: "order-1", digest: "d2")) == .conflict, "the same order, other content")
        #expect(try await store.append(Self.entry(.debit, -3, key: "s1")) == .written(balance: 7))
        #expect(try await store.append(Self.entry(.debit, -3, key: "s1")) == .duplicate(balance: 7), "one debit per game")
        #expect(try await store.append(Self.entry(.refund, 3, key: "s1")) == .written(balance: 10))
        #expect(try await store.append(Self.entry(.refund, 3, key: "s1")) == .duplicate(balance: 10), "one refund per game")
        #expect(try await store.append(Self.entry(.adjust, -4, key: nil, reason: "goodwill reversed")) == .written(balance: 6))

        let page = try await store.wallet(Self.alice, limit: 2, offset: 0)
        #expect(page.balance == 6)
        #expect(page.entries.map(\.kind) == [.adjust, .refund], "newest first")
        #expect(try await store.wallet(Self.alice, limit: 10, offset: 2).entries.map(\.kind) == [.debit, .topup])
        #expect(try await store.wallet(PlayerAddress(accid: "alice", provider: "generic"), limit: 10, offset: 0) == WalletPage(balance: 0, entries: []))
        #expect(try store.walletsOutOfBalance().isEmpty)
    }

    @Test func nothingTakesABalanceBelowZero() async throws {
        let store = try Self.store()
        #expect(try await store.append(Self.entry(.debit, -1, key: "s1")) == .insufficient(balance: 0))
        #expect(try await store.append(Self.entry(.topup, 2, key: "o", digest: "d")) == .written(balance: 2))
        #expect(try await store.append(Self.entry(.adjust, -3, key: nil, reason: "x")) == .insufficient(balance: 2))
        #expect(try await store.append(Self.entry(.debit, -2, key: "s2")) == .written(balance: 0))
        #expect(try await store.wallet(Self.alice, limit: 10, offset: 0).entries.count == 2, "nothing refused was written")
    }

    /// A debit written with its game's start: when the transaction fails, neither is there.
    @Test func anEntryIsWrittenWithWhatCausesItOrNotAtAll() async throws {
        let store = try Self.store()
        _ = try await store.append(Self.entry(.topup, 5, key: "o", digest: "d"))
        struct Crash: Error {}
        #expect(throws: Crash.self) {
            try store.pool.write { db in
                #expect(try GameStore.append(Self.entry(.debit, -1, key: "s1"), db) == .written(balance: 4))
                throw Crash()
            }
        }
        #expect(try await store.wallet(Self.alice, limit: 10, offset: 0).balance == 5)
        #expect(try await store.append(Self.entry(.debit, -1, key: "s1")) == .written(balance: 4), "the debit was never written")
    }

    /// SQLite refuses what must never happen, whatever writes to the file.
    @Test func theFileRefusesChangesDeletionsAndOverdrafts() async throws {
        let store = try Self.store()
        _ = try await store.append(Self.entry(.topup, 5, key: "o", digest: "d"))
        for sql in [
            "UPDATE ledger SET credits = 500", "DELETE FROM ledger", "UPDATE wallets SET balance = -1",
            "INSERT INTO ledger (provider, account, kind, credits, key, at) VALUES ('netease', 'alice', 'debit', 3, 's9', 'x')",
            "INSERT INTO ledger (provider, account, kind, credits, key, at) VALUES ('netease', 'alice', 'topup', 1, 'o', 'x')",
            "INSERT INTO ledger (provider, account, kind, credits, key, at) VALUES ('netease', 'alice', 'adjust', 1, 'k', 'x')",
        ] {
            #expect(throws: (any Error).self, "\(sql)") { try store.pool.write { db in try db.execute(sql: sql) } }
        }
        #expect(try await store.wallet(Self.alice, limit: 10, offset: 0).balance == 5)

        // A kept balance that is not the sum of its entries is found.
        try await store.pool.write { db in try db.execute(sql: "UPDATE wallets SET balance = 4") }
        #expect(try store.walletsOutOfBalance() == [Self.alice])
    }

    /// Top-ups and adjustments through the wallets: each order once, durable
    /// before the answer, the balance in memory what the file sums.
    @Test func theWalletsTakeEachOrderOnceAndNeverGoBelowZero() async throws {
        let store = try Self.store()
        let writer = StorageWriter(store: store, logger: Logger(label: "test"))
        writer.start()
        let settings = CreditsSettings(topupSecret: "0123456789abcdef")
        let wallets = try Wallets(settings: settings, writer: writer, logger: Logger(label: "test"))
        let order = Self.entry(.topup, 10, key: "pay-1", digest: TopUp.digest(provider: "netease", account: "alice", credits: 10))
        #expect(await wallets.topUp(order) == .written(balance: 10))
        #expect(await wallets.topUp(order) == .duplicate(balance: 10), "the same order again adds nothing")
        var other = order
        other.credits = 50
        other.digest = TopUp.digest(provider: "netease", account: "alice", credits: 50)
        #expect(await wallets.topUp(other) == .conflict)
        #expect(await wallets.adjust(Self.entry(.adjust, -11, key: nil, reason: "too much"), audit: nil) == .insufficient(balance: 10))
        #expect(await wallets.adjust(Self.entry(.adjust, -4, key: nil, reason: "goodwill reversed"), audit: nil) == .written(balance: 6))
        #expect(wallets.balance(of: Self.alice) == 6)
        #expect(try await store.wallet(Self.alice, limit: 10, offset: 0).balance == 6)

        // A game's debit through the writer, then the store read back as a restart reads it.
        let game = GameRow(
            id: "s1", machine: "m1", player: "alice", nick: "Alice", provider: "netease", offeredAt: Self.at, startedAt: Self.at,
            endedAt: nil, outcome: nil, commands: 0,
            open: OpenGame(phase: .playing, deadline: Self.at, coinSerial: 7, coinAcked: true))
        _ = wallets.transact(machine: 0) { _ in ((), [.game(game), .ledger(Self.entry(.debit, -2, key: "s1"))]) }
        await writer.flush()
        #expect(try store.restore(machine: "m1").openGames.first?.paid == 2)
        #expect(try store.walletsOutOfBalance().isEmpty)
        await writer.stop()
        #expect(try Wallets(settings: settings, writer: StorageWriter(store: try GameStore(path: store.path), logger: Logger(label: "test")), logger: Logger(label: "test")).balance(of: Self.alice) == 4)
    }
}

/// `exchange` (SPEC §11, §15) in a file made before it: the ledger's table
/// is made again with the new rules, every entry kept as it was.
@Suite struct LedgerExchangeMigrationTests {
    static func write(_ pool: DatabasePool, _ body: (Database) throws -> Void) throws {
        try pool.write(body)
    }

    @Test func aFileOfBeforeExchangesKeepsItsEntriesAndTakesExchanges() async throws {
        let directory = try TemporaryDirectory.make(prefix: "ledger-v14")
        let path = GameHarness.databasePath(in: directory)
        do {
            let pool = try DatabasePool(path: path)
            try GameStore.migrator.migrate(pool, upTo: "v14-adjust-keys")
            try Self.write(pool) { db in
                for (kind, credits, key) in [("topup", 10, "order-1"), ("debit", -2, "s1"), ("refund", 2, "s1")] {
                    try db.execute(
                        sql: "INSERT INTO ledger (provider, account, kind, credits, key, at) VALUES ('netease', 'alice', ?, ?, ?, '2026-11-01T00:00:00.000Z')",
                        arguments: [kind, credits, key])
                }
                try db.execute(sql: "INSERT INTO wallets (provider, account, balance) VALUES ('netease', 'alice', 10)")
                #expect(throws: (any Error).self, "no exchange before") {
                    try db.execute(
                        sql: "INSERT INTO ledger (provider, account, kind, credits, key, at) VALUES ('netease', 'alice', 'exchange', 5, 'p-1', 'x')")
                }
            }
            try pool.close()
        }
        let store = try GameStore(path: path)
        let before = try await store.wallet(LedgerStoreTests.alice, limit: 10, offset: 0)
        #expect(before.balance == 10 && before.entries.map(\.kind) == [.refund, .debit, .topup])
        #expect(try await store.append(LedgerStoreTests.entry(.exchange, 8, key: "p-1")) == .written(balance: 18))
        #expect(try await store.append(LedgerStoreTests.entry(.exchange, 8, key: "p-1")) == .duplicate(balance: 18), "once per prize")
        #expect(try store.readNow { db in try Int64.fetchAll(db, sql: "SELECT seq FROM ledger ORDER BY seq") } == [1, 2, 3, 4],
                "numbers kept, and the next after them")
        // The rules hold as they did, and for the new kind.
        for sql in [
            "INSERT INTO ledger (provider, account, kind, credits, key, at) VALUES ('netease', 'alice', 'exchange', -5, 'p-2', 'x')",
            "INSERT INTO ledger (provider, account, kind, credits, key, at) VALUES ('netease', 'alice', 'exchange', 5, NULL, 'x')",
            "INSERT INTO ledger (provider, account, kind, credits, key, at) VALUES ('netease', 'alice', 'debit', 5, 's9', 'x')",
            "INSERT INTO ledger (provider, account, kind, credits, key, at) VALUES ('netease', 'alice', 'gift', 5, 'g', 'x')",
            "UPDATE ledger SET credits = 100 WHERE seq = 1",
            "DELETE FROM ledger",
        ] {
            #expect(throws: (any Error).self, "\(sql)") { try store.pool.write { db in try db.execute(sql: sql) } }
        }
        #expect(try store.walletsOutOfBalance().isEmpty)
        try store.close()
    }
}
