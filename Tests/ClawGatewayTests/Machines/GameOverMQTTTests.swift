import Foundation
import Logging
import Protocol
import ServiceLifecycle
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// The game with a real broker and a real SQLite file: the gateway's services
    /// run in-process, a test client plays the machine PC.
    @Suite(.serialized) struct GameOverMQTTTests {
        @Test func aWholeGameOverMQTT() async throws {
            let broker = try MosquittoBroker.start()
            defer { broker.stop() }
            let site = try TestSite(broker: broker, machines: ["m1"], game: "command_events: true")
            let players = RecordingPlayers()
            let config = try ConfigLoader.load(file: site.config.path)
            let gateway = try await Gateway.build(config: config, logger: Logger(label: "test-gateway"), players: players)
            let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: gateway.services, logger: Logger(label: "test")))
            let running = Task { try await group.run() }

            let pc = try await TestSubscriber(broker: broker, topics: ["claw/m1/control", "claw/m1/camera", "claw/m1/queue", "claw/m1/events"])
            try await eventually("the gateway to connect") { gateway.mqtt.isConnected }
            try pc.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
            try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"online""#) }

            let notify = { (player: String, json: String) async in
                await gateway.arcade.answer(PlayerNotification(from: player, to: "claw_m1", attach: Array(json.utf8), provider: "test"))
            }
            guard case .offered(let session) = await notify("alice", #"{"command":6,"data":"Alice"}"#) else {
                Issue.record("no offer")
                return
            }
            #expect(await notify("bob", #"{"command":6}"#) == .queued(position: 1, length: 1))
            #expect(await notify("alice", #"{"command":12,"data":"\#(session)"}"#) == .accepted(session: session))
            let coin = try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":1001,"data":"1""#) }
            // The PC acks the coin: the game's moves go out only after that.
            let coinSerial = try #require(coin.firstMatch(of: /"serial":(\d+)/)?.1)
            try pc.client.publish("claw/m1/ack", payload: Array(#"{"command":5,"serial":\#(coinSerial)}"#.utf8), qos: .atMostOnce)
            guard case .forwarded(let serial) = await notify("alice", #"{"command":1,"data":"left","serial":7}"#) else {
                Issue.record("move not forwarded")
                return
            }
            let move = try await pc.waitFor("claw/m1/control") { $0.contains(#""command":1,"#) }
            #expect(move == #"{"command":1,"data":"left","serial":\#(serial),"session":"\#(session)","player":"alice"}"#)
            try pc.client.publish("claw/m1/ack", payload: Array(#"{"command":5,"data":"ok","serial":\#(serial)}"#.utf8), qos: .atMostOnce)
            try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"ack""#) && $0.contains(#""player_serial":7"#) }
            _ = await notify("alice", #"{"command":2,"serial":8}"#)
            try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":2,"#) }
            try pc.client.publish(
                "claw/m1/result", payload: Array(#"{"command":4,"data":"false","session":"\#(session)"}"#.utf8), qos: .atLeastOnce)
            try await eventually("alice to get her result") { players.to("alice").contains(WireMessage(.result, data: "false", session: session)) }
            try await eventually("bob to be offered the turn") { players.to("bob").contains { $0.code == .turnOffer } }
            let snapshot = try await pc.waitFor("claw/m1/queue") { $0.contains(#""accid":"bob""#) && $0.contains(#""state":"offered""#) }
            #expect(snapshot.contains(#""machine":"m1""#))
            // Bob's offer was told only once the transition that made it was durable.
            #expect(try gateway.store.gamesNow(machine: "m1", limit: 10, offset: 0).first { $0.player == "alice" }?.outcome == .lost)

            // The PC's will: the machine drops, bob's offer is undone, he keeps the head.
            try pc.client.publish("claw/m1/state", payload: Array("offline".utf8), qos: .atLeastOnce, retain: true)
            try await pc.waitFor("claw/m1/queue") { $0.contains(#""state":"offline""#) && $0.contains(#""waiting":[{"accid":"bob""#) }
            #expect(await notify("bob", #"{"command":1,"data":"up","serial":1}"#).rejectedCode == .machineOffline)

            await group.triggerGracefulShutdown()
            try await running.value
            await pc.stop()
        }

        @Test func snapshotsAreRepublishedAfterTheBrokerComesBack() async throws {
            let broker = try MosquittoBroker.start()
            defer { broker.stop() }
            let site = try TestSite(broker: broker, machines: ["m1"])
            let config = try ConfigLoader.load(file: site.config.path)
            let gateway = try await Gateway.build(config: config, logger: Logger(label: "test-gateway"), players: RecordingPlayers())
            let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: gateway.services, logger: Logger(label: "test")))
            let running = Task { try await group.run() }
            try await eventually("the gateway to connect") { gateway.mqtt.isConnected }
            _ = await gateway.arcade.answer(PlayerNotification(from: "zoe", to: "m1", attach: Array(#"{"command":6}"#.utf8), provider: "test"))

            // mosquitto runs without persistence here: the retained snapshot dies with it.
            broker.kill()
            try await eventually("the gateway to notice") { !gateway.mqtt.isConnected }
            #expect(await gateway.arcade.answer(PlayerNotification(from: "zoe", to: "m1", attach: Array(#"{"command":2,"serial":1}"#.utf8), provider: "test")).rejectedCode == .machineOffline)
            try broker.start()
            let observer = try await TestSubscriber(broker: broker, topics: ["claw/m1/queue"])
            let snapshot = try await observer.waitFor("claw/m1/queue", timeout: .seconds(30)) { $0.contains("zoe") }
            #expect(snapshot.contains(#""state":"offline""#), "no PC has said online on the new broker")
            await observer.stop()
            await group.triggerGracefulShutdown()
            try await running.value
        }
    }
}
