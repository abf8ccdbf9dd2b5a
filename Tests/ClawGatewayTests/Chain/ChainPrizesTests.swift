import Clocks
import Foundation
import Logging
import Protocol
import Testing

@testable import ClawGateway

extension DatabaseSuites {
    /// The chain's prizes (SPEC §15): they travel with the won games'
    /// records into PostgreSQL; the recorder serves a player's prizes from
    /// every site in one list, ships centrally, credits the chain's wallet
    /// for an exchange, and tells each change to the player through the
    /// site whose game made the prize.
    @Suite struct ChainPrizesTests {
        typealias Tests = RecorderTests
        static let admin = [("Authorization", "Bearer \(RecorderTests.adminToken)"), ("Content-Type", "application/json")]

        /// A won game of `player` at `site`, with its prize.
        static func won(_ site: String, _ seq: Int64, player: String = "alice", prize id: String, exchange: Int64 = 5, name: String = "Plush")
            -> ChainRecord
        {
            var record = RecorderTests.record(site, seq, player: player, outcome: .won)
            record.game.prize = WonPrize(
                id: id, prize: "plush", name: name, cost: 3, exchange: exchange, wonAt: record.game.endedAt ?? "", oversold: false)
            return record
        }

        static func post(_ recorder: RecorderTests.RecorderProcess, _ path: String, _ json: String) async throws -> HTTP.Answer {
            try await HTTP.request(.POST, "\(recorder.base)\(path)", headers: Self.admin, body: Array(json.utf8))
        }

        @Test func prizesOfEverySiteAreChosenForCentrallyAndToldThroughTheirSite() async throws {
            try await RecorderTests.with(sites: ["arcade-1", "arcade-2"]) { recorder, sites, database, _ in
                let (one, two) = (sites[0], sites[1])
                try one.send(Self.won("arcade-1", 1, prize: "p-one"))
                try two.send(Self.won("arcade-2", 1, prize: "p-two", exchange: 0))
                try two.send(Self.won("arcade-2", 2, player: "bob", prize: "p-bob"))
                _ = try await one.ack(after: 0)
                try await eventually("arcade-2's records") { two.acks.items.last == 2 }

                // One list from every site, newest first, with each prize's site.
                let list = try await recorder.read("/v1/players/netease/alice/prizes")
                let prizes = list.json["prizes"] as? [[String: Any]] ?? []
                #expect(Set(prizes.compactMap { $0["id"] as? String }) == ["p-one", "p-two"], "\(list.body)")
                #expect(Set(prizes.compactMap { $0["site"] as? String }) == ["arcade-1", "arcade-2"])
                #expect(prizes.allSatisfy { $0["state"] as? String == "held" })
                #expect(try await recorder.read("/v1/players/netease/alice/prizes", token: nil).status == 401)

                // An exchange credits the chain's wallet, once, even asked twice at once.
                let order = #"{"provider":"netease","account":"alice","credits":10,"order":"chain-prize-1"}"#
                #expect(try await HeavySuites.CreditsEndToEndTests.topUp(base: recorder.base, order).status == 200)
                #expect(try await Self.post(recorder, "/v1/players/netease/bob/prizes/exchange", #"{"prize":"p-one"}"#).status == 404)
                #expect(try await Self.post(recorder, "/v1/players/netease/alice/prizes/exchange", #"{"prize":"p-bob"}"#).status == 404)
                let notOffered = try await Self.post(recorder, "/v1/players/netease/alice/prizes/exchange", #"{"prize":"p-two"}"#)
                #expect(notOffered.status == 409 && notOffered.json["code"] as? String == "not_exchangeable", "\(notOffered.body)")
                let base = recorder.base
                let body = Array(#"{"prize":"p-one"}"#.utf8)
                async let first = HTTP.request(.POST, "\(base)/v1/players/netease/alice/prizes/exchange", headers: Self.admin, body: body)
                async let second = HTTP.request(.POST, "\(base)/v1/players/netease/alice/prizes/exchange", headers: Self.admin, body: body)
                let answers = try await [first, second]
                #expect(answers.filter { $0.status == 200 }.count == 1, "\(answers.map(\.body))")
                #expect(answers.contains { $0.status == 409 && $0.json["code"] as? String == "prize_exchanged" }, "\(answers.map(\.body))")
                #expect(answers.first { $0.status == 200 }?.json["balance"] as? Int == 15)
                #expect(try database.psql("SELECT count(*), min(site), min(credits) FROM ledger WHERE kind = 'exchange' AND key = 'p-one'") == ["1|arcade-1|5"])
                #expect(try database.psql("SELECT balance FROM wallets WHERE account = 'alice'") == ["15"])
                try await eventually("arcade-1 told to tell alice") {
                    one.told.items.contains { $0.prize == "p-one" && $0.state == "exchanged" && $0.credits == 5 && $0.balance == 15 }
                }
                #expect(two.told.items.isEmpty, "arcade-2's game made no prize of these")

                // The record again (a resend): the prize keeps its state.
                try one.send(Self.won("arcade-1", 1, prize: "p-one"))
                _ = try await one.ack(after: 1)
                #expect(try database.psql("SELECT state FROM prizes WHERE id = 'p-one'") == ["exchanged"])

                // Shipping, centrally: the parcel of arcade-2's prize; told through arcade-2.
                let shipped = try await Self.post(
                    recorder, "/v1/players/netease/alice/prizes/ship",
                    #"{"prizes":["p-two"],"address":{"name":"Alice","phone":"1","address":"1 Claw Street"}}"#)
                let parcel = try #require(shipped.json["id"] as? String, "\(shipped.body)")
                #expect(try await Self.post(
                    recorder, "/v1/players/netease/alice/prizes/ship",
                    #"{"prizes":["p-one"],"address":{"name":"Alice","phone":"1","address":"1 Claw Street"}}"#
                ).json["code"] as? String == "prize_exchanged")
                let toShip = try await HTTP.request(.GET, "\(recorder.base)/v1/parcels?state=to_ship", headers: Self.admin)
                #expect((toShip.json["parcels"] as? [[String: Any]])?.first?["prizes"] as? [String] == ["p-two"], "\(toShip.body)")
                #expect(try await recorder.read("/v1/parcels?state=to_ship").status == 401, "the read token sees no address")
                #expect(try await Self.post(recorder, "/v1/parcels/\(parcel)/delivered", "").json["code"] as? String == "parcel_to_ship")
                #expect(try await Self.post(recorder, "/v1/parcels/\(parcel)/shipped", #"{"carrier":"SF","tracking":"SF9"}"#).status == 200)
                #expect(try await Self.post(recorder, "/v1/parcels/\(parcel)/delivered", "").status == 200)
                try await eventually("arcade-2 told each step") {
                    two.told.items.filter { $0.prize == "p-two" }.map(\.state) == ["to_ship", "shipped", "delivered"]
                }
                #expect(two.told.items.last?.tracking == "SF9")
                #expect(!recorder.log.contains("Claw Street"), "an address is never logged")
                #expect(try database.psql("SELECT state FROM prizes WHERE id = 'p-two'") == ["delivered"])
            }
        }

        /// Every field of a prize has a limit, like the records'; a prize
        /// another site's game made is no one else's: set aside, the records
        /// behind it go on.
        @Test func aRecordsPrizeTheDatabaseCannotHoldIsSetAside() async throws {
            try await RecorderTests.with(sites: ["arcade-1", "arcade-2"]) { recorder, sites, database, _ in
                let site = sites[0]
                try site.send(Self.won("arcade-1", 1, prize: "p-a"))
                try site.send(Self.won("arcade-1", 2, prize: "p-b", name: String(repeating: "n", count: ValidRecord.prizeLimits.name + 1)))
                var lost = RecorderTests.record("arcade-1", 3)
                lost.game.prize = WonPrize(id: "p-c", prize: "plush", name: "Plush", cost: 1, exchange: 1, wonAt: lost.game.endedAt ?? "", oversold: false)
                try site.send(lost)
                try site.send(Self.won("arcade-1", 4, prize: "p-d"))
                try await eventually("arcade-1's records") { site.acks.items.last == 4 }
                try sites[1].send(Self.won("arcade-2", 1, prize: "p-a"))
                try await eventually("arcade-2's record") { sites[1].acks.items.last == 1 }
                #expect(try database.psql("SELECT id || '@' || site FROM prizes ORDER BY id") == ["p-a@arcade-1", "p-d@arcade-1"])
                #expect(try database.psql("SELECT site || ':' || seq FROM set_aside ORDER BY site, seq") == ["arcade-1:2", "arcade-1:3", "arcade-2:1"])
                #expect(try await recorder.records("set_aside") == 3)
            }
        }

        /// A delivered parcel's address is forgotten `forget_address` after
        /// its delivery, as the recorder's clock has it.
        @Test func aDeliveredParcelsAddressIsForgottenOnTime() async throws {
            try await RecorderStoreTests.withStore { store, database in
                let clock = TestClock<Duration>()
                let prizes = ChainPrizes(
                    store: store, settings: PrizeSettings(forgetAddress: .seconds(3600)), creditsOn: false,
                    clock: .following(clock, from: Date()), logger: Logger(label: "test"), notify: { _, _ in })
                _ = try await store.write(try ValidRecord.check(Self.won("arcade-1", 1, prize: "p-f")).get())
                let alice = PlayerAddress(accid: "alice", provider: "netease")
                let parcel = try await prizes.ship(["p-f"], of: alice, to: ShippingAddress(name: "A", phone: "1", address: "1 Claw Street"), audit: nil)
                _ = try await prizes.shipped(parcel.id, carrier: "SF", tracking: "SF1", audit: .byTest(.shipped))
                _ = try await prizes.delivered(parcel.id, audit: .byTest(.delivered))
                await clock.advance(by: .seconds(3599))
                #expect(await prizes.forgetAddresses() == 0)
                #expect(try database.psql("SELECT address FROM parcels") == ["1 Claw Street"])
                await clock.advance(by: .seconds(2))
                #expect(await prizes.forgetAddresses() == 1)
                #expect(try database.psql("SELECT coalesce(address, '-') || coalesce(phone, '-') || tracking FROM parcels") == ["--SF1"])
                await #expect(throws: PrizeRefusal.parcelState(parcel.id, .delivered)) { try await prizes.delivered(parcel.id, audit: .byTest(.delivered)) }

                // The recorder's own trail (SPEC §16): each operator's change with its entry, none for a refusal or a
                // player's own choice; the database refuses to change or delete one.
                let trail = try await store.audit(AuditQuery())
                #expect(trail.map(\.action) == [.delivered, .shipped], "\(trail)")
                #expect(trail.allSatisfy { $0.target == "machine/m1" && $0.operatorName == "tester" })
                #expect(trail.first?.before == .object(["state": .string("shipped"), "carrier": .string("SF"), "tracking": .string("SF1"), "prizes": .array([.string("p-f")])]))
                #expect(try await store.audit(AuditQuery(action: .shipped)).count == 1)
                #expect(throws: (any Error).self) { try database.psql("UPDATE audit SET operator = 'nobody'") }
                #expect(throws: (any Error).self) { try database.psql("DELETE FROM audit") }
                #expect(throws: (any Error).self) { try database.psql("TRUNCATE audit") }
                let wallets = ChainWallets(store: store, logger: Logger(label: "test"))
                let adjustment = LedgerEntry(wallet: alice, kind: .adjust, credits: 5, key: "ops-1", reason: "goodwill", digest: "d1", at: Date())
                #expect(await wallets.adjust(adjustment, audit: .byTest(.adjust, target: "player/netease/alice", reason: "goodwill")) == .written(balance: 5))
                #expect(await wallets.adjust(adjustment, audit: .byTest(.adjust, target: "player/netease/alice", reason: "goodwill")) == .duplicate(balance: 5))
                let adjusts = try await store.audit(AuditQuery(target: "player/netease/alice"))
                #expect(adjusts.count == 1 && adjusts.first?.after == .object(["balance": .number(5)]), "a duplicate is no second entry")
            }
        }
    }
}

extension ChainSuites {
    /// A site of a chain (SPEC §15) on the three-node cluster with its login
    /// service as shipped: a won game's record carries its prize to the
    /// recorder, and what the recorder says of the prize on the site's
    /// `tell` reaches the player through the site's IM.
    @Suite struct ChainSitePrizesTests {
        @Test func aWonGamesRecordCarriesItsPrizeAndTheRecordersWordReachesThePlayer() async throws {
            let cluster = try await NATSCluster.start()
            let site = try await E2ESite(
                extra: """
                    chain:
                      site: arcade-1
                      bus: [\(cluster.mqttURLs.joined(separator: ", "))]
                      username: site-arcade-1
                      password: \(NATSCluster.passwords["site-arcade-1"] ?? "")
                      resend_interval: 2s
                    prizes: {}
                    """,
                machineExtra: #"prize: { id: plush, name: "Plush 20 cm", cost: 3 }"#)
            do {
                let recorder = try await ChainTestClient(cluster.mqttURLs, user: "recorder")
                #expect(try await recorder.subscribe(["claw/+/records"]).refused.isEmpty)
                try await eventually("the site ready with its chain link, its tell subscribed", timeout: .seconds(30)) {
                    (try? await HTTP.get("\(site.base)/readyz"))?.status == 200
                }
                try await RecordShippingTests.play(site, "alice")
                try await eventually("alice's game shipped") { !RecordShippingTests.records(recorder).isEmpty }
                let record = try #require(RecordShippingTests.records(recorder).first)
                let prize = try #require(record.game.prize, "the won game's record carries its prize")
                #expect(prize.id == PrizeRow.id(ofGame: record.game.id) && prize.prize == "plush" && prize.name == "Plush 20 cm")
                #expect(prize.cost == 3 && prize.exchange == 0 && !prize.oversold && prize.wonAt == record.game.endedAt)
                // The site serves no choice of its own in a chain: the recorder does.
                #expect(try await HTTP.get("\(site.base)/v1/players/netease/alice/prizes").status == 404)

                let notice = ChainPrizeNotice(
                    provider: "netease", account: "alice", prize: prize.id, name: prize.name, state: "shipped", tracking: "SF777")
                try await recorder.publish("claw/arcade-1/tell", String(decoding: notice.payload, as: UTF8.self))
                try await eventually("alice told her prize shipped") {
                    site.netease.attachments(to: "alice").contains {
                        $0.contains(#""command":15"#) && $0.contains(#""state":"shipped""#) && $0.contains(#""tracking":"SF777""#)
                    }
                }
                await recorder.stop()
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }
    }
}
