import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// `systemctl reload` as the package does it: SIGHUP to a real
    /// `claw-gateway run`, with a real mosquitto, a PC played by the test and
    /// players on the NetEase copy path (SPEC §13). What a reload does to each
    /// machine's game, on the test clock: `ReloadTests`.
    @Suite(.serialized) struct ReloadEndToEndTests {
        static func machine(_ id: String) -> String {
            """
              - id: \(id)
                name: Machine \(id)
                im_account: claw_\(id)
                cameras:
                  - { id: "1", stream: rtmp://example/\(id)-1 }

            """
        }

        /// Rewrites the site's gateway.yaml with `edit` and sends SIGHUP.
        static func reload(_ site: E2ESite, _ edit: (String) -> String) throws {
            let text = try String(contentsOf: site.site.config, encoding: .utf8)
            try edit(text).write(to: site.site.config, atomically: true, encoding: .utf8)
            site.gateway?.signal(SIGHUP)
        }

        /// The PC of `machine`: online, and acking what it is sent.
        static func pc(_ site: E2ESite, machines: [String]) async throws -> TestSubscriber {
            let pc = try await TestSubscriber(
                broker: site.broker, topics: ["claw/gateway/events"] + machines.flatMap { ["claw/\($0)/control", "claw/\($0)/queue", "claw/\($0)/events"] })
            for machine in machines {
                try pc.client.publish("claw/\(machine)/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await pc.waitFor("claw/\(machine)/events") { $0.contains(#""type":"online""#) }
            }
            return pc
        }

        /// Alice plays m1 (her coin acked), bob waits: returns alice's session.
        static func aliceHasAGameBobWaits(_ site: E2ESite, _ pc: TestSubscriber) async throws -> String {
            let alice = try await site.generic(from: "alice", #"{"command":6}"#).json["session"] as? String ?? ""
            #expect(try await site.generic(from: "alice", #"{"command":12,"data":"\#(alice)"}"#).json["result"] as? String == "accepted")
            try await pc.ackCoin(session: alice)
            try await site.copy(from: "bob", #"{"command":6}"#)
            try await pc.waitFor("claw/m1/queue") { $0.contains(#""accid":"bob""#) }
            return alice
        }

        static func deadline(_ site: E2ESite, _ machine: String = "m1") async throws -> String? {
            let player = try await HTTP.get("\(site.base)/v1/machines/\(machine)").json["player"] as? [String: Any]
            return player?["deadline"] as? String
        }

        @Test func aReloadAddsAMachineAndChangesATimerWithAGameInProgress() async throws {
            try await E2ESite.with(game: "play_timeout: 30s", simulate: false) { site in
                try await site.waitReady()
                let pc = try await Self.pc(site, machines: ["m1"])
                let alice = try await Self.aliceHasAGameBobWaits(site, pc)
                let deadline = try await Self.deadline(site)

                try Self.reload(site) { $0.replacingOccurrences(of: "play_timeout: 30s", with: "play_timeout: 1s") + Self.machine("m3") }
                let event = try await pc.waitFor("claw/gateway/events") { $0.contains(#""type":"config_reloaded""#) }
                let reloaded = try #require(JSONCoding.decode(ConfigReloaded.self, from: Array(event.utf8)))
                #expect(reloaded.added == ["m3"] && reloaded.removed.isEmpty && reloaded.changed == ["m1", "m2"], "\(event)")
                #expect(reloaded.needsRestart.isEmpty)

                // The new machine runs: its retained snapshot, its read route, its game.
                let m3 = try await TestSubscriber(broker: site.broker, topics: ["claw/m3/queue"])
                let snapshot = try await m3.waitFor("claw/m3/queue") { _ in true }
                #expect(m3.messages.first?.retain == true && snapshot.contains(#""machine":"m3""#), "\(snapshot)")
                await m3.stop()
                #expect(try await HTTP.get("\(site.base)/v1/machines/m3").status == 200)
                try pc.client.publish("claw/m3/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await eventually("m3 to hear its PC") {
                    (try? await HTTP.get("\(site.base)/v1/machines/m3"))?.json["online"] as? Bool == true
                }
                #expect(try await site.generic(from: "carol", to: "m3", #"{"command":6}"#).json["result"] as? String == "offered")

                // Alice's game goes on with the time it had; bob's has the new timer.
                #expect(try await Self.deadline(site) == deadline, "alice keeps her 30 s")
                #expect(try await site.generic(from: "alice", #"{"command":2,"serial":1}"#).json["result"] as? String == "forwarded")
                try pc.client.publish(
                    "claw/m1/result", payload: Array(#"{"command":4,"data":"true","session":"\#(alice)"}"#.utf8), qos: .atLeastOnce)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"game_ended""#) && $0.contains(#""outcome":"won""#) }
                let bob = try await site.offeredSession(to: "bob")
                try await site.copy(from: "bob", #"{"command":12,"data":"\#(bob)"}"#)
                try await pc.ackCoin(session: bob)
                // The 1 s play timer drops bob's claw by itself.
                try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":2,"#) && $0.contains(bob) }

                // A broken file changes nothing and says what is wrong.
                try Self.reload(site) { $0.replacingOccurrences(of: "play_timeout: 1s", with: "play_timeout: soon") + "  - id: m1\n" }
                try await eventually("the refusal in the log") { site.site.logText.contains("Reload refused") }
                let log = site.site.logText
                #expect(log.contains("game.play_timeout"), "the bad duration is named")
                #expect(log.contains("machines[3]"), "and the bad machine")
                let machines = try await HTTP.get("\(site.base)/v1/machines").json["machines"] as? [[String: Any]] ?? []
                #expect(machines.compactMap { $0["id"] as? String } == ["m1", "m2", "m3"])
                let metrics = try await HTTP.get("\(site.base)/metrics").body
                #expect(metrics.contains(#"claw_config_reloads_total{result="refused"} 1"#))
                #expect(metrics.contains(#"claw_config_reloads_total{result="applied"} 1"#))
                #expect(pc.payloads(on: "claw/gateway/events").count == 1, "no event for a refused file")
                await pc.stop()
            }
        }

        @Test func aReloadRemovingAMachineMidGameLetsItsGameFinish() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let pc = try await Self.pc(site, machines: ["m1"])
                let alice = try await Self.aliceHasAGameBobWaits(site, pc)

                try Self.reload(site) { text in
                    text.replacingOccurrences(of: Self.removing("m1", from: text), with: "")
                }
                let event = try await pc.waitFor("claw/gateway/events") { $0.contains(#""type":"config_reloaded""#) }
                #expect(event.contains(#""removed":["m1"]"#), "\(event)")
                try await eventually("bob to be told the machine is gone") {
                    site.netease.attachments(to: "bob").contains { $0.contains(#""command":9"#) && $0.contains("unknown_machine") }
                }
                let join = try await site.generic(from: "carol", #"{"command":6}"#)
                #expect(join.json["code"] as? String == "unknown_machine", "\(join.body)")

                // Alice's game plays to its end.
                #expect(try await site.generic(from: "alice", #"{"command":2,"serial":1}"#).json["result"] as? String == "forwarded")
                try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":2,"#) && $0.contains(alice) }
                try pc.client.publish(
                    "claw/m1/result", payload: Array(#"{"command":4,"data":"false","session":"\#(alice)"}"#.utf8), qos: .atLeastOnce)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"game_ended""#) && $0.contains(#""outcome":"lost""#) }

                // Then m1 is gone: its retained snapshot cleared, its route 404, its games kept.
                try await eventually("m1's read route to go") {
                    (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.status == 404
                }
                let late = try await TestSubscriber(broker: site.broker, topics: ["claw/+/queue"])
                try await late.waitFor("claw/m2/queue") { _ in true }
                #expect(late.payloads(on: "claw/m1/queue").isEmpty, "no retained snapshot of m1 left")
                try await eventually("the gateway log to say m1 is gone") { site.site.logText.contains("Machine gone") }
                let store = try GameStore(path: site.site.database.path)
                #expect(try store.gamesNow(machine: "m1", limit: 10, offset: 0).first?.outcome == .lost)
                #expect(!site.netease.attachments(to: "bob").contains { $0.contains(#""command":11"#) }, "bob was never offered m1")
                await late.stop()
                await pc.stop()
            }
        }

        /// The text of one machine's entry in the site's gateway.yaml.
        static func removing(_ id: String, from text: String) -> String {
            guard let start = text.range(of: "  - id: \(id)\n") else { return "" }
            let rest = text[start.upperBound...]
            let end = rest.range(of: "  - id: ")?.lowerBound ?? text.endIndex
            return String(text[start.lowerBound..<end])
        }
    }
}
