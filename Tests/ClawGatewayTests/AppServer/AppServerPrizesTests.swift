import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// The demo clients' prizes (SPEC §8, §15): a tourist lists, ships and
    /// exchanges their own prizes with their secret sid, answered in the demo
    /// server's manner; nobody else's, and never with an account id.
    @Suite(.serialized) struct AppServerPrizesTests {
        static let extra = """
            credits: { price: 0, topup_secret: app-server-topup-secret }
            prizes: {}
            """
        static let m1 = #"prize: { id: eevee, name: "Eevee 25 cm", exchange: 6 }"#

        /// The tourist plays m1 and wins (every grab wins): the prize's id.
        static func win(_ site: AppServerSite, _ accid: String) async throws -> String {
            let offers = site.netease.attachments(to: accid).filter { $0.contains(#""command":11"#) }.count
            try await site.copy(from: accid, #"{"command":6}"#)
            try await eventually("a new offer to \(accid)") {
                site.netease.attachments(to: accid).filter { $0.contains(#""command":11"#) }.count > offers
            }
            let session = try await site.offeredSession(to: accid)
            try await site.copy(from: accid, #"{"command":12,"data":"\#(session)"}"#)
            try await site.copy(from: accid, #"{"command":2,"serial":\#(Int.random(in: 1...1_000_000))}"#)
            let id = PrizeRow.id(ofGame: session)
            try await eventually("\(accid) told their prize") {
                site.netease.attachments(to: accid).contains { $0.contains(#""command":15"#) && $0.contains(id) && $0.contains(#""state":"held""#) }
            }
            return id
        }

        @Test func aTouristChoosesForTheirOwnPrizesBySecret() async throws {
            try await AppServerSite.with(extra: Self.extra, m1: Self.m1, http: "read_token: app-server-read-token-0123") { site in
                let alice = try await site.newTourist()
                let bob = try await site.newTourist()
                let first = try await Self.win(site, alice.accid)

                let listed = try await site.post("prizes", "sid=\(alice.sid)")
                let prizes = (listed.json["data"] as? [String: Any])?["prizes"] as? [[String: Any]] ?? []
                #expect(listed.json["code"] as? Int == 200 && prizes.count == 1, "\(listed.body)")
                #expect(prizes.first?["id"] as? String == first && prizes.first?["name"] as? String == "Eevee 25 cm")
                #expect(prizes.first?["provider"] as? String == "netease" && prizes.first?["account"] as? String == alice.accid)
                let others = try await site.post("prizes", "sid=\(bob.sid)")
                #expect(((others.json["data"] as? [String: Any])?["prizes"] as? [Any])?.isEmpty == true, "\(others.body)")
                #expect(try await site.post("prizes", "").json["code"] as? Int == 400)
                #expect(try await site.post("prizes", "sid=\(alice.accid)").json["code"] as? Int == 401, "an account id is no sid")
                #expect(try await site.post("prizes", "sid=\(alice.sid)&limit=0").json["code"] as? Int == 400)

                // Bob cannot touch alice's prize: 404, as for one that does not exist.
                let stolen = try await site.post("prizes/exchange", "sid=\(bob.sid)&prize=\(first)")
                #expect(stolen.json["code"] as? Int == 404, "\(stolen.body)")
                let shippedAway = try await site.post("prizes/ship", "sid=\(bob.sid)&prizes=\(first)&name=Bob&phone=1&address=Elsewhere")
                #expect(shippedAway.json["code"] as? Int == 404, "\(shippedAway.body)")
                #expect(try await site.post("prizes/exchange", "sid=\(alice.sid)&prize=p-none").json["code"] as? Int == 404)
                #expect(try await site.post("prizes/exchange", "sid=\(alice.sid)").json["code"] as? Int == 422)

                let exchanged = try await site.post("prizes/exchange", "sid=\(alice.sid)&prize=\(first)")
                let data = exchanged.json["data"] as? [String: Any]
                #expect(exchanged.json["code"] as? Int == 200 && data?["credits"] as? Int == 6 && data?["balance"] as? Int == 6, "\(exchanged.body)")
                let twice = try await site.post("prizes/exchange", "sid=\(alice.sid)&prize=\(first)")
                #expect(twice.json["code"] as? Int == 409 && (twice.json["msg"] as? String ?? "").contains("exchanged"), "\(twice.body)")
                let wallet = try await site.post("wallet", "sid=\(alice.sid)")
                #expect((wallet.json["data"] as? [String: Any])?["balance"] as? Int == 6, "credited once: \(wallet.body)")

                // Shipping by form: the address checked field by field.
                let second = try await Self.win(site, alice.accid)
                let missing = try await site.post("prizes/ship", "sid=\(alice.sid)&prizes=\(second)&name=Alice&address=1%20Claw%20Street")
                #expect(missing.json["code"] as? Int == 422 && (missing.json["msg"] as? String ?? "").hasPrefix("phone"), "\(missing.body)")
                let long = String(repeating: "x", count: 513)
                let tooLong = try await site.post("prizes/ship", "sid=\(alice.sid)&prizes=\(second)&name=Alice&phone=1&address=\(long)")
                #expect(tooLong.json["code"] as? Int == 422 && (tooLong.json["msg"] as? String ?? "").hasPrefix("address"), "\(tooLong.body)")
                let huge = String(repeating: "x", count: 100_000)
                #expect(try await site.post("prizes/ship", "sid=\(alice.sid)&prizes=\(second)&name=A&phone=1&address=\(huge)").json["code"] as? Int == 413)
                let both = try await site.post("prizes/ship", "sid=\(alice.sid)&prizes=\(second),\(first)&name=Alice&phone=1&address=Here")
                #expect(both.json["code"] as? Int == 409, "the exchanged one cannot go too: \(both.body)")
                let parcel = try await site.post("prizes/ship", "sid=\(alice.sid)&prizes=\(second)&name=Alice%20Li&phone=%2B86%20138&address=1%20Claw%20Street")
                let shipped = parcel.json["data"] as? [String: Any]
                #expect(parcel.json["code"] as? Int == 200 && shipped?["state"] as? String == "to_ship" && shipped?["prizes"] as? [String] == [second])
                #expect(shipped?["address"] is NSNull, "the demo's answer carries no address: \(parcel.body)")
                let listedAgain = try await site.post("prizes", "sid=\(alice.sid)")
                #expect(!listedAgain.body.contains("Claw Street"))
                let states = ((listedAgain.json["data"] as? [String: Any])?["prizes"] as? [[String: Any]] ?? []).map { $0["state"] as? String }
                #expect(states == ["to_ship", "exchanged"], "\(listedAgain.body)")
            }
            // With the demo's own sessions (the account id is the sid), no prize route: anyone could ship anyone's.
            try await AppServerSite.with(sessions: "accid", extra: "prizes: {}", m1: Self.m1.replacingOccurrences(of: ", exchange: 6", with: "")) { site in
                let answer = try await HTTP.request(.POST, "\(site.base)/dollsCatcher/prizes", body: Array("sid=x".utf8))
                #expect(answer.status == 404)
            }
        }
    }
}
