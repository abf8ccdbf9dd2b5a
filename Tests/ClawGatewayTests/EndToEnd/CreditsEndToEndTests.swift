import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// Credits (SPEC §11) on a real `claw-gateway run` and mosquitto: signed
    /// top-ups refused and taken, games paid and paid back, the wallet read,
    /// an operator's adjustment, and the ledger checked in the file after a
    /// kill -9. The PCs are played by hand.
    @Suite(.serialized) struct CreditsEndToEndTests {
        static let token = "credits-admin-token"
        static let admin = [("Authorization", "Bearer \(token)")]
        static let secret = "credits-topup-secret-0123"
        static let readToken = "credits-read-token-0123"

        static func topUp(_ site: E2ESite, _ json: String, timestamp: Int64 = Int64(Date().timeIntervalSince1970), secret: String = secret)
            async throws -> HTTP.Answer
        {
            try await topUp(base: site.base, json, timestamp: timestamp, secret: secret)
        }

        /// A top-up signed as the payment service signs it, to the gateway or recorder at `base`.
        static func topUp(base: String, _ json: String, timestamp: Int64 = Int64(Date().timeIntervalSince1970), secret: String = secret)
            async throws -> HTTP.Answer
        {
            let body = Array(json.utf8)
            let stamp = String(timestamp)
            return try await HTTP.request(
                .POST, "\(base)/v1/credits/topups",
                headers: [
                    ("Content-Type", "application/json"), (GenericEnvelope.timestampHeader, stamp),
                    (GenericEnvelope.signatureHeader, Signatures.topupSignature(secret: secret, timestamp: stamp, body: body)),
                ], body: body)
        }

        /// The commands 14 the fake NetEase API delivered to `player`, as JSON objects.
        static func creditsTold(_ site: E2ESite, _ player: String) -> [[String: Any]] {
            site.netease.attachments(to: player).compactMap { text in
                (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
            }.filter { $0["command"] as? Int == 14 }
        }

        static func wallet(_ site: E2ESite, _ player: String, provider: String = "netease") async throws -> [String: Any] {
            let answer = try await HTTP.get("\(site.base)/v1/players/\(provider)/\(player)/wallet", bearer: site.readToken)
            #expect(answer.status == 200, "\(answer.body)")
            return answer.json
        }

        @Test func topUpsPayForGamesAndFailedGamesArePaidBack() async throws {
            let site = try await E2ESite(
                simulate: false, adminToken: Self.token, readToken: Self.readToken,
                extra: "credits: { price: 2, topup_secret: \(Self.secret), max_topup: 100 }")
            do {
                try await run(site)
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }

        private func run(_ site: E2ESite) async throws {
            let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control", "claw/m2/control", "claw/m1/events", "claw/m1/queue"])
            try await site.waitReady()
            for machine in ["m1", "m2"] {
                try pc.client.publish("claw/\(machine)/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
            }
            try await eventually("both machines online") {
                (try? await HTTP.get("\(site.base)/v1/machines", bearer: site.readToken))?.body.components(separatedBy: #""online":true"#).count == 3
            }

            // No credit: alice's join is refused, with her balance and the price.
            try await site.copy(from: "alice", #"{"command":6}"#)
            try await eventually("alice to be refused") {
                site.netease.attachments(to: "alice").contains { $0.contains(#""data":"insufficient_credits""#) }
            }
            let refusal = try #require(site.netease.attachments(to: "alice").first { $0.contains("insufficient_credits") })
            #expect(refusal.contains(#""balance":0,"price":2"#), "\(refusal)")

            // Top-ups that are refused write nothing.
            let order = #"{"provider":"netease","account":"alice","credits":5,"order":"pay-1"}"#
            #expect(try await Self.topUp(site, order, secret: "not-the-secret-at-all").status == 401)
            #expect(try await Self.topUp(site, order, timestamp: Int64(Date().timeIntervalSince1970) - 3600).status == 401)
            #expect(try await HTTP.request(.POST, "\(site.base)/v1/credits/topups", body: Array(order.utf8)).status == 401)
            #expect(try await Self.topUp(site, "not json").status == 400)
            for bad in [
                #"{"provider":"netease","account":"alice","credits":0,"order":"pay-x"}"#,
                #"{"provider":"netease","account":"alice","credits":101,"order":"pay-x"}"#,
                #"{"provider":"netease","account":"alice","credits":-5,"order":"pay-x"}"#,
                #"{"provider":"wechat","account":"alice","credits":5,"order":"pay-x"}"#,
                #"{"provider":"netease","account":"\#(String(repeating: "a", count: 129))","credits":5,"order":"pay-x"}"#,
                #"{"provider":"netease","account":"alice","credits":5}"#,
                #"{"provider":"netease","account":"alice","credits":"5","order":"pay-x"}"#,
            ] {
                let answer = try await Self.topUp(site, bad)
                #expect(answer.status == 422 && answer.json["code"] as? String == "invalid_body", "\(bad): \(answer.status) \(answer.body)")
            }
            #expect(try await Self.wallet(site, "alice")["balance"] as? Int == 0)
            // A wallet is never open: no token, whatever Host a script sends (the Host check is a browser's).
            let open = try await HTTP.request(.GET, "\(site.base)/v1/players/netease/alice/wallet", headers: [("Host", "127.0.0.1")])
            #expect(open.status == 401 && open.json["code"] as? String == "unauthorized", "\(open.status) \(open.body)")

            // The top-up; the same order again (replayed, re-signed) adds nothing; other content is a conflict.
            let taken = try await Self.topUp(site, order)
            #expect(taken.status == 200 && taken.json["balance"] as? Int == 5 && taken.json["duplicate"] as? Bool == false, "\(taken.body)")
            let again = try await Self.topUp(site, order, timestamp: Int64(Date().timeIntervalSince1970) - 1)
            #expect(again.status == 200 && again.json["duplicate"] as? Bool == true && again.json["balance"] as? Int == 5, "\(again.body)")
            let conflict = try await Self.topUp(site, #"{"provider":"netease","account":"alice","credits":50,"order":"pay-1"}"#)
            #expect(conflict.status == 409 && conflict.json["code"] as? String == "order_conflict", "\(conflict.body)")
            try await eventually("alice to be told her top-up") { Self.creditsTold(site, "alice").contains { $0["reason"] as? String == "topup" } }
            #expect(Self.creditsTold(site, "alice").first?["data"] as? String == "5")

            // Paid: the offer carries the price, the accept debits before the coin.
            try await site.copy(from: "alice", #"{"command":6}"#)
            let session = try await site.offeredSession(to: "alice")
            let offer = try #require(site.netease.attachments(to: "alice").last { $0.contains(#""command":11"#) })
            #expect(offer.contains(#""balance":5,"price":2"#), "\(offer)")
            try await site.copy(from: "alice", #"{"command":12,"data":"\#(session)"}"#)
            try await pc.ackCoin(session: session)
            try await eventually("alice to be told the debit") {
                Self.creditsTold(site, "alice").contains { $0["reason"] as? String == "debit" && $0["data"] as? String == "3" }
            }
            // The board faults: the game is paid back.
            try pc.client.publish(
                "claw/m1/fault", payload: Array(#"{"code":"claw_rise_timeout","text":"The claw did not rise"}"#.utf8), qos: .atLeastOnce)
            try await eventually("alice to be paid back") {
                Self.creditsTold(site, "alice").contains { $0["reason"] as? String == "refund" && $0["session"] as? String == session }
            }
            try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"credits""#) && $0.contains(#""data":"refund""#) }
            let wallet = try await Self.wallet(site, "alice")
            #expect(wallet["balance"] as? Int == 5)
            let entries = wallet["entries"] as? [[String: Any]] ?? []
            #expect(entries.map { $0["kind"] as? String } == ["refund", "debit", "topup"], "\(entries)")
            #expect(entries.first?["session"] as? String == session && entries.last?["order"] as? String == "pay-1")

            // Credit for one game, accepted at two machines at once: one debit, one unpaid.
            #expect(try await Self.topUp(site, #"{"provider":"generic","account":"bob","credits":2,"order":"pay-2"}"#).status == 200)
            try await site.generic(from: "bob", to: "m2", #"{"command":6}"#)
            let onM2 = try await site.currentSession(of: "m2")
            let back = try await HTTP.request(.POST, "\(site.base)/v1/machines/m1/maintenance", headers: Self.admin, body: Array(#"{"on":false}"#.utf8))
            #expect(back.status == 200, "\(back.body)")
            try await site.generic(from: "bob", to: "m1", #"{"command":6}"#)
            let onM1 = try await site.currentSession(of: "m1")
            let base = site.base
            async let first = E2ESite.postGeneric(base: base, body: GenericEnvelope.encode(from: "bob", to: "m1", attach: #"{"command":12,"data":"\#(onM1)"}"#))
            async let second = E2ESite.postGeneric(base: base, body: GenericEnvelope.encode(from: "bob", to: "m2", attach: #"{"command":12,"data":"\#(onM2)"}"#))
            let answers = try await [first, second].map { $0.json }
            #expect(answers.filter { $0["result"] as? String == "accepted" }.count == 1, "\(answers)")
            #expect(answers.filter { $0["code"] as? String == "insufficient_credits" && $0["balance"] as? Int == 0 && $0["price"] as? Int == 2 }.count == 1, "\(answers)")
            let bob = try await Self.wallet(site, "bob", provider: "generic")
            #expect(bob["balance"] as? Int == 0)
            #expect((bob["entries"] as? [[String: Any]] ?? []).filter { $0["kind"] as? String == "debit" }.count == 1)

            // An operator's adjustment: needs the token, a reason and a key, and never takes a balance below 0.
            let adjust = "\(site.base)/v1/players/netease/alice/adjust"
            #expect(try await HTTP.request(.POST, adjust, body: Array(#"{"credits":1,"reason":"x","key":"k-0"}"#.utf8)).status == 401)
            for bad in [
                #"{"credits":1,"key":"k-0"}"#, #"{"credits":0,"reason":"nothing","key":"k-0"}"#, #"{"credits":1.5,"reason":"half","key":"k-0"}"#,
                "[]", #"{"credits":1,"reason":"no key"}"#, #"{"credits":1,"reason":"empty key","key":""}"#,
                #"{"credits":1,"reason":"long key","key":"\#(String(repeating: "k", count: 65))"}"#, #"{"credits":1,"reason":"a number","key":7}"#,
            ] {
                let answer = try await HTTP.request(.POST, adjust, headers: Self.admin, body: Array(bad.utf8))
                #expect([400, 422].contains(answer.status), "\(bad): \(answer.body)")
            }
            let overdraft = try await HTTP.request(
                .POST, adjust, headers: Self.admin, body: Array(#"{"credits":-6,"reason":"too much","key":"k-1"}"#.utf8))
            #expect(overdraft.status == 409 && overdraft.json["code"] as? String == "insufficient_credits", "\(overdraft.body)")
            let goodwill = try await HTTP.request(
                .POST, adjust, headers: Self.admin, body: Array(#"{"credits":1,"reason":"goodwill","key":"k-1"}"#.utf8))
            #expect(goodwill.status == 200 && goodwill.json["balance"] as? Int == 6, "a refused adjustment kept no key: \(goodwill.body)")
            // Retried (the answer was lost): taken once, the first answer again; the key with another body is a conflict.
            let retried = try await HTTP.request(
                .POST, adjust, headers: Self.admin, body: Array(#"{"credits":1,"reason":"goodwill","key":"k-1"}"#.utf8))
            #expect(retried.status == 200 && retried.body == goodwill.body, "\(retried.body)")
            let reused = try await HTTP.request(
                .POST, adjust, headers: Self.admin, body: Array(#"{"credits":2,"reason":"goodwill","key":"k-1"}"#.utf8))
            #expect(reused.status == 409 && reused.json["code"] as? String == "key_conflict", "\(reused.body)")
            #expect(try await HTTP.get("\(site.base)/v1/players/wechat/alice/wallet", bearer: site.readToken).status == 404)

            let metrics = try PrometheusText(try await HTTP.get("\(site.base)/metrics", bearer: site.readToken).body)
            #expect(metrics.samples[#"claw_credits_total{kind="topup"}"#] == 7)
            #expect(metrics.samples[#"claw_credits_total{kind="debit"}"#] == 4)
            #expect(metrics.samples[#"claw_credits_total{kind="refund"}"#] == 2)
            #expect(metrics.samples[#"claw_credits_total{kind="adjust"}"#] == 1)
            #expect(metrics.samples["claw_wallets"] == 2)

            // Killed: the ledger in the file is what was told, and sums up.
            site.killGateway()
            let store = try GameStore(path: site.site.database.path)
            #expect(try store.walletsOutOfBalance().isEmpty)
            #expect(try store.balances() == [
                PlayerAddress(accid: "alice", provider: "netease"): 6, PlayerAddress(accid: "bob", provider: "generic"): 0,
            ])
            try store.close()
            try site.startGateway()
            try await site.waitReady()
            #expect(try await Self.wallet(site, "alice")["balance"] as? Int == 6)
            await pc.stop()
        }
    }
}
