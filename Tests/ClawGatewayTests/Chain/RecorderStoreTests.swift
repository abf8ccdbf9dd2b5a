import Foundation
import Logging
import PostgresNIO
import Testing

@testable import ClawGateway

extension DatabaseSuites {
    /// The recorder's store against a real PostgreSQL 15: what the history's
    /// readers may take of the database.
    @Suite struct RecorderStoreTests {
        /// SPEC §10: reads cannot starve writes. Before, every read took a
        /// connection of the writer's pool for as long as PostgreSQL ran it
        /// (a huge `offset` scans and skips every row before it): eight slow
        /// readers held all eight, and the chain's records waited behind them.
        @Test func slowReadersLeaveTheWriterItsConnections() async throws {
            let database = try PostgresServer.start()
            defer { database.stop() }
            let url = try DatabaseURL.parse(database.url).get()
            let store = RecorderStore(url: url, logger: Logger(label: "store-test"))
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { await store.client.run() }
                try await eventually("the schema in place") { await store.probe() }
                // More readers than the pool has connections, each 2 s in the database.
                let readers = Task {
                    try await withThrowingTaskGroup(of: Void.self) { readers in
                        for _ in 0...RecorderStore.maxConnections {
                            readers.addTask { _ = try await store.read("SELECT pg_sleep(2)") { rows in try await rows.collect().count } }
                        }
                        try await readers.waitForAll()
                    }
                }
                try await eventually("the readers in the database") {
                    (try? database.psql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'")) == ["\(RecorderStore.maxReads)"]
                }
                let record = RecorderTests.record("arcade-1", 1)
                let valid = try #require(try? ValidRecord.check(record).get())
                let started = ContinuousClock.now
                let written = try await store.write(valid)
                let took = ContinuousClock.now - started
                #expect(written.upto == 1)
                #expect(took < .milliseconds(1500), "the write waited \(took) behind the readers")
                try await readers.value
                group.cancelAll()
            }
        }

        /// SPEC §11: the chain's ledger. A debit asked twice (the same
        /// session) debits once; two games at once with credit for one: one
        /// debit, one refused; a refund once; nothing ever below 0; entries
        /// never changed.
        @Test func theChainsLedgerTakesEachKeyOnceAndNeverGoesBelowZero() async throws {
            let database = try PostgresServer.start()
            defer { database.stop() }
            let store = RecorderStore(url: try DatabaseURL.parse(database.url).get(), logger: Logger(label: "store-test"))
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { await store.client.run() }
                try await eventually("the schema in place") { await store.probe() }
                let ann = PlayerAddress(accid: "ann", provider: "netease")
                func entry(_ kind: LedgerEntry.Kind, _ credits: Int64, _ key: String?, digest: String? = nil) -> LedgerEntry {
                    LedgerEntry(wallet: ann, kind: kind, credits: credits, key: key, reason: key == nil ? "test" : nil, digest: digest, at: Date())
                }
                #expect(try await store.append(entry(.topup, 3, "order-1", digest: "d")) == .written(balance: 3))
                #expect(try await store.append(entry(.topup, 3, "order-1", digest: "d")) == .duplicate(balance: 3))
                #expect(try await store.append(entry(.topup, 9, "order-1", digest: "other")) == .conflict)
                #expect(try await store.append(entry(.debit, -2, "s1"), site: "arcade-1") == .written(balance: 1))
                #expect(try await store.append(entry(.debit, -2, "s1"), site: "arcade-2") == .duplicate(balance: 1), "asked twice")
                // Two sites at once, each for a game of 1, with credit for one.
                async let first = store.append(entry(.debit, -1, "s2"), site: "arcade-1")
                async let second = store.append(entry(.debit, -1, "s3"), site: "arcade-2")
                let both = try await [first, second]
                #expect(both.filter { $0 == .written(balance: 0) }.count == 1 && both.filter { $0 == .insufficient(balance: 0) }.count == 1, "\(both)")
                #expect(try await store.append(entry(.refund, 2, "s1"), site: "arcade-1") == .written(balance: 2))
                #expect(try await store.append(entry(.refund, 2, "s1"), site: "arcade-1") == .duplicate(balance: 2), "once")
                #expect(try await store.append(entry(.adjust, -3, nil)) == .insufficient(balance: 2))
                let page = try await store.wallet(ann, limit: 10, offset: 0)
                #expect(page.balance == 2 && page.entries.map(\.kind) == [.refund, .debit, .debit, .topup], "\(page.entries.map(\.kind))")
                #expect(try await store.walletsOutOfBalance().isEmpty)
                // The database itself refuses a change to an entry, or a balance below 0.
                #expect(throws: (any Error).self) { try database.psql("UPDATE ledger SET credits = 100 WHERE kind = 'topup'") }
                #expect(throws: (any Error).self) { try database.psql("DELETE FROM ledger") }
                #expect(throws: (any Error).self) { try database.psql("UPDATE wallets SET balance = -1") }
                group.cancelAll()
            }
        }
    }
}
