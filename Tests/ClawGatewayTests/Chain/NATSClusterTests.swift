import Foundation
import Testing

@testable import ClawGateway

extension ChainSuites {
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
            let message = try await router.retained("claw/arcade-1/gateway/directory", filter: "claw/+/gateway/directory")
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
    
        /// SPEC §9: a site's login cannot take over the session of another
        /// site's link, a router or the recorder. NATS cannot tie client ids
        /// to logins; the login service (the auth callout) does.
        @Test func noLoginTakesOverAnotherClientsSession() async throws {
            let cluster = try await NATSCluster.start()
            let url = [cluster.mqttURLs[0]]
            let victims = [
                ("recorder", "claw-recorder-main"), ("router", "claw-router-one-1"), ("site-arcade-2", "claw-site-arcade-2"),
                ("site-arcade-2", "claw-bridge-arcade-2"),
            ]
            var connected: [ChainTestClient] = []
            for (user, id) in victims { connected.append(try await ChainTestClient(url, user: user, clientID: id)) }
            var attempts: [ChainTestClient] = []
            for (_, id) in victims {
                attempts.append(try await ChainTestClient(url, user: "site-arcade-1", clientID: id, waitForConnection: false))
            }
            // The router's login as a site's link, and a site's own login under a client id that is nobody's.
            attempts.append(try await ChainTestClient(url, user: "router", clientID: "claw-site-arcade-1", waitForConnection: false))
            attempts.append(try await ChainTestClient(url, user: "site-arcade-1", clientID: "anything", waitForConnection: false))
            try await eventually("every attempt refused", timeout: .seconds(15)) { attempts.allSatisfy { $0.client.lastError != nil } }
            #expect(attempts.allSatisfy { !$0.client.isConnected && $0.client.connectCount == 0 })
            // A site's own extra session (a tool of its own) is its own.
            let tool = try await ChainTestClient(url, user: "site-arcade-1", clientID: "claw-site-arcade-1_tool")
            #expect(connected.allSatisfy { $0.client.isConnected && $0.client.connectCount == 1 }, "no victim was knocked off")
            #expect(cluster.loginLog(0).contains("is not one of site-arcade-1's") || cluster.loginLog(1).contains("is not one of site-arcade-1's")
                || cluster.loginLog(2).contains("is not one of site-arcade-1's"))
            for client in connected + attempts + [tool] { await client.stop() }
        }

        /// SPEC §9: the routes between nodes are authenticated, the monitoring
        /// port listens on loopback, and JetStream syncs before it acknowledges.
        @Test func aNodeWithoutTheClusterPasswordCannotJoinAndTheMonitorIsLoopbackAndSyncsAlways() async throws {
            let cluster = try await NATSCluster.start()
            let varz = try await HTTP.get("\(cluster.monitorURLs[0])/varz").json
            #expect(varz["http_host"] as? String == "127.0.0.1")
            let jetstream = (varz["jetstream"] as? [String: Any])?["config"] as? [String: Any]
            #expect(jetstream?["sync_always"] as? Bool == true)

            // A rogue node routes to node 1 without the password.
            let rogue = try TemporaryDirectory.make(prefix: "rogue")
            let config = rogue.appendingPathComponent("rogue.conf")
            let clusterPort = try FreePort.next()
            try """
                server_name: rogue
                host: 127.0.0.1
                port: \(try FreePort.next())
                cluster { name: claw-chain, host: 127.0.0.1, port: \(clusterPort), routes: [nats-route://127.0.0.1:\(cluster.nodes[0].clusterPort)] }
                """.write(to: config, atomically: true, encoding: .utf8)
            let log = rogue.appendingPathComponent("rogue.log")
            let process = try ChildProcess(try NATSCluster.executable().path, ["-c", config.path], output: log)
            defer {
                process.signal(SIGKILL)
                process.wait()
            }
            try await eventually("the rogue's route refused", timeout: .seconds(15)) {
                cluster.log(0).contains("Authentication Failure") || cluster.log(0).contains("Authorization Violation")
            }
            let routez = try await HTTP.get("\(cluster.monitorURLs[0])/routez").json
            let peers = (routez["routes"] as? [[String: Any]] ?? []).compactMap { $0["remote_name"] as? String }
            #expect(!peers.contains("rogue") && Set(peers).isSuperset(of: ["chain-2", "chain-3"]), "\(peers)")
        }
    }
}
