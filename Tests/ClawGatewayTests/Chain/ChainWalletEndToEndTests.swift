import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension DatabaseSuites {
    /// SPEC §11 in a chain, for real: the three-node cluster, two sites whose
    /// games cost 2 credits, `claw-gateway record` keeping the chain's wallets
    /// in PostgreSQL 15. A player pays at either site from one balance; a
    /// short balance is refused; the recorder away costs a game, never
    /// money; a game its machine dropped is paid back through the site's outbox.
    @Suite(.serialized) struct ChainWalletEndToEndTests {
        static let secret = HeavySuites.CreditsEndToEndTests.secret

        @Test func aPlayerPaysAtEverySiteFromTheChainsWalletAndIsPaidBackForAFailedGame() async throws {
            let database = try PostgresServer.start()
            try await ChainHarness.with { chain in
                for site in chain.sites {
                    try site.setCredits(price: 2)
                    try await site.restart()
                }
                for site in chain.sites { try await site.waitReady() }
                for router in chain.routers { try await router.waitReady(for: chain.sites) }
                let recorder = try ChainHarness.RecorderNode(
                    urls: chain.cluster.mqttURLs, database: database, extra: "credits:\n  topup_secret: \(Self.secret)\n  max_topup: 100\n")
                try recorder.start()
                try await recorder.waitReady()

                func topUp(_ account: String, _ credits: Int, order: String) async throws {
                    let answer = try await HeavySuites.CreditsEndToEndTests.topUp(
                        base: recorder.base, #"{"provider":"netease","account":"\#(account)","credits":\#(credits),"order":"\#(order)"}"#)
                    #expect(answer.status == 200, "\(answer.body)")
                }
                func ledger(_ account: String) throws -> [String] {
                    try database.psql("SELECT kind || ' ' || credits || ' ' || coalesce(site, '-') FROM ledger WHERE account = '\(account)' ORDER BY seq")
                }
                /// What the fake NetEase API delivered to `account`, as JSON
                /// objects: players never send the credit fields, so the wire
                /// decoder does not read them.
                func told(_ account: String, _ command: Int) -> [[String: Any]] {
                    chain.netease.attachments(to: account).compactMap { text in
                        (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
                    }.filter { $0["command"] as? Int == command }
                }
                func balanceTold(_ account: String, _ balance: Int, reason: String) async throws {
                    try await eventually("\(account) told a balance of \(balance) after a \(reason)", timeout: .seconds(15)) {
                        told(account, 14).contains { $0["data"] as? String == String(balance) && $0["reason"] as? String == reason }
                    }
                }
                /// Joins `machine` and accepts its offer; returns the session.
                func play(_ account: String, on machine: String) async throws -> String {
                    let before = chain.replies(to: account).filter { $0.code == .turnOffer }.count
                    try await chain.copy(from: account, to: "claw_\(machine)", #"{"command":6,"data":"\#(account)"}"#)
                    var offer: [String: Any]?
                    try await eventually("an offer to \(account) on \(machine)") {
                        let offers = told(account, 11)
                        offer = offers.count > before ? offers.last : nil
                        return offer != nil
                    }
                    #expect(offer?["price"] as? Int == 2 && offer?["balance"] == nil, "the price; the balance is the chain's")
                    let session = offer?["data"] as? String ?? ""
                    try await chain.copy(from: account, to: "claw_\(machine)", #"{"command":12,"data":"\#(session)"}"#)
                    return session
                }

                // One wallet, two sites.
                try await topUp("ann", 5, order: "ann-1")
                let first = try await play("ann", on: "m1")
                try await balanceTold("ann", 3, reason: "debit")
                let second = try await play("ann", on: "m3")
                try await balanceTold("ann", 1, reason: "debit")
                #expect(try ledger("ann") == ["topup 5 -", "debit -2 arcade-1", "debit -2 arcade-2"])
                #expect(try database.psql("SELECT key FROM ledger WHERE kind = 'debit' AND account = 'ann' ORDER BY seq") == [first, second])
                // Both games play to their results (grabbed; the simulated PCs win), then one credit is short of a game.
                try await chain.copy(from: "ann", to: "claw_m1", #"{"command":2,"serial":1}"#)
                try await chain.copy(from: "ann", to: "claw_m3", #"{"command":2,"serial":1}"#)
                try await eventually("ann's games over", timeout: .seconds(20)) {
                    chain.replies(to: "ann").filter { $0.code == .result }.count == 2
                }
                _ = try await play("ann", on: "m1")
                try await eventually("ann refused for her balance") {
                    told("ann", 9).contains { $0["data"] as? String == "insufficient_credits" && $0["balance"] as? Int == 1 && $0["price"] as? Int == 2 }
                }
                #expect(try ledger("ann").count == 3, "nothing written for a refused game")

                // The recorder away: the accept is refused, the offer stands, nothing is taken.
                try await topUp("bob", 4, order: "bob-1")
                recorder.kill()
                let waited = try await play("bob", on: "m2")
                try await eventually("bob told the wallets did not answer", timeout: .seconds(10)) {
                    chain.replies(to: "bob").contains { $0.code == .error && $0.data == "gateway_unavailable" }
                }
                try recorder.start()
                try await recorder.waitReady()
                try await chain.copy(from: "bob", to: "claw_m2", #"{"command":12,"data":"\#(waited)"}"#)
                try await balanceTold("bob", 2, reason: "debit")
                #expect(try ledger("bob") == ["topup 4 -", "debit -2 arcade-1"], "debited once, though asked twice")

                // A game whose machine drops is paid back, from the site's outbox, once.
                try await chain.copy(from: "bob", to: "claw_m2", #"{"command":2,"serial":1}"#)
                try await eventually("bob's game over", timeout: .seconds(20)) { chain.replies(to: "bob").contains { $0.code == .result } }
                try await topUp("cy", 2, order: "cy-1")
                let dropped = try await play("cy", on: "m3")
                try await balanceTold("cy", 0, reason: "debit")
                chain.sites[1].killSimulator()
                try await balanceTold("cy", 2, reason: "refund")
                #expect(try ledger("cy") == ["topup 2 -", "debit -2 arcade-2", "refund 2 arcade-2"])
                #expect(try database.psql("SELECT key FROM ledger WHERE kind = 'refund'") == [dropped])
                #expect(try database.psql("SELECT count(*) FROM wallets w WHERE balance <> (SELECT sum(credits) FROM ledger l WHERE l.account = w.account AND l.provider = w.provider)") == ["0"])
                await recorder.stop()
            }
            database.stop()
        }

        /// SPEC §9, "No site spends another's money": a site's login (or a
        /// stolen one) asks the chain's ledger to debit another site's player
        /// without a voucher, with one made with a key of its own, with the
        /// routers' voucher of another site's accept, and with its own valid
        /// voucher for another session, and floods its wallet topic. Not a
        /// credit moves, no answer says a balance, and a player accepting at
        /// the other site meanwhile plays, debited once.
        @Test func aHostileSiteMovesNoCreditAndStallsNoOtherSite() async throws {
            let database = try PostgresServer.start()
            try await ChainHarness.with { chain in
                for site in chain.sites {
                    try site.setCredits(price: 2)
                    try await site.restart()
                }
                for site in chain.sites { try await site.waitReady() }
                for router in chain.routers { try await router.waitReady(for: chain.sites) }
                let recorder = try ChainHarness.RecorderNode(
                    urls: chain.cluster.mqttURLs, database: database, extra: "credits:\n  topup_secret: \(Self.secret)\n  max_topup: 100\n")
                try recorder.start()
                try await recorder.waitReady()
                let topUp = try await HeavySuites.CreditsEndToEndTests.topUp(
                    base: recorder.base, #"{"provider":"netease","account":"ann","credits":10,"order":"ann-1"}"#)
                #expect(topUp.status == 200, "\(topUp.body)")

                // arcade-2's own login, as a tool of the site may log in.
                let hostile = try await ChainTestClient(chain.cluster.mqttURLs, user: "site-arcade-2")
                try await hostile.subscribe(["claw/arcade-2/wallet/ack"])
                func debit(_ session: String, _ voucher: ChainVoucher?, account: String = "ann") -> [UInt8] {
                    ChainWalletAsk(
                        kind: .debit, session: session, provider: "netease", account: account, credits: 2, machine: "m3", voucher: voucher
                    ).payload
                }
                let now = ChainCopy.milliseconds(Date())
                let hostileAsks: [(String, [UInt8])] = [
                    ("no voucher", debit("stolen-1", nil)),
                    ("its own key", debit("stolen-2", ChainVoucher(
                        key: "a-key-of-the-sites-own-000", site: "arcade-2", provider: "netease", account: "ann", session: "stolen-2",
                        copy: "forged-2", receivedMS: now, price: 2))),
                    ("another site's voucher", debit("stolen-3", ChainVoucher(
                        key: ChainHarness.ledgerKey, site: "arcade-1", provider: "netease", account: "ann", session: "stolen-3",
                        copy: "replayed-3", receivedMS: now, price: 2))),
                    ("a voucher for another session", debit("stolen-4", ChainVoucher(
                        key: ChainHarness.ledgerKey, site: "arcade-2", provider: "netease", account: "ann", session: "stolen-0",
                        copy: "replayed-4", receivedMS: now, price: 2))),
                ]
                for (_, payload) in hostileAsks {
                    try hostile.client.publish("claw/arcade-2/wallet", payload: payload, qos: .atLeastOnce, retain: false)
                }
                try await eventually("every hostile ask answered", timeout: .seconds(20)) {
                    hostile.payloads(on: "claw/arcade-2/wallet/ack").count >= hostileAsks.count
                }
                for answer in hostile.payloads(on: "claw/arcade-2/wallet/ack") {
                    let decoded = ChainWalletAnswer.decode(Array(answer.utf8))
                    #expect(decoded?.result == .refused && decoded?.balance == nil, "refused, saying nothing of the wallet: \(answer)")
                }

                // The flood, then ann accepts at arcade-1 while it is settled.
                let flood = (0..<3000).map { debit("flood-\($0)", nil, account: "p\($0 % 50)") }
                for payload in flood { _ = try? hostile.client.publish("claw/arcade-2/wallet", payload: payload, qos: .atMostOnce, retain: false) }
                try await chain.copy(from: "ann", to: "claw_m1", #"{"command":6,"data":"ann"}"#)
                var session: String?
                try await eventually("an offer to ann") {
                    session = chain.replies(to: "ann").last { $0.code == .turnOffer }?.data
                    return session != nil
                }
                try await chain.copy(from: "ann", to: "claw_m1", #"{"command":12,"data":"\#(session ?? "")"}"#)
                try await eventually("ann's game started, debited", timeout: .seconds(15)) {
                    chain.replies(to: "ann").contains { $0.code == .queuePosition && $0.data == "0" }
                }
                #expect(!chain.replies(to: "ann").contains { $0.code == .error }, "no refusal: the flood held her debit back less than its timeout")
                #expect(
                    try database.psql("SELECT kind || ' ' || credits || ' ' || coalesce(site, '-') FROM ledger WHERE account = 'ann' ORDER BY seq")
                        == ["topup 10 -", "debit -2 arcade-1"])
                #expect(try database.psql("SELECT count(*) FROM ledger WHERE kind = 'debit' AND site = 'arcade-2'") == ["0"])
                #expect(await recorder.metric(#"claw_recorder_wallet_asks_total{result="debit_voucher_refused"}"#) ?? 0 >= 3)
                // The flood's refusals beyond the site's budget were not sent: they would have queued ahead of ann's answer.
                #expect(await recorder.metric(#"claw_recorder_wallet_asks_total{result="debit_voucher_refused_unsent"}"#) ?? 0 >= 500)
                #expect(try database.psql("SELECT count(*) FROM wallets w WHERE balance <> (SELECT sum(credits) FROM ledger l WHERE l.account = w.account AND l.provider = w.provider)") == ["0"])
                await recorder.stop()
            }
            database.stop()
        }
    }
}
