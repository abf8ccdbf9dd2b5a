import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// Faults, maintenance and resets (SPEC §12) on a real `claw-gateway
    /// run` and mosquitto: the PC is played by hand, then by `claw-gateway
    /// simulate --fault-rate 1`.
    @Suite(.serialized) struct FaultEndToEndTests {
        static let token = "fault-admin-token"
        static let admin = [("Authorization", "Bearer \(token)")]

        /// The retained snapshot of m1 once it satisfies `match`.
        static func snapshot(_ pc: TestSubscriber, _ match: @escaping (QueueSnapshot) -> Bool) async throws -> QueueSnapshot {
            let text = try await pc.waitFor("claw/m1/queue") { text in
                JSONCoding.decode(QueueSnapshot.self, from: Array(text.utf8)).map(match) ?? false
            }
            return try #require(JSONCoding.decode(QueueSnapshot.self, from: Array(text.utf8)))
        }

        @Test func aFaultTakesTheMachineOutAndAResetBringsItBack() async throws {
            try await E2ESite.with(simulate: false, adminToken: Self.token) { site in
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control", "claw/m1/events", "claw/m1/queue"])
                try await site.waitReady()
                try pc.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"online""#) }
                func metric(_ name: String) async throws -> Double? {
                    try PrometheusText(try await HTTP.get("\(site.base)/metrics").body).samples[name]
                }

                // Alice plays, bob waits.
                try await site.copy(from: "alice", #"{"command":6}"#)
                let alice = try await site.offeredSession(to: "alice")
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(alice)"}"#)
                try await pc.ackCoin(session: alice)
                try await site.copy(from: "bob", #"{"command":6}"#)

                // A fault message that is not the documented JSON is ignored: the game goes on.
                let ignored = #"claw_machine_messages_ignored_total{machine="m1"}"#
                try pc.client.publish("claw/m1/fault", payload: Array(#"{"text":"no code"}"#.utf8), qos: .atLeastOnce)
                try await eventually("the bad fault message to be counted") { (try? await metric(ignored)) == 1 }
                #expect(try await site.currentSession() == alice)

                // The board faults: alice's game ends machine_fault and she is told; m1 is in maintenance.
                try pc.client.publish(
                    "claw/m1/fault", payload: Array(#"{"code":"claw_rise_timeout","text":"The claw did not rise"}"#.utf8), qos: .atLeastOnce)
                let out = try await Self.snapshot(pc) { $0.state == .maintenance }
                #expect(out.fault?.code == "claw_rise_timeout" && out.fault?.text == "The claw did not rise")
                #expect(out.waiting.map(\.accid) == ["bob"] && out.player == nil)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"fault""#) && $0.contains(#""data":"claw_rise_timeout""#) }
                try await eventually("alice to be told") { site.notices(to: "alice").contains { $0.data == "machine_fault" } }
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games").json["games"] as? [[String: Any]] ?? []
                #expect(games.first { $0["id"] as? String == alice }?["outcome"] as? String == "machine_fault")
                #expect(try await metric(#"claw_machine_faults_total{machine="m1",code="claw_rise_timeout"}"#) == 1)
                #expect(try await metric(#"claw_machine_maintenance{machine="m1"}"#) == 1)
                // The queue is kept and may be joined.
                try await site.copy(from: "carol", #"{"command":6}"#)
                _ = try await Self.snapshot(pc) { $0.waiting.map(\.accid) == ["bob", "carol"] && $0.state == .maintenance }

                // Reset: refused without the token or for an unknown machine; then 1002 goes out.
                let reset = "\(site.base)/v1/machines/m1/reset"
                #expect(try await HTTP.request(.POST, reset).status == 401)
                #expect(try await HTTP.request(.POST, "\(site.base)/v1/machines/m9/reset", headers: Self.admin).status == 404)
                let sent = try await HTTP.request(.POST, reset, headers: Self.admin)
                #expect(sent.status == 200, "\(sent.body)")
                let serial = try #require(sent.json["serial"] as? Int)
                try await pc.waitFor("claw/m1/control") { $0 == #"{"command":1002,"serial":\#(serial)}"# }
                // The PC acks it, homes the gantry and says online afresh: bob is offered the turn.
                try pc.client.publish("claw/m1/ack", payload: Array(#"{"command":5,"serial":\#(serial)}"#.utf8), qos: .atLeastOnce)
                try pc.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                let back = try await Self.snapshot(pc) { $0.state == .offered && $0.player?.accid == "bob" }
                #expect(back.fault == nil)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"maintenance""#) && $0.contains(#""data":"off""#) }
                #expect(try await HTTP.request(.POST, reset, headers: Self.admin).status == 409, "bob holds the machine")

                // By hand: refused bodies; then out after bob's offer, kept across a restart, and back.
                let maintenance = "\(site.base)/v1/machines/m1/maintenance"
                for body in [#"{"on":"yes"}"#, #"{"reason":"x"}"#, "not json"] {
                    let refused = try await HTTP.request(.POST, maintenance, headers: Self.admin, body: Array(body.utf8))
                    #expect(refused.status == 422 && refused.json["code"] as? String == "invalid_body", "\(body): \(refused.body)")
                }
                let taken = try await HTTP.request(.POST, maintenance, headers: Self.admin, body: Array(#"{"on":true,"reason":"glass cleaning"}"#.utf8))
                #expect(taken.status == 200 && taken.json["changed"] as? Bool == true, "\(taken.body)")
                _ = try await Self.snapshot(pc) { $0.state == .offered && $0.reason == "glass cleaning" }
                let bob = try await site.currentSession()
                try await site.copy(from: "bob", #"{"command":13,"data":"\#(bob)"}"#)
                _ = try await Self.snapshot(pc) { $0.state == .maintenance && $0.reason == "glass cleaning" && $0.player == nil }

                site.killGateway()
                pc.clear()
                try site.startGateway()
                try await site.waitReady()
                let restarted = try await HTTP.get("\(site.base)/v1/machines/m1").json
                #expect(restarted["state"] as? String == "maintenance", "\(restarted)")
                #expect(restarted["reason"] as? String == "glass cleaning")

                let put = try await HTTP.request(.POST, maintenance, headers: Self.admin, body: Array(#"{"on":false}"#.utf8))
                #expect(put.status == 200 && put.json["changed"] as? Bool == true)
                let carol = try await Self.snapshot(pc) { $0.state == .offered && $0.player?.accid == "carol" }
                #expect(carol.reason == nil)

                // A machine whose PC is gone cannot be reset. (Cleared first: the
                // gateway's start, above, showed m1 offline with carol waiting too.)
                pc.clear()
                try pc.client.publish("claw/m1/state", payload: Array("offline".utf8), qos: .atLeastOnce, retain: true)
                _ = try await Self.snapshot(pc) { !$0.online && $0.waiting.first?.accid == "carol" }
                let offline = try await HTTP.request(.POST, reset, headers: Self.admin)
                #expect(offline.status == 409 && offline.json["code"] as? String == "machine_offline", "\(offline.body)")
                await pc.stop()
            }
        }

        /// `claw-gateway simulate --fault-rate 1`: every grab faults, and a reset brings the machine back.
        @Test func theSimulatorFaultsAndAnswersResets() async throws {
            let site = try await E2ESite(
                simulate: true, adminToken: Self.token,
                simulatorArguments: ["--ack-delay", "0s", "--result-delay", "100ms", "--fault-rate", "1", "--reset-delay", "0s"],
                machines: ["m1"])
            do {
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/queue", "claw/m1/events"])
                try await site.generic(from: "ann", #"{"command":6}"#)
                let session = try await site.currentSession()
                try await site.generic(from: "ann", #"{"command":12,"data":"\#(session)"}"#)
                try await site.generic(from: "ann", #"{"command":2,"serial":1}"#)
                let out = try await Self.snapshot(pc) { $0.state == .maintenance }
                #expect(out.fault?.code == "claw_rise_timeout")
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games").json["games"] as? [[String: Any]] ?? []
                #expect(games.first { $0["id"] as? String == session }?["outcome"] as? String == "machine_fault")

                try await site.generic(from: "ben", #"{"command":6}"#)
                #expect(try await HTTP.request(.POST, "\(site.base)/v1/machines/m1/reset", headers: Self.admin).status == 200)
                let back = try await Self.snapshot(pc) { $0.state == .offered && $0.player?.accid == "ben" }
                #expect(back.fault == nil)
                await pc.stop()
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }
    }
}
