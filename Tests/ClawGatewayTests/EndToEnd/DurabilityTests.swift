import Foundation
import Protocol
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// What the gateway says is so, is so on disk: a real `claw-gateway run`,
    /// a real mosquitto and SQLite file, and the faults that test it
    /// (`kill -9`, a late result, writes that fail).
    @Suite(.serialized) struct DurabilityTests {
        @Test func everyJoinAnswered200SurvivesKillMinus9() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                var answered: [String] = []
                for index in 1...25 {
                    let answer = try await site.generic(from: "p\(index)", #"{"command":6}"#)
                    #expect(answer.status == 200)
                    if answer.json["result"] as? String == "queued" { answered.append("p\(index)") }
                }
                #expect(answered.count == 25)
                site.killGateway()
                try site.startGateway()
                try await site.waitReady()
                let machine = try await HTTP.get("\(site.base)/v1/machines/m1").json
                let waiting = (machine["waiting"] as? [[String: Any]])?.compactMap { $0["accid"] as? String }
                #expect(waiting == answered, "in the order they were answered")
            }
        }

        @Test func aLateResultIsIgnoredAndTheNextGameGoesOn() async throws {
            try await E2ESite.with(game: "result_timeout: 1s", simulate: false) { site in
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control", "claw/m1/events", "claw/m1/queue"])
                try await site.waitReady()
                try pc.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"online""#) }
                let alice = try await site.generic(from: "alice", #"{"command":6}"#).json["session"] as? String ?? ""
                try await site.generic(from: "bob", #"{"command":6}"#)
                try await site.generic(from: "alice", #"{"command":12,"data":"\#(alice)"}"#)
                try await pc.ackCoin(session: alice)
                try await site.generic(from: "alice", #"{"command":2,"serial":1}"#)
                let grab = try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":2,"#) }
                #expect(grab.contains(#""session":"\#(alice)""#), "the PC learns the game's session")
                // No result within the result timer: the turn passes to bob.
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"no_result""#) }
                try await pc.waitFor("claw/m1/queue") { $0.contains(#""player":{"accid":"bob""#) }
                let bob = try await HTTP.get("\(site.base)/v1/machines/m1").json["player"].flatMap { ($0 as? [String: Any])?["session"] as? String }
                #expect(try await site.generic(from: "bob", #"{"command":12,"data":"\#(bob ?? "")"}"#).json["result"] as? String == "accepted")

                // Alice's result, late, naming her session.
                try pc.client.publish(
                    "claw/m1/result", payload: Array(#"{"command":4,"data":"true","session":"\#(alice)"}"#.utf8), qos: .atLeastOnce)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"stale_result""#) && $0.contains(alice) }
                let machine = try await HTTP.get("\(site.base)/v1/machines/m1").json
                #expect(machine["state"] as? String == "playing")
                #expect((machine["player"] as? [String: Any])?["accid"] as? String == "bob")
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games").json["games"] as? [[String: Any]] ?? []
                #expect(games.first { $0["player"] as? String == "alice" }?["outcome"] as? String == "no_result")
                let bobsGame = try #require(games.first { $0["player"] as? String == "bob" })
                #expect(bobsGame["outcome"] is NSNull && bobsGame["ended_at"] is NSNull, "bob's game is still on: null, not left out")
                let fields: Set = ["id", "machine", "player", "provider", "nick", "outcome", "offered_at", "started_at", "ended_at", "commands"]
                #expect(games.allSatisfy { fields.isSubset(of: $0.keys) }, "every field of SPEC §5, in every game")
                #expect(!pc.payloads(on: "claw/m1/events").contains { $0.contains(#""type":"result""#) && $0.contains("bob") })
                await pc.stop()
            }
        }

        /// Writes fail while the file size limit of the gateway's process is
        /// one byte (`prlimit`, as a full disk would make them fail); the
        /// limit is then lifted, as an operator would free space.
        @Test func whileWritesFailQueueChangesAreRefusedAndNothingIsLost() async throws {
            try await E2ESite.with { site in
                let pid = try #require(site.gateway?.pid)
                let alice = try await site.generic(from: "alice", #"{"command":6}"#).json["session"] as? String ?? ""
                #expect(!alice.isEmpty)

                try Self.prlimit(pid, "--fsize=1:unlimited")
                // The first write to fail: taken in memory, not yet durable, so not confirmed.
                let decline = try await site.generic(from: "alice", #"{"command":13,"data":"\#(alice)"}"#)
                #expect(decline.json["code"] as? String == "gateway_unavailable", "\(decline.body)")
                let ready = try await HTTP.get("\(site.base)/readyz")
                #expect(ready.status == 503)
                #expect((ready.json["message"] as? String)?.contains("storage") == true)
                let join = try await site.generic(from: "bob", #"{"command":6}"#)
                #expect(join.json["code"] as? String == "gateway_unavailable", "refused at once: \(join.body)")
                // A move stores nothing and goes on regardless.
                #expect(try await HTTP.get("\(site.base)/healthz").status == 200)

                try Self.prlimit(pid, "--fsize=unlimited:unlimited")
                try await eventually("/readyz to recover once every machine is rewritten", timeout: .seconds(20)) {
                    (try? await HTTP.get("\(site.base)/readyz"))?.status == 200
                }
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games").json["games"] as? [[String: Any]] ?? []
                #expect(games.first { $0["id"] as? String == alice }?["outcome"] as? String == "declined", "the record written during the failure is not lost")
                #expect(try await site.generic(from: "bob", #"{"command":6}"#).json["result"] as? String == "offered")
            }
        }

        static func prlimit(_ pid: pid_t, _ limit: String) throws {
            let status = try ChildProcess("/usr/bin/prlimit", ["--pid", String(pid), limit]).wait()
            guard status == 0 else { throw BrokerError("prlimit \(limit) on \(pid) failed with status \(status)") }
        }
    }
}
