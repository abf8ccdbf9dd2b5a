import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// The board settings at runtime (SPEC §12): read, set and put back over
    /// HTTP on a real `claw-gateway run`, carried by the next coin and never
    /// by the game in progress, kept across a restart.
    @Suite(.serialized) struct SettingsRoutesTests {
        static let token = "settings-admin-token"
        static let admin = [("Authorization", "Bearer \(token)")]

        static func coinSettings(_ pc: TestSubscriber, session: String) async throws -> [String: Any] {
            let coin = try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":1001,"#) && $0.contains(session) }
            let object = try JSONSerialization.jsonObject(with: Data(coin.utf8)) as? [String: Any]
            return try #require(object?["settings"] as? [String: Any])
        }

        @Test func anOperatorSetsTheBoardFromTheNextCoinAndItOutlivesARestart() async throws {
            let site = try await E2ESite(simulate: false, adminToken: Self.token)
            do {
                try await site.waitReady()
                let url = "\(site.base)/v1/machines/m1/settings"
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control", "claw/m1/events"])
                try pc.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"online""#) }

                let file = try await HTTP.get(url).json
                #expect(file["source"] as? String == "file")
                #expect((file["settings"] as? [String: Any])?["game_time"] as? Int == 30)

                // Alice's game starts with the file's settings.
                let alice = try await site.generic(from: "alice", #"{"command":6}"#).json["session"] as? String ?? ""
                try await site.generic(from: "alice", #"{"command":12,"data":"\#(alice)"}"#)
                #expect((try await Self.coinSettings(pc, session: alice)["claw"] as? [String: Any])?["grab"] as? Int == 30)
                try await pc.ackCoin(session: alice)

                // Refused: no token, a bad body (every bad field named), an unknown machine.
                let body = Array(#"{"claw":{"grab":44},"game_time":25,"guarantee_after":3}"#.utf8)
                #expect(try await HTTP.request(.PUT, url, body: body).status == 401)
                let bad = try await HTTP.request(
                    .PUT, url, headers: Self.admin, body: Array(#"{"claw":{"grab":0,"lift":3},"game_time":"30s","colour":1}"#.utf8))
                #expect(bad.status == 422, "\(bad.body)")
                #expect(bad.json["code"] as? String == "invalid_settings")
                let message = bad.json["message"] as? String ?? ""
                for field in ["claw.grab", "claw.lift", "game_time", "colour"] { #expect(message.contains(field), "\(field) in \(message)") }
                #expect(try await HTTP.request(.PUT, url, headers: Self.admin, body: Array("[1]".utf8)).status == 422)
                #expect(try await HTTP.request(.PUT, "\(site.base)/v1/machines/m9/settings", headers: Self.admin, body: body).status == 404)
                // A change of the claw's settings needs its reason (SPEC §16): missing, empty or null, it is refused.
                for missing in [body, Array(#"{"game_time":25,"reason":"  "}"#.utf8), Array(#"{"game_time":25,"reason":null}"#.utf8)] {
                    let refused = try await HTTP.request(.PUT, url, headers: Self.admin, body: missing)
                    #expect(refused.status == 422, "\(refused.body)")
                    #expect((refused.json["message"] as? String ?? "").hasPrefix("reason"), "\(refused.body)")
                }
                #expect(try await HTTP.get(url).json["source"] as? String == "file", "nothing refused changed anything")

                let reasoned = Array(#"{"claw":{"grab":44},"game_time":25,"guarantee_after":3,"reason":"weekend promotion"}"#.utf8)
                let set = try await HTTP.request(.PUT, url, headers: Self.admin, body: reasoned)
                #expect(set.status == 200, "\(set.body)")
                #expect(set.json["source"] as? String == "runtime")
                let settings = try #require(set.json["settings"] as? [String: Any])
                #expect(settings["game_time"] as? Int == 25 && settings["guarantee_after"] as? Int == 3 && settings["lift_height"] as? Int == 5)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"settings_changed""#) && $0.contains(#""data":"runtime""#) }

                // Bob's game, the next coin, has them; alice's did not change.
                try await site.generic(from: "bob", #"{"command":6}"#)
                try await site.generic(from: "alice", #"{"command":2,"serial":1}"#)
                try pc.client.publish(
                    "claw/m1/result", payload: Array(#"{"command":4,"data":"false","session":"\#(alice)"}"#.utf8), qos: .atLeastOnce)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"offered""#) && $0.contains(#""player":"bob""#) }
                let bob = try await site.currentSession()
                try await site.generic(from: "bob", #"{"command":12,"data":"\#(bob)"}"#)
                let next = try await Self.coinSettings(pc, session: bob)
                #expect(next["game_time"] as? Int == 25 && (next["claw"] as? [String: Any])?["grab"] as? Int == 44)

                // Kept across a restart; DELETE goes back to the file's.
                site.killGateway()
                try site.startGateway()
                try await site.waitReady()
                #expect(try await HTTP.get(url).json["source"] as? String == "runtime")
                #expect(try await HTTP.request(.DELETE, url, headers: Self.admin).status == 422, "a DELETE needs its reason too")
                let back = try await HTTP.request(.DELETE, url, headers: Self.admin, body: Array(#"{"reason":"promotion over"}"#.utf8))
                #expect(back.json["source"] as? String == "file")
                #expect((back.json["settings"] as? [String: Any])?["game_time"] as? Int == 30)
                #expect(try await HTTP.request(.DELETE, url).status == 401)
                await pc.stop()
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }
    }
}
