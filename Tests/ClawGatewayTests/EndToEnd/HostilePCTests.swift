import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// What one machine's PC, dead or gone wild, can do to the arcade, against
    /// a real mosquitto and the `claw-gateway run` process (SPEC §3, issue
    /// scenarios of docs/SECURITY.md).
    @Suite(.serialized) struct HostilePCTests {
        /// A dead PC whose will never fired: its retained `online` stays on the
        /// broker, and the broker gives it to the gateway again on every reconnect.
        @Test func aDeadPCsRetainedOnlineDoesNotClearSuspectWhenTheGatewayReconnects() async throws {
            try await E2ESite.with(game: "ack_timeout: 500ms\nsuspect_after: 1\naccept_timeout: 120s\nplay_timeout: 120s", simulate: false) { site in
                // The PC said online (retained) and went away without a will: nobody acks.
                let pc = try await TestSubscriber(broker: site.broker, topics: [], clientID: "m1-pc")
                try pc.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await eventually("m1 to be online") { try await HTTP.get("\(site.base)/v1/machines/m1").json["online"] as? Bool == true }
                await pc.stop()

                let watcher = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/queue", "claw/m1/events", "claw/gateway/state"])
                let offer = try await site.generic(from: "ann", #"{"command":6}"#)
                let session = try #require(offer.json["session"] as? String, "\(offer.body)")
                #expect(try await site.generic(from: "ann", #"{"command":12,"data":"\#(session)"}"#).json["result"] as? String == "accepted")
                try await watcher.waitFor("claw/m1/events") { $0.contains(#""type":"suspect""#) }
                try await watcher.waitFor("claw/m1/queue") { $0.contains(#""suspect":true"#) }

                // Another client takes the gateway's client id: the broker drops the
                // gateway, which reconnects, subscribes again and is handed m1's
                // retained online. Its own `online` goes out after it subscribed.
                let intruder = try await TestSubscriber(broker: site.broker, topics: [], clientID: "claw-gateway-test")
                await intruder.stop()
                try await eventually("the gateway to be back", timeout: .seconds(30)) {
                    watcher.messages.contains { $0.topic == "claw/gateway/state" && !$0.retain && $0.payload == Array("online".utf8) }
                }
                // Published after the gateway subscribed again, so handled after the retained online.
                let marker = try await TestSubscriber(broker: site.broker, topics: [], clientID: "m1-marker")
                try marker.client.publish(
                    "claw/m1/result", payload: Array(#"{"command":4,"data":"true","session":"marker"}"#.utf8), qos: .atLeastOnce,
                    retain: false)
                try await watcher.waitFor("claw/m1/events", timeout: .seconds(10)) { $0.contains(#""type":"stale_result""#) }
                await marker.stop()

                #expect(!watcher.payloads(on: "claw/m1/events").contains { $0.contains(#""type":"suspect_cleared""#) })
                #expect(watcher.payloads(on: "claw/m1/queue").last?.contains(#""suspect":true"#) == true)
                #expect(try await HTTP.get("\(site.base)/v1/machines/m1").json["suspect"] as? Bool == true)

                // The PC itself saying online again does clear it.
                let back = try await TestSubscriber(broker: site.broker, topics: [], clientID: "m1-pc")
                try back.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await watcher.waitFor("claw/m1/events") { $0.contains(#""type":"suspect_cleared""#) }
                await back.stop()
                await watcher.stop()
            }
        }

        /// m1's PC publishes acks as fast as it can while a game on m2 ends:
        /// m2's result is handled as promptly as ever, and m1's flood is
        /// dropped undecoded beyond its budget.
        @Test func aPCFloodingAcksDoesNotDelayAnotherMachinesResult() async throws {
            try await E2ESite.with(game: "accept_timeout: 120s\nplay_timeout: 120s", simulate: false) { site in
                let simulator = try GatewayBinary.start(
                    ["simulate", "--config", site.site.config.path, "--machine", "m2", "--ack-delay", "0s", "--result-delay", "100ms", "--win-rate", "1"],
                    log: site.site.directory.appendingPathComponent("simulate-m2.log"))
                defer {
                    simulator.signal(SIGKILL)
                    _ = simulator.wait()
                }
                let wild = try await TestSubscriber(broker: site.broker, topics: [], clientID: "m1-pc")
                try wild.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await eventually("both machines online") {
                    let list = try await HTTP.get("\(site.base)/v1/machines").body
                    return list.components(separatedBy: #""online":true"#).count == 3
                }
                let events = try await TestSubscriber(broker: site.broker, topics: ["claw/m2/events"])
                let offer = try await site.generic(from: "bob", to: "m2", #"{"command":6}"#)
                let session = try #require(offer.json["session"] as? String, "\(offer.body)")
                #expect(try await site.generic(from: "bob", to: "m2", #"{"command":12,"data":"\#(session)"}"#).json["result"] as? String == "accepted")

                let stop = Recorder<Bool>()
                let batches = Recorder<Int>()  // one item per 500 acks sent
                let flood = Task.detached {
                    let ack = Array(#"{"command":5,"data":"ok","serial":1}"#.utf8)
                    while stop.items.isEmpty {
                        for _ in 0..<500 { _ = try? wild.client.publish("claw/m1/ack", payload: ack, qos: .atMostOnce, retain: false) }
                        batches.append(500)
                        await Task.yield()
                    }
                }
                try await eventually("the flood to be under way") {
                    let ignored = try await Self.ignored(site, "m1")
                    return batches.items.count >= 40 && ignored > 1_000
                }
                let clock = ContinuousClock()
                let grabbed = clock.now
                #expect(try await site.generic(from: "bob", to: "m2", #"{"command":2,"serial":1}"#).json["result"] as? String == "forwarded")
                try await events.waitFor("claw/m2/events", timeout: .seconds(10)) { $0.contains(#""type":"game_ended""#) }
                let ended = clock.now - grabbed
                stop.append(true)
                await flood.value
                // The PC answers 100 ms after the grab; the rest is the gateway's.
                #expect(ended < .seconds(1), "m2's game ended \(ended) after the grab, with m1 flooding")
                #expect(try await Self.ignored(site, "m2") == 0)
                let games = try await HTTP.get("\(site.base)/v1/machines/m2/games").json["games"] as? [[String: Any]] ?? []
                #expect(games.first?["outcome"] as? String == "won")
                await events.stop()
                await wild.stop()
            }
        }

        /// `claw_machine_messages_ignored_total` of `machine`, from /metrics.
        static func ignored(_ site: E2ESite, _ machine: String) async throws -> Double {
            let text = try await HTTP.get("\(site.base)/metrics").body
            let prefix = #"claw_machine_messages_ignored_total{machine="\#(machine)"} "#
            let line = text.split(separator: "\n").first { $0.hasPrefix(prefix) }
            return line.flatMap { Double($0.dropFirst(prefix.count)) } ?? -1
        }
    }
}
