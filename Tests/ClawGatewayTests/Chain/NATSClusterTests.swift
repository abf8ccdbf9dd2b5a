import Foundation
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// The chain's cluster as deploy/chain/ configures it: three nodes,
    /// retained messages across nodes, and users held to their own topics.
    @Suite struct NATSClusterTests {
        @Test func aRetainedMessagePublishedThroughOneNodeIsReadThroughAnother() async throws {
            let cluster = try await NATSCluster.start()
            let site = try await ChainTestClient([cluster.mqttURLs[0]], user: "site-arcade-1")
            let directory = #"{"site":"arcade-1","machines":[]}"#
            try await site.publish("claw/arcade-1/gateway/directory", directory, retain: true)
            await site.stop()

            // A router that comes later, on another node, gets it from the cluster.
            let router = try await ChainTestClient([cluster.mqttURLs[2]], user: "router")
            let ack = try await router.subscribe(["claw/+/gateway/directory"])
            #expect(ack.refused.isEmpty)
            let message = try await router.waitFor("claw/arcade-1/gateway/directory")
            #expect(message?.retain == true)
            #expect(message.map { String(decoding: $0.payload, as: UTF8.self) } == directory)
            await router.stop()
        }

        @Test func aSiteMayNeitherReadNorWriteAnotherSitesTopics() async throws {
            let cluster = try await NATSCluster.start()
            let url = [cluster.mqttURLs[1]]
            let arcade1 = try await ChainTestClient(url, user: "site-arcade-1")
            let arcade2 = try await ChainTestClient(url, user: "site-arcade-2")
            let router = try await ChainTestClient(url, user: "router")

            // A subscription outside its own subtree is refused in the SUBACK; its own is granted.
            let refused = try await arcade1.subscribe(["claw/arcade-2/inbox"])
            #expect(refused.refused == ["claw/arcade-2/inbox"])
            let everything = try await arcade1.subscribe(["claw/#"])
            #expect(everything.refused == ["claw/#"])
            let own = try await arcade1.subscribe(["claw/arcade-1/inbox"])
            #expect(own == MQTTSubscribeAck(granted: ["claw/arcade-1/inbox"], refused: []))
            #expect(try await arcade2.subscribe(["claw/arcade-2/inbox"]).refused.isEmpty)
            #expect(try await router.subscribe(["claw/+/gateway/heartbeat"]).refused.isEmpty)

            // A publish outside its subtree does not arrive. The marker after
            // it, on the same connection, shows the cluster handled it; the
            // router's copy after that shows arcade-2's inbox works.
            try await arcade1.publish("claw/arcade-2/inbox", "forged")
            try await arcade1.publish("claw/arcade-1/gateway/heartbeat", "marker")
            try await router.waitFor("claw/arcade-1/gateway/heartbeat")
            try await router.publish("claw/arcade-2/inbox", "from-router")
            try await arcade2.waitFor("claw/arcade-2/inbox") { String(decoding: $0.payload, as: UTF8.self) == "from-router" }
            #expect(arcade2.payloads(on: "claw/arcade-2/inbox") == ["from-router"])

            // Wrong password: never connected.
            let intruder = try await ChainTestClient(url, user: "site-arcade-1", password: "wrong", waitForConnection: false)
            try await eventually("the refusal of a wrong password", timeout: .seconds(10)) { intruder.client.lastError != nil }
            #expect(!intruder.client.isConnected)
            for client in [arcade1, arcade2, router, intruder] { await client.stop() }
        }
    }
}
