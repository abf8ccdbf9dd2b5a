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
                func answer(_ kind: ChainWalletAsk.Kind, _ session: String, _ result: ChainWalletAnswer.Result, _ balance: Int64?) -> ChainWalletAnswer {
                    ChainWalletAnswer(kind: kind, session: session, result: result, balance: balance)
                }
                #expect(try await store.append(entry(.topup, 3, "order-1", digest: "d")) == .written(balance: 3))
                #expect(try await store.append(entry(.topup, 3, "order-1", digest: "d")) == .duplicate(balance: 3))
                #expect(try await store.append(entry(.topup, 9, "order-1", digest: "other")) == .conflict)
                #expect(try await store.settle(ask(.debit, "s1", 2), site: "arcade-1") == answer(.debit, "s1", .debited, 1))
                #expect(try await store.settle(ask(.debit, "s1", 2), site: "arcade-1") == answer(.debit, "s1", .debited, 1), "asked twice")
                #expect(try await store.settle(ask(.debit, "s1", 2), site: "arcade-2") == answer(.debit, "s1", .refused, nil), "another site's")
                #expect(try await store.settle(ask(.debit, "s1", 2, account: "bob"), site: "arcade-1") == answer(.debit, "s1", .refused, nil))
                // Two sites at once, each for a game of 1, with credit for one.
                async let first = store.settle(ask(.debit, "s2", 1), site: "arcade-1")
                async let second = store.settle(ask(.debit, "s3", 1), site: "arcade-2")
                let both = try await [first, second].compactMap { $0?.result }
                #expect(both.sorted { $0.rawValue < $1.rawValue } == [.debited, .insufficient], "\(both)")
                // A refund for another site's game, or another wallet: nothing paid.
                #expect(try await store.settle(ask(.refund, "s1", 2), site: "arcade-2") == answer(.refund, "s1", .nothingToRefund, nil))
                #expect(try await store.settle(ask(.refund, "s1", 5), site: "arcade-1") == answer(.refund, "s1", .refunded, 2), "what the debit took")
                #expect(try await store.settle(ask(.refund, "s1", 2), site: "arcade-1") == answer(.refund, "s1", .refunded, 2), "once")
                // A turn that never started asks its debit back before the debit arrives.
                #expect(try await store.settle(ask(.refund, "s9", 1), site: "arcade-1") == answer(.refund, "s9", .nothingToRefund, nil))
                #expect(try await store.settle(ask(.debit, "s9", 1), site: "arcade-1") == answer(.debit, "s9", .refused, nil), "closed")
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

        /// SPEC §9: a voucher debits once, for the site and session it was
        /// used for first; the same debit asked again with it is the same
        /// debit. SPEC §11: the sites' asks settled in a group of one
        /// transaction, each answered, one refused as data leaving the
        /// others written.
        @Test func aVoucherIsUsedOnceAndAGroupOfAsksIsSettledTogether() async throws {
            try await Self.withStore { store, database in
                func voucher(_ copy: String, _ session: String, site: String = "arcade-1") -> ChainVoucher {
                    ChainVoucher(
                        key: "ledger-key-0123456789", site: site, provider: "netease", account: "ann", session: session, copy: copy,
                        receivedMS: 1, price: 1)
                }
                func debit(_ session: String, _ voucher: ChainVoucher?, account: String = "ann") -> ChainWalletAsk {
                    ChainWalletAsk(
                        kind: .debit, session: session, provider: "netease", account: account, credits: 1, machine: "m1", voucher: voucher)
                }
                let ann = PlayerAddress(accid: "ann", provider: "netease")
                _ = try await store.append(LedgerEntry(wallet: ann, kind: .topup, credits: 5, key: "o-1", reason: nil, digest: "d", at: Date()))
                let v1 = voucher("copy-1", "s1")
                #expect(try await store.settle(debit("s1", v1), site: "arcade-1")?.result == .debited)
                #expect(try await store.settle(debit("s1", v1), site: "arcade-1")?.result == .debited, "the same debit asked again")
                let reused = try await store.settle(debit("s2", v1), site: "arcade-1")
                #expect(reused == ChainWalletAnswer(kind: .debit, session: "s2", result: .refused, balance: nil), "used for another game")
                #expect(try await store.settle(debit("s1", v1), site: "arcade-2")?.result == .refused, "another site")

                // A group: three wallets, one ask refused as data (PostgreSQL holds no NUL) between the others.
                let bob = PlayerAddress(accid: "bob", provider: "netease")
                _ = try await store.append(LedgerEntry(wallet: bob, kind: .topup, credits: 5, key: "o-2", reason: nil, digest: "d", at: Date()))
                let group: [RecorderStore.SiteAsk] = [
                    .init(site: "arcade-1", ask: debit("g1", voucher("copy-g1", "g1"))),
                    .init(site: "arcade-2", ask: debit("g2", nil, account: "bob")),
                    .init(site: "arcade-1", ask: debit("bad\u{0}", nil)),
                    .init(site: "arcade-2", ask: debit("g3", nil, account: "bob")),
                    .init(site: "arcade-1", ask: debit("g4", nil, account: "carol")),
                ]
                let answers = try await store.settle(group)
                #expect(answers.map { $0?.result } == [.debited, .debited, nil, .debited, .insufficient], "\(answers)")
                #expect(answers[3]?.balance == 3 && answers[0]?.balance == 3)
                #expect(try await store.walletsOutOfBalance().isEmpty)

                // Past a voucher's life, what it stopped is forgotten: a voucher that old is refused before it is looked up.
                #expect(try database.psql("SELECT count(*) FROM vouchers") == ["2"])
                try await store.forgetSpentVouchers(olderThan: .zero)
                #expect(try database.psql("SELECT count(*) FROM vouchers") == ["0"])
            }
        }

        /// SPEC §11: an operator's adjustment is keyed, once per wallet: the
        /// same key and body again is answered as the first was (its balance
        /// then), the same key with another body is a conflict, another
        /// wallet's key is its own; a refused adjustment keeps no key.
        @Test func anAdjustmentIsTakenOncePerKeyAndWallet() async throws {
            try await Self.withStore { store, _ in
                let ann = PlayerAddress(accid: "ann", provider: "netease")
                let bob = PlayerAddress(accid: "bob", provider: "netease")
                func adjust(_ wallet: PlayerAddress, _ credits: Int64, _ key: String, reason: String = "goodwill") -> LedgerEntry {
                    let digest = CreditsRoutes<GatewayRequestContext>.Adjustment(credits: credits, reason: reason, key: key).digest
                    return LedgerEntry(wallet: wallet, kind: .adjust, credits: credits, key: key, reason: reason, digest: digest, at: Date())
                }
                #expect(try await store.append(adjust(ann, -1, "k-0")) == .insufficient(balance: 0))
                #expect(try await store.append(adjust(ann, 5, "k-1")) == .written(balance: 5))
                _ = try await store.append(LedgerEntry(wallet: ann, kind: .topup, credits: 10, key: "o-1", reason: nil, digest: "d", at: Date()))
                #expect(try await store.append(adjust(ann, 5, "k-1")) == .duplicate(balance: 5), "the first answer again")
                #expect(try await store.append(adjust(ann, 6, "k-1")) == .conflict)
                #expect(try await store.append(adjust(ann, 5, "k-1", reason: "other")) == .conflict)
                #expect(try await store.append(adjust(bob, 5, "k-1")) == .written(balance: 5), "a key is its wallet's")
                #expect(try await store.append(adjust(ann, -1, "k-0")) == .written(balance: 14), "a refused adjustment kept no key")
                let page = try await store.wallet(ann, limit: 10, offset: 0)
                #expect(page.balance == 14 && page.entries.map(\.credits) == [-1, 10, 5])
                let nobody = try await store.wallet(PlayerAddress(accid: "nobody", provider: "netease"), limit: 10, offset: 0)
                #expect(nobody == WalletPage(balance: 0, entries: []))
            }
        }
    }
}
