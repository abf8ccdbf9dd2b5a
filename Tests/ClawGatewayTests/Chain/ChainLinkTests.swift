import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension ChainSuites {
    /// A real gateway with `chain:` against the three-node cluster of
    /// deploy/chain/: its directory, its heartbeat, a refused subscription,
    /// and a killed node.
    @Suite struct ChainLinkTests {
        /// A gateway (and its own mosquitto) whose chain link dials `cluster`.
        final class ChainSite {
            let broker: MosquittoBroker
            let site: TestSite
            var gateway: ChildProcess?

            init(cluster: NATSCluster, site name: String = "arcade-1", user: String = "site-arcade-1", topicPrefix: String = "claw") throws {
                broker = try MosquittoBroker.start()
                site = try TestSite(
                    broker: broker, machines: ["m1", "m2"],
                    extra: """
                        chain:
                          site: \(name)
                          bus: [\(cluster.mqttURLs.joined(separator: ", "))]
                          username: \(user)
                          password: \(NATSCluster.passwords[user] ?? "")

                        """, topicPrefix: topicPrefix)
                gateway = try GatewayBinary.start(["run", "--config", site.config.path], log: site.log)
            }

            var base: String { "http://127.0.0.1:\(site.httpPort)" }

            func readiness() async -> HTTP.Answer? {
                try? await HTTP.get("\(base)/readyz")
            }

            func stop() async {
                if let gateway {
                    gateway.signal(SIGTERM)
                    if await gateway.wait(timeout: 10) == nil {
                        gateway.signal(SIGKILL)
                        gateway.wait()
                    }
                }
                gateway = nil
                broker.stop()
            }
        }

        /// Which node the site's link is connected to, from the nodes' own monitoring.
        static func nodeHolding(_ clientID: String, in cluster: NATSCluster) async -> Int? {
            for (index, node) in cluster.nodes.enumerated() where node.process != nil {
                let answer = try? await HTTP.get("http://127.0.0.1:\(node.monitorPort)/connz?mqtt_client=\(clientID)")
                if let count = answer?.json["num_connections"] as? Int, count > 0 { return index }
            }
            return nil
        }

        @Test func theDirectoryIsRetainedOnTheClusterAndHeartbeatsComeEverySecond() async throws {
            let cluster = try await NATSCluster.start()
            let site = try ChainSite(cluster: cluster)
            try await eventually("the gateway to be ready with its chain link", timeout: .seconds(30)) {
                await site.readiness()?.status == 200
            }
            // Readable through any node, by a router that was not there when it was published.
            for url in cluster.mqttURLs {
                let router = try await ChainTestClient([url], user: "router")
                let message = try await router.retained("claw/arcade-1/gateway/directory", filter: "claw/+/gateway/directory")
                #expect(message?.retain == true)
                let directory = try message.map { try JSONDecoder().decode(ChainDirectory.self, from: Data($0.payload)) }
                #expect(directory?.site == "arcade-1")
                #expect(directory?.machines.map(\.imAccount) == ["claw_m1", "claw_m2"])
                #expect(directory?.machines.map(\.name) == ["Machine m1", "Machine m2"])
                await router.stop()
            }

            let metrics = try await HTTP.get("\(site.base)/metrics").body
            #expect(metrics.contains("claw_chain_link_up 1"))
            #expect(metrics.contains("claw_chain_link_connects_total 1"))
            #expect(metrics.contains("claw_chain_link_refusals_total 0"))

            let router = try await ChainTestClient([cluster.mqttURLs[1]], user: "router")
            #expect(try await router.subscribe(["claw/+/gateway/heartbeat"]).refused.isEmpty)
            let clock = ContinuousClock()
            var arrivals: [ContinuousClock.Instant] = []
            var seen = 0
            try await eventually("four heartbeats", timeout: .seconds(15)) {
                let count = router.payloads(on: "claw/arcade-1/gateway/heartbeat").count
                if count > seen {
                    arrivals += Array(repeating: clock.now, count: count - seen)
                    seen = count
                }
                return count >= 4
            }
            let beats = router.payloads(on: "claw/arcade-1/gateway/heartbeat").compactMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
            #expect(beats.allSatisfy { $0["site"] as? String == "arcade-1" && $0["ts"] is String })
            let sequence = beats.compactMap { $0["seq"] as? Int }
            #expect(sequence == sequence.sorted() && Set(sequence).count == sequence.count)
            // Three intervals of about a second each.
            let span = arrivals[3] - arrivals[0]
            #expect(span > .milliseconds(2500) && span < .milliseconds(4500), "heartbeats 3 intervals apart took \(span)")
            await router.stop()
            await site.stop()
        }

        @Test func aClusterThatCannotBeReachedKeepsTheSiteNotReadyAndSaysWhy() async throws {
            // A cluster whose nodes are not running: the ports are free.
            let cluster = try NATSCluster()
            let site = try ChainSite(cluster: cluster)
            try await eventually("readyz to say the link is not connected", timeout: .seconds(20)) {
                guard let answer = await site.readiness(), answer.status == 503 else { return false }
                return answer.body.contains("the chain link is not connected to the chain's cluster")
            }
            // Every node was tried in turn.
            try await eventually("every node tried", timeout: .seconds(20)) {
                cluster.nodes.allSatisfy { site.site.logText.contains("mqtt.broker=127.0.0.1:\($0.mqttPort)") }
            }
            #expect(try await HTTP.get("\(site.base)/metrics").body.contains("claw_chain_link_up 0"))
            await site.stop()
        }

        @Test func aSubscriptionTheClusterRefusesIsABrokenLinkOnReadyz() async throws {
            let cluster = try await NATSCluster.start()
            // arcade-1's login may read only claw/arcade-1/..., not arcade/arcade-1/...: a site whose topic prefix is not the chain's.
            let site = try ChainSite(cluster: cluster, topicPrefix: "arcade")
            var reason = ""
            try await eventually("readyz to say the subscription was refused", timeout: .seconds(30)) {
                guard let answer = await site.readiness(), answer.status == 503 else { return false }
                reason = answer.body
                return answer.body.contains("refused the link's subscription to arcade/arcade-1/inbox")
            }
            #expect(reason.contains("Users and what they may do"))
            // It is retried (on the next node), and refused again: counted in the log, never ready.
            try await eventually("a second refusal", timeout: .seconds(20)) {
                site.site.logText.components(separatedBy: "Chain link subscription refused").count > 2
            }
            #expect(await site.readiness()?.status == 503)
            #expect(site.site.logText.contains("chain.refusals=2"))
            let metrics = try await HTTP.get("\(site.base)/metrics").body
            #expect(metrics.contains("claw_chain_link_up 0"))
            #expect(!metrics.contains("claw_chain_link_refusals_total 0") && !metrics.contains("claw_chain_link_refusals_total 1\n"))
            await site.stop()
        }

        @Test func whenTheRoutersBeatsStopTheLinkIsTakenDownAndUpAgain() async throws {
            let cluster = try await NATSCluster.start()
            let site = try ChainSite(cluster: cluster)
            try await eventually("the gateway to be ready with its chain link", timeout: .seconds(30)) {
                await site.readiness()?.status == 200
            }
            let router = try await ChainTestClient([cluster.mqttURLs[2]], user: "router")
            // Beats while they come: no re-establishing.
            var stopped = ContinuousClock().now
            for _ in 0..<3 {
                try await router.publish("claw/arcade-1/inbox", #"{"type":"beat"}"#)
                stopped = ContinuousClock().now
                try await Task.sleep(for: .seconds(1))
            }
            #expect(!site.site.logText.contains("No beat from the chain's routers"))
            try await eventually("the link taken down for silence", timeout: .seconds(15)) {
                site.site.logText.contains("No beat from the chain's routers")
            }
            let noticed = ContinuousClock().now - stopped
            print("chain link re-established \(noticed) after the last beat was published")
            // Not before 5 s of silence; the upper bound leaves room for a loaded machine.
            #expect(noticed > .seconds(5) && noticed < .seconds(12), "noticed after \(noticed)")
            // And up again: reconnected, subscribed, ready.
            try await eventually("the link up again", timeout: .seconds(20)) {
                site.site.logText.components(separatedBy: "Chain link up").count > 2
            }
            try await eventually("ready again", timeout: .seconds(10)) { await site.readiness()?.status == 200 }
            await router.stop()
            await site.stop()
        }

        @Test func killingTheLinksNodeMovesItToAnotherWithinTwentySeconds() async throws {
            let cluster = try await NATSCluster.start()
            let site = try ChainSite(cluster: cluster)
            try await eventually("the gateway to be ready with its chain link", timeout: .seconds(30)) {
                await site.readiness()?.status == 200
            }
            var holder: Int?
            try await eventually("a node to hold the link's connection") {
                holder = await Self.nodeHolding("claw-site-arcade-1", in: cluster)
                return holder != nil
            }
            guard let holder else { return }
            let clock = ContinuousClock()
            let killed = clock.now
            cluster.kill(holder)
            var newHolder: Int?
            try await eventually("the link on another node", timeout: .seconds(20)) {
                newHolder = await Self.nodeHolding("claw-site-arcade-1", in: cluster)
                let ready = await site.readiness()?.status == 200
                return newHolder != nil && ready
            }
            let moved = clock.now - killed
            #expect(newHolder != holder)
            #expect(moved < .seconds(20))
            print("chain link moved from node \(holder + 1) to node \((newHolder ?? -1) + 1) in \(moved)")

            // The directory survived the node, and heartbeats flow again.
            let others = cluster.nodes.indices.filter { $0 != holder }
            let router = try await ChainTestClient(others.map { cluster.mqttURLs[$0] }, user: "router")
            // At QoS 0, as the router subscribes: a QoS 1 subscription is a JetStream
            // consumer, whose SUBACK can stall for 20 s while the cluster elects a new
            // JetStream leader after the kill (docs/ROUTER.md).
            let directory = try await router.retained(
                "claw/arcade-1/gateway/directory", filter: "claw/+/gateway/directory", qos: .atMostOnce)
            #expect(try await router.subscribe(["claw/+/gateway/heartbeat"], qos: .atMostOnce).refused.isEmpty)
            #expect(directory?.retain == true)
            try await router.waitFor("claw/arcade-1/gateway/heartbeat")
            await router.stop()
            await site.stop()
        }
    }
}
