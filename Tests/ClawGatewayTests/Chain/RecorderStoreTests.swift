import Foundation
import Logging
import PostgresNIO
import Protocol
import Testing

@testable import ClawGateway

extension DatabaseSuites {
    /// The recorder's store against a real PostgreSQL 15: what the history's
    /// readers may take of the database.
    @Suite struct RecorderStoreTests {
        /// A store on a PostgreSQL 15 of its own, its client running and its
        /// schema in place, for `body`; everything stopped after.
        static func withStore(_ body: (RecorderStore, PostgresServer) async throws -> Void) async throws {
            let database = try PostgresServer.start()
            defer { database.stop() }
            let store = RecorderStore(url: try DatabaseURL.parse(database.url).get(), logger: Logger(label: "store-test"))
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { await store.client.run() }
                try await eventually("the schema in place") { await store.probe() }
                try await body(store, database)
                group.cancelAll()
            }
        }

        /// SPEC §10: reads cannot starve writes. Before, every read took a
        /// connection of the writer's pool for as long as PostgreSQL ran it
        /// (a huge `offset` scans and skips every row before it): eight slow
        /// readers held all eight, and the chain's records waited behind them.
        @Test func slowReadersLeaveTheWriterItsConnections() async throws {
            try await Self.withStore { store, database in
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
            }
        }

        /// SPEC §14: the chain's records carry their clips' metadata, and
        /// the history gives it back as the site wrote it; a value PostgreSQL's
        /// JSON cannot hold is refused as data (set aside), not an outage.
        @Test func aRecordsClipsAreKeptAndReadBack() async throws {
            try await Self.withStore { store, _ in
                var record = RecorderTests.record("arcade-1", 1)
                record.game.evidence = [EvidenceClip(camera: "front", path: "/var/lib/claw-gateway/evidence/m1/g-1-front.mp4", durationSeconds: 34.52)]
                record.game.evidenceMissing = [EvidenceGap(camera: "侧面", reason: #"the recording was down: "connection refused""#)]
                _ = try await store.write(try ValidRecord.check(record).get())
                let plain = RecorderTests.record("arcade-1", 2)
                _ = try await store.write(try ValidRecord.check(plain).get())
                let games = try await store.games(GameFilter(site: "arcade-1"))
                let read = try #require(games.first { $0.game.id == record.game.id })
                #expect(read.game.evidence == record.game.evidence && read.game.evidenceMissing == record.game.evidenceMissing)
                let without = try #require(games.first { $0.game.id == plain.game.id })
                #expect(without.game.evidence == nil && without.game.evidenceMissing == nil, "a game without clips says nothing of them")

                var nul = RecorderTests.record("arcade-1", 3)
                nul.game.evidenceMissing = [EvidenceGap(camera: "1", reason: "down\u{0}")]
                await #expect(throws: RecorderStore.Refused.self) { _ = try await store.write(try ValidRecord.check(nul).get()) }
            }
        }

        /// SPEC §11: the chain's ledger. A top-up once per order; a debit
        /// asked twice (the same session) debits once; two games at once
        /// with credit for one: one debit, one refused; a refund once, of
        /// what the debit took, to its wallet and site only; a refund that
        /// finds no debit closes the session against a late debit; nothing
        /// ever below 0; entries never changed.
        @Test func theChainsLedgerTakesEachKeyOnceAndNeverGoesBelowZero() async throws {
            try await Self.withStore { store, database in
                let ann = PlayerAddress(accid: "ann", provider: "netease")
                func entry(_ kind: LedgerEntry.Kind, _ credits: Int64, _ key: String?, digest: String? = nil) -> LedgerEntry {
                    LedgerEntry(wallet: ann, kind: kind, credits: credits, key: key, reason: key == nil ? "test" : nil, digest: digest, at: Date())
                }
                func ask(_ kind: ChainWalletAsk.Kind, _ session: String, _ credits: Int64, account: String = "ann") -> ChainWalletAsk {
                    ChainWalletAsk(kind: kind, session: session, provider: "netease", account: account, credits: credits, machine: "m1")
                }
                func answer(_ kind: ChainWalletAsk.Kind, _ session: String, _ result: ChainWalletAnswer.Result, _ balance: Int64) -> ChainWalletAnswer {
                    ChainWalletAnswer(kind: kind, session: session, result: result, balance: balance)
                }
                #expect(try await store.append(entry(.topup, 3, "order-1", digest: "d")) == .written(balance: 3))
                #expect(try await store.append(entry(.topup, 3, "order-1", digest: "d")) == .duplicate(balance: 3))
                #expect(try await store.append(entry(.topup, 9, "order-1", digest: "other")) == .conflict)
                #expect(try await store.settle(ask(.debit, "s1", 2), site: "arcade-1") == answer(.debit, "s1", .debited, 1))
                #expect(try await store.settle(ask(.debit, "s1", 2), site: "arcade-1") == answer(.debit, "s1", .debited, 1), "asked twice")
                #expect(try await store.settle(ask(.debit, "s1", 2), site: "arcade-2") == answer(.debit, "s1", .refused, 1), "another site's")
                #expect(try await store.settle(ask(.debit, "s1", 2, account: "bob"), site: "arcade-1") == answer(.debit, "s1", .refused, 0))
                // Two sites at once, each for a game of 1, with credit for one.
                async let first = store.settle(ask(.debit, "s2", 1), site: "arcade-1")
                async let second = store.settle(ask(.debit, "s3", 1), site: "arcade-2")
                let both = try await [first, second].map(\.result)
                #expect(both.sorted { $0.rawValue < $1.rawValue } == [.debited, .insufficient], "\(both)")
                // A refund for another site's game, or another wallet: nothing paid.
                #expect(try await store.settle(ask(.refund, "s1", 2), site: "arcade-2") == answer(.refund, "s1", .nothingToRefund, 0))
                #expect(try await store.settle(ask(.refund, "s1", 5), site: "arcade-1") == answer(.refund, "s1", .refunded, 2), "what the debit took")
                #expect(try await store.settle(ask(.refund, "s1", 2), site: "arcade-1") == answer(.refund, "s1", .refunded, 2), "once")
                // A turn that never started asks its debit back before the debit arrives.
                #expect(try await store.settle(ask(.refund, "s9", 1), site: "arcade-1") == answer(.refund, "s9", .nothingToRefund, 2))
                #expect(try await store.settle(ask(.debit, "s9", 1), site: "arcade-1") == answer(.debit, "s9", .refused, 2), "closed")
                #expect(try await store.append(entry(.adjust, -3, nil)) == .insufficient(balance: 2))
                let page = try await store.wallet(ann, limit: 10, offset: 0)
                #expect(page.balance == 2 && page.entries.map(\.kind) == [.refund, .debit, .debit, .topup], "\(page.entries.map(\.kind))")
                #expect(try await store.walletsOutOfBalance().isEmpty)
                // The database itself refuses a change to an entry, or a balance below 0.
                #expect(throws: (any Error).self) { try database.psql("UPDATE ledger SET credits = 100 WHERE kind = 'topup'") }
                #expect(throws: (any Error).self) { try database.psql("DELETE FROM ledger") }
                #expect(throws: (any Error).self) { try database.psql("UPDATE wallets SET balance = -1") }
            }
        }
    }
}
