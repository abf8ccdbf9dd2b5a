import Foundation
import Testing

@testable import ClawGateway

extension ChainSuites {
    /// `claw-gateway bridge-config`: the snippet it prints, and a real
    /// mosquitto running it against the real cluster (SPEC §9): the read-only
    /// streams go out under the site's prefix, the rest stays at the site.
    @Suite struct BridgeConfigTests {
        @Test func withoutAChainThereIsNoBridgeAndTheOperatorIsToldWhy() throws {
            let broker = try MosquittoBroker(config: nil)
            let site = try TestSite(broker: broker)
            let result = try GatewayBinary.run(["bridge-config", "--config", site.config.path])
            #expect(result.status == 78)
            #expect(result.error.contains("chain: is not set"), "\(result.error)")
            #expect(result.output.isEmpty)
        }

        @Test func theBridgeCarriesTheReadOnlyStreamsOutAndNothingElse() async throws {
            let cluster = try await NATSCluster.start()
            let placeholder = try MosquittoBroker(config: nil)
            let site = try TestSite(
                broker: placeholder,
                extra: """
                    chain:
                      site: arcade-1
                      bus: [\(cluster.mqttURLs.joined(separator: ", "))]
                      username: site-arcade-1
                      password: \(NATSCluster.passwords["site-arcade-1"] ?? "")

                    """)
            let result = try GatewayBinary.run(["bridge-config", "--config", site.config.path])
            #expect(result.status == 0, "\(result.error)")
            let lines = Set(result.output.split(separator: "\n").map(String.init))
            let addresses = cluster.nodes.map { "127.0.0.1:\($0.mqttPort)" }.joined(separator: " ")
            for expected in [
                "connection claw-chain-arcade-1", "address \(addresses)", "round_robin true",
                "bridge_protocol_version mqttv311", "try_private false", "cleansession false",
                "remote_clientid claw-bridge-arcade-1", "restart_timeout 1 5", "remote_username site-arcade-1",
                "topic +/queue out 1 claw/ claw/arcade-1/", "topic +/state out 1 claw/ claw/arcade-1/",
                "topic +/events out 1 claw/ claw/arcade-1/", "topic +/stats out 0 claw/ claw/arcade-1/",
            ] {
                #expect(lines.contains(expected), "missing \(expected) in:\n\(result.output)")
            }
            #expect(!lines.contains { $0.hasPrefix("topic") && !$0.contains(" out ") }, "nothing comes in")
            #expect(!result.output.contains("remote_clientid") || !lines.contains { $0.hasPrefix("remote_clientid") && $0.contains(".") })

            // The snippet, as printed, in a real site broker.
            let broker = try MosquittoBroker.start(config: "allow_anonymous true\n" + result.output)
            defer { broker.stop() }
            let watcher = try await ChainTestClient(cluster.mqttURLs, user: "site-arcade-1")
            // Every two-level topic of the site: `#` would include `claw/arcade-1` itself, which the user may not read.
            #expect(try await watcher.subscribe(["claw/arcade-1/+/+"]).refused.isEmpty)
            let local = try await ChainTestClient([broker.url], user: "pc", password: "")
            try await local.publish("claw/m1/state", "online", retain: true)
            let state = try await watcher.waitFor("claw/arcade-1/m1/state", timeout: .seconds(30))
            #expect(state.map { String(decoding: $0.payload, as: UTF8.self) } == "online")
            try await local.publish("claw/m1/control", #"{"command":1,"data":"left","serial":1}"#)
            try await local.publish("claw/m1/result", #"{"command":4,"data":"true"}"#)
            try await local.publish("claw/m1/events", #"{"type":"game_ended"}"#)
            try await local.publish("claw/m1/queue", #"{"length":0}"#)
            try await local.publish("claw/gateway/stats", #"{"uptime_s":1}"#, qos: .atMostOnce)
            try await watcher.waitFor("claw/arcade-1/m1/events")
            try await watcher.waitFor("claw/arcade-1/m1/queue")
            try await watcher.waitFor("claw/arcade-1/gateway/stats")
            let topics = Set(watcher.messages.map(\.topic))
            #expect(!topics.contains { $0.hasSuffix("/control") || $0.hasSuffix("/result") }, "\(topics)")
            // The bridge's state stays on the site broker, where operators watch it.
            let bridgeState = try await ChainTestClient([broker.url], user: "operator", password: "")
            try await bridgeState.subscribe(["$SYS/broker/connection/+/state"])
            let up = try await bridgeState.waitFor("$SYS/broker/connection/claw-bridge-arcade-1/state")
            #expect(up.map { String(decoding: $0.payload, as: UTF8.self) } == "1")
            #expect(!topics.contains { $0.hasPrefix("$SYS") })
            for client in [watcher, local, bridgeState] { await client.stop() }
        }
    }
}
