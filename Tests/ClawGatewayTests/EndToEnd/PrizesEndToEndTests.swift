import Foundation
import GRDB
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// Prizes (SPEC §15) on a real `claw-gateway run`, mosquitto and
    /// `claw-gateway simulate` (every grab wins): the stock set and taken,
    /// out of stock and back, a player's prizes, an exchange asked twice at
    /// once, a parcel shipped and delivered, hostile inputs refused with
    /// nothing changed, and what the file holds after a kill -9.
    @Suite(.serialized) struct PrizesEndToEndTests {
        static let token = "prizes-admin-token-0123"
        /// Credits need a read token (SPEC §11): every read below sends it.
        static let readToken = "prizes-read-token-0123"
        static let admin = [("Authorization", "Bearer \(token)"), ("Content-Type", "application/json")]
        static let address = #"{"name":"Alice Li","phone":"+86 138 0000 0000","address":"1 Claw Street, Shanghai"}"#

        static func post(_ site: E2ESite, _ path: String, _ json: String, headers: [(String, String)] = admin) async throws -> HTTP.Answer {
            try await HTTP.request(.POST, "\(site.base)\(path)", headers: headers, body: Array(json.utf8))
        }

        /// The 15s (and other JSON messages) the fake NetEase API delivered to `player`.
        static func told(_ site: E2ESite, _ player: String, command: Int = 15) -> [[String: Any]] {
            site.netease.attachments(to: player).compactMap { text in
                (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
            }.filter { $0["command"] as? Int == command }
        }

        /// `player` joins `machine`, accepts its offer and grabs: the
        /// simulated PC wins it. Returns the prize's id once the player was told it.
        static func win(_ site: E2ESite, _ player: String, on machine: String = "m1") async throws -> String {
            let offers = site.told(player).filter { $0.code == .turnOffer }.count
            try await site.copy(from: player, to: "claw_\(machine)", #"{"command":6}"#)
            var session = ""
            try await eventually("a new turn offer to \(player)") {
                let all = site.told(player).filter { $0.code == .turnOffer }
                session = all.last?.data ?? ""
                return all.count > offers
            }
            try await site.copy(from: player, to: "claw_\(machine)", #"{"command":12,"data":"\#(session)"}"#)
            try await site.copy(from: player, to: "claw_\(machine)", #"{"command":2,"serial":\#(Int.random(in: 1...1_000_000))}"#)
            let id = PrizeRow.id(ofGame: session)
            try await eventually("\(player) to be told the prize of \(session)") {
                told(site, player).contains { $0["data"] as? String == id && $0["state"] as? String == "held" }
            }
            return id
        }

        static func prizes(_ site: E2ESite, _ player: String, token: String = readToken) async throws -> [[String: Any]] {
            let answer = try await HTTP.get("\(site.base)/v1/players/netease/\(player)/prizes", bearer: token)
            #expect(answer.status == 200, "\(answer.body)")
            return answer.json["prizes"] as? [[String: Any]] ?? []
        }

        @Test func winsArePrizesOwedFromTheStockToThePlayersDoor() async throws {
            let site = try await E2ESite(
                adminToken: Self.token, readToken: Self.readToken,
                extra: """
                    credits: { price: 1, topup_secret: \(CreditsEndToEndTests.secret), max_topup: 100 }
                    prizes: { low_at: 1, forget_address: 30d }
                    """,
                machineExtra: #"prize: { id: plush, name: "Plush 20 cm", cost: 4, exchange: 5 }"#)
            do {
                try await run(site)
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }

        private func run(_ site: E2ESite) async throws {
            for player in ["alice", "bob", "carol"] {
                let order = #"{"provider":"netease","account":"\#(player)","credits":20,"order":"pay-\#(player)"}"#
                #expect(try await CreditsEndToEndTests.topUp(site, order).status == 200)
            }

            // The stock: hostile values refused, nothing changed.
            let stock = "/v1/machines/m1/stock"
            #expect(try await Self.post(site, stock, #"{"set":2,"reason":"x"}"#, headers: []).status == 401)
            for (bad, field) in [
                (#"{"set":-1,"reason":"x"}"#, "set"), (#"{"set":1000000000000,"reason":"x"}"#, "set"), (#"{"add":0,"reason":"x"}"#, "add"),
                (#"{"set":2}"#, "reason"), (#"{"set":2,"reason":""}"#, "reason"), (#"{"set":2.5,"reason":"x"}"#, "set"),
                (#"{"set":2,"add":1,"reason":"x"}"#, "add"), (#"{"reason":"x"}"#, "set or add"), (#"{"sett":2,"reason":"x"}"#, "sett"),
                ("[]", "Send a JSON object"),
            ] {
                let answer = try await Self.post(site, stock, bad)
                #expect(answer.status == 422 && (answer.json["message"] as? String ?? "").hasPrefix(field), "\(bad): \(answer.status) \(answer.body)")
            }
            let notSet = try await Self.post(site, stock, #"{"add":3,"reason":"x"}"#)
            #expect(notSet.status == 409 && notSet.json["code"] as? String == "stock_not_set", "\(notSet.body)")
            #expect(try await Self.post(site, "/v1/machines/m9/stock", #"{"set":2,"reason":"x"}"#).status == 404)
            let uncounted = try await HTTP.get("\(site.base)\(stock)", bearer: Self.readToken)
            #expect(uncounted.json["machine"] as? String == "m1" && uncounted.json["stock"] is NSNull && uncounted.json["low_at"] as? Int == 1)
            let kind = uncounted.json["prize"] as? [String: Any]
            #expect(kind?["id"] as? String == "plush" && kind?["name"] as? String == "Plush 20 cm" && kind?["exchange"] as? Int == 5, "\(uncounted.body)")
            let set = try await Self.post(site, stock, #"{"set":2,"reason":"opening, 2 plushes"}"#)
            #expect(set.status == 200 && set.json["stock"] as? Int == 2, "\(set.body)")

            // Wins take the stock down: low at 1, out at 0.
            let events = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/events"])
            let alices = try await Self.win(site, "alice")
            try await events.waitFor("claw/m1/events") { $0.contains(#""type":"low_stock""#) && $0.contains(#""stock":1"#) }
            let bobs = try await Self.win(site, "bob")
            try await events.waitFor("claw/m1/events") { $0.contains(#""type":"out_of_stock""#) }
            try await eventually("m1 out of stock") {
                try await HTTP.get("\(site.base)/v1/machines/m1", bearer: Self.readToken).json["state"] as? String == "out_of_stock"
            }
            let metrics = try PrometheusText(try await HTTP.get("\(site.base)/metrics", bearer: Self.readToken).body)
            #expect(metrics.samples[#"claw_machine_stock{machine="m1"}"#] == 0)
            #expect(metrics.samples[#"claw_machine_stock{machine="m2"}"#] == nil, "m2's stock is not counted")
            // Carol waits: no turn while out of stock; a restock offers it.
            try await site.copy(from: "carol", #"{"command":6}"#)
            try await eventually("carol queued") {
                (try await HTTP.get("\(site.base)/v1/machines/m1", bearer: Self.readToken).json["waiting"] as? [[String: Any]])?.count == 1
            }
            #expect(!site.told("carol").contains { $0.code == .turnOffer })
            #expect(try await Self.post(site, stock, #"{"add":-1,"reason":"x"}"#).json["code"] as? String == "stock_out_of_range")
            #expect(try await Self.post(site, stock, #"{"add":3,"reason":"delivery"}"#).json["stock"] as? Int == 3)
            let carols = try await site.offeredSession(to: "carol")
            try await events.waitFor("claw/m1/events") { $0.contains(#""type":"restocked""#) && $0.contains(#""change":3"#) }
            await events.stop()
            try await site.copy(from: "carol", #"{"command":12,"data":"\#(carols)"}"#)
            try await site.copy(from: "carol", #"{"command":2,"serial":7}"#)
            try await eventually("carol's prize") { Self.told(site, "carol").contains { $0["state"] as? String == "held" } }

            // A player's prizes; another's is no one's business.
            let list = try await Self.prizes(site, "alice")
            #expect(list.count == 1 && list.first?["id"] as? String == alices && list.first?["state"] as? String == "held", "\(list)")
            #expect(list.first?["parcel"] is NSNull && list.first?["exchange"] as? Int == 5 && list.first?["machine"] as? String == "m1")
            let exchange = "/v1/players/netease/alice/prizes/exchange"
            let ship = "/v1/players/netease/alice/prizes/ship"
            let someoneElses = try await Self.post(site, exchange, #"{"prize":"\#(bobs)"}"#)
            #expect(someoneElses.status == 404 && someoneElses.json["code"] as? String == "unknown_prize", "\(someoneElses.body)")
            #expect(try await Self.post(site, exchange, #"{"prize":"p-nothing"}"#).status == 404)
            #expect(try await Self.post(site, exchange, #"{"prize":"\#(alices)"}"#, headers: []).status == 401)

            // Exchanged twice at once, from two connections: credited once.
            let base = site.base
            let body = Array(#"{"prize":"\#(alices)"}"#.utf8)
            async let first = HTTP.request(.POST, "\(base)\(exchange)", headers: Self.admin, body: body)
            async let second = HTTP.request(.POST, "\(base)\(exchange)", headers: Self.admin, body: body)
            let answers = try await [first, second]
            #expect(answers.filter { $0.status == 200 }.count == 1, "\(answers.map(\.body))")
            let refused = try #require(answers.first { $0.status != 200 })
            #expect(refused.status == 409 && refused.json["code"] as? String == "prize_exchanged", "\(refused.body)")
            let taken = try #require(answers.first { $0.status == 200 })
            #expect(taken.json["credits"] as? Int == 5 && taken.json["balance"] as? Int == 24, "20 - 1 + 5: \(taken.body)")
            try await eventually("alice told the exchange") {
                Self.told(site, "alice", command: 14).contains { $0["reason"] as? String == "exchange" && $0["data"] as? String == "24" }
                    && Self.told(site, "alice").contains { $0["data"] as? String == alices && $0["state"] as? String == "exchanged" }
            }
            let wallet = try await CreditsEndToEndTests.wallet(site, "alice")
            let entries = wallet["entries"] as? [[String: Any]] ?? []
            #expect(entries.filter { $0["kind"] as? String == "exchange" }.count == 1 && wallet["balance"] as? Int == 24, "\(entries)")

            // Shipping: the address checked field by field; nothing changes on a refusal.
            let bobShip = "/v1/players/netease/bob/prizes/ship"
            for (bad, field) in [
                (#"{"prizes":["\#(bobs)"],"address":{"name":"Bob","address":"2 Claw Street"}}"#, "address.phone"),
                (#"{"prizes":["\#(bobs)"],"address":{"name":"","phone":"1","address":"2 Claw Street"}}"#, "address.name"),
                (#"{"prizes":["\#(bobs)"],"address":{"name":"\#(String(repeating: "n", count: 65))","phone":"1","address":"x"}}"#, "address.name"),
                (#"{"prizes":["\#(bobs)"],"address":{"name":"Bob","phone":"\#(String(repeating: "1", count: 33))","address":"x"}}"#, "address.phone"),
                (#"{"prizes":["\#(bobs)"],"address":{"name":"Bob","phone":"1","address":"\#(String(repeating: "街", count: 171))"}}"#, "address.address"),
                (#"{"prizes":["\#(bobs)"],"address":{"name":"Bob","phone":"1","address":"x\u0000y"}}"#, "address.address"),
                (#"{"prizes":[],"address":\#(Self.address)}"#, "prizes"),
                (#"{"prizes":["\#(bobs)","\#(bobs)"],"address":\#(Self.address)}"#, "prizes"),
                (#"{"address":\#(Self.address)}"#, "prizes"),
                (#"{"prizes":["\#(bobs)"]}"#, "address"),
            ] {
                let answer = try await Self.post(site, bobShip, bad)
                #expect(answer.status == 422 && (answer.json["message"] as? String ?? "").hasPrefix(field), "\(bad): \(answer.body)")
            }
            // An address of 100 KB: over every body's limit.
            let huge = #"{"prizes":["\#(bobs)"],"address":{"name":"Bob","phone":"1","address":"\#(String(repeating: "x", count: 100_000))"}}"#
            #expect(try await Self.post(site, bobShip, huge).status == 413)
            #expect(try await Self.prizes(site, "bob").first?["state"] as? String == "held", "nothing changed")
            let exchangedShip = try await Self.post(site, ship, #"{"prizes":["\#(alices)"],"address":\#(Self.address)}"#)
            #expect(exchangedShip.status == 409 && exchangedShip.json["code"] as? String == "prize_exchanged", "\(exchangedShip.body)")
            #expect(try await Self.post(site, ship, #"{"prizes":["\#(bobs)"],"address":\#(Self.address)}"#).status == 404, "bob's, asked as alice's")

            let parcel = try await Self.post(site, bobShip, #"{"prizes":["\#(bobs)"],"address":\#(Self.address)}"#)
            #expect(parcel.status == 200 && parcel.json["state"] as? String == "to_ship", "\(parcel.body)")
            let parcelID = try #require(parcel.json["id"] as? String)
            let again = try await Self.post(site, bobShip, #"{"prizes":["\#(bobs)"],"address":\#(Self.address)}"#)
            #expect(again.status == 409 && again.json["code"] as? String == "prize_to_ship", "never in two parcels: \(again.body)")
            let bobExchange = try await Self.post(site, "/v1/players/netease/bob/prizes/exchange", #"{"prize":"\#(bobs)"}"#)
            #expect(bobExchange.status == 409 && bobExchange.json["code"] as? String == "prize_to_ship", "never shipped and exchanged")

            // The parcels, with their address, to the admin token only.
            #expect(try await HTTP.get("\(site.base)/v1/parcels?state=to_ship").status == 401)
            #expect(try await HTTP.request(.GET, "\(site.base)/v1/parcels?state=lost", headers: Self.admin).status == 400)
            let toShip = try await HTTP.request(.GET, "\(site.base)/v1/parcels?state=to_ship", headers: Self.admin)
            let parcels = toShip.json["parcels"] as? [[String: Any]] ?? []
            #expect(parcels.count == 1 && parcels.first?["id"] as? String == parcelID && parcels.first?["prizes"] as? [String] == [bobs])
            #expect((parcels.first?["address"] as? [String: Any])?["phone"] as? String == "+86 138 0000 0000", "\(toShip.body)")
            let bobsList = try await HTTP.get("\(site.base)/v1/players/netease/bob/prizes", bearer: Self.readToken)
            #expect(!bobsList.body.contains("Claw Street") && !bobsList.body.contains("138 0000"), "a player's list shows no address")

            let shipped = "/v1/parcels/\(parcelID)/shipped"
            let delivered = "/v1/parcels/\(parcelID)/delivered"
            #expect(try await Self.post(site, shipped, #"{"carrier":"SF"}"#).json["message"] as? String ?? "" == "tracking: required.")
            #expect(try await Self.post(site, delivered, "").json["code"] as? String == "parcel_to_ship", "only forward, and in order")
            #expect(try await Self.post(site, "/v1/parcels/parcel-none/shipped", #"{"carrier":"SF","tracking":"1"}"#).status == 404)
            let sent = try await Self.post(site, shipped, #"{"carrier":"SF Express","tracking":"SF1234567890"}"#)
            #expect(sent.status == 200 && sent.json["state"] as? String == "shipped", "\(sent.body)")
            #expect(try await Self.post(site, shipped, #"{"carrier":"SF Express","tracking":"SF1234567890"}"#).json["code"] as? String == "parcel_shipped")
            try await eventually("bob told his prize shipped, with its tracking") {
                Self.told(site, "bob").contains { $0["state"] as? String == "shipped" && $0["tracking"] as? String == "SF1234567890" }
            }
            #expect(try await Self.post(site, delivered, "").json["state"] as? String == "delivered")
            #expect(try await Self.post(site, delivered, "").json["code"] as? String == "parcel_delivered")
            try await eventually("bob told it delivered") { Self.told(site, "bob").contains { $0["state"] as? String == "delivered" } }
            let final = try await Self.prizes(site, "bob")
            #expect(final.first?["state"] as? String == "delivered")
            #expect((final.first?["parcel"] as? [String: Any])?["tracking"] as? String == "SF1234567890")
            #expect(Self.told(site, "bob").map { $0["state"] as? String } == ["held", "to_ship", "shipped", "delivered"])
            // Personal data is never logged.
            #expect(!site.site.logText.contains("Claw Street") && !site.site.logText.contains("138 0000"))

            // Killed: what the file holds is what was answered.
            site.killGateway()
            let store = try GameStore(path: site.site.database.path)
            let (kept, won, made, states, exchanges) = try await store.pool.read { db in
                (
                    try Int64.fetchOne(db, sql: "SELECT stock FROM machine_stock WHERE machine = 'm1'"),
                    try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM games WHERE outcome = 'won'"),
                    try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM prizes"),
                    try String.fetchAll(db, sql: "SELECT state FROM prizes WHERE id IN (?, ?) ORDER BY won_at", arguments: [alices, bobs]),
                    try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ledger WHERE kind = 'exchange'")
                )
            }
            #expect(kept == 2, "3 restocked, carol's game won")
            #expect(won == made && won == 3)
            #expect(states == ["exchanged", "delivered"])
            #expect(exchanges == 1)
            #expect(try store.walletsOutOfBalance().isEmpty)
            try store.close()
            try site.startGateway()
            try await site.waitReady()
            #expect(try await HTTP.get("\(site.base)\(stock)", bearer: Self.readToken).json["stock"] as? Int == 2)
        }
    }
}
