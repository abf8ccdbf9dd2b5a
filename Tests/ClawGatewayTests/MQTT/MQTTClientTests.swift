import Foundation
import Logging
import Protocol
import ServiceLifecycle
import Synchronization
import Testing

@testable import ClawGateway
extension HeavySuites {
    @Suite("MQTT client against a real mosquitto")
    struct MQTTClientTests {
        let logger = Logger(label: "test")

        private func client(
            _ broker: MosquittoBroker, id: String, will: MQTTWill? = nil, tls: TLSSettings? = nil
        ) throws -> MQTTClient {
            var configuration = MQTTClientConfiguration(host: "127.0.0.1", port: broker.port, clientID: id)
            configuration.will = will
            configuration.tls = tls
            configuration.reconnectDelay = 1...2
            return try MQTTClient(configuration: configuration, logger: logger)
        }

        @Test("a message published by one client reaches a subscriber")
        func roundTrip() async throws {
            let broker = try MosquittoBroker.start()
            let subscriber = try await TestSubscriber(broker: broker, topics: ["t/#"])
            let publisher = try client(broker, id: "pub")
            publisher.start()
            try await eventually("the publisher to connect") { publisher.isConnected }
            try publisher.publish("t/x", payload: Array("hello".utf8), qos: .atLeastOnce)
            try publisher.publish("t/y", payload: [0, 1, 2, 255])
            let hello = try await subscriber.waitFor("t/x")
            #expect(hello == "hello")
            try await eventually("the binary payload") { subscriber.messages.contains { $0.topic == "t/y" } }
            #expect(subscriber.messages.first { $0.topic == "t/y" }?.payload == [0, 1, 2, 255])
            await publisher.shutdown()
            await subscriber.stop()
        }

        @Test("an inbound message over the size limit is dropped before it is copied, and counted")
        func oversizedInboundMessages() async throws {
            let broker = try MosquittoBroker.start()
            var configuration = MQTTClientConfiguration(host: "127.0.0.1", port: broker.port, clientID: "gateway-like")
            configuration.maxInboundPayload = 4096
            let receiver = try MQTTClient(configuration: configuration, logger: logger)
            receiver.subscribe(["m/ack"], qos: .atMostOnce)
            let received = Recorder<Int>()
            receiver.onMessage { received.append($0.payload.count) }
            receiver.start()
            let pc = try client(broker, id: "pc")
            pc.start()
            try await eventually("both to connect") { receiver.isConnected && pc.isConnected }
            // The subscription is made on connect: wait until a small message gets through.
            try await eventually("the subscription") {
                try pc.publish("m/ack", payload: Array("ping".utf8))
                return !received.items.isEmpty
            }
            try pc.publish("m/ack", payload: [UInt8](repeating: 0x41, count: 20 * 1024 * 1024))
            try pc.publish("m/ack", payload: [UInt8](repeating: 0x42, count: 4097))
            try pc.publish("m/ack", payload: [UInt8](repeating: 0x43, count: 4096))
            try await eventually("the message at the limit") { received.items.contains(4096) }
            #expect(received.items.allSatisfy { $0 <= 4096 })
            #expect(receiver.oversizedMessages == 2)
            await pc.shutdown()
            await receiver.shutdown()
        }

        @Test("a publish while disconnected fails at once and is not delivered later")
        func publishWhileDisconnected() async throws {
            let broker = try MosquittoBroker()  // not started
            let publisher = try client(broker, id: "early")
            publisher.start()
            #expect(throws: MQTTError.self) {
                try publisher.publish("t/late", payload: Array("late".utf8))
            }
            do {
                try publisher.publish("t/late", payload: Array("late".utf8))
            } catch {
                #expect(error.code == .notConnected)
            }
            try broker.start()
            let subscriber = try await TestSubscriber(broker: broker, topics: ["t/#"])
            try await eventually("the publisher to connect once the broker is up") { publisher.isConnected }
            try publisher.publish("t/now", payload: Array("now".utf8))
            try await subscriber.waitFor("t/now")
            #expect(subscriber.payloads(on: "t/late").isEmpty)
            await publisher.shutdown()
            await subscriber.stop()
        }

        @Test("until a connection's hooks have run, only they publish: another thread's publish fails at once, never waits")
        func onlyTheConnectedHooksPublishUntilTheyAreDone() async throws {
            let broker = try MosquittoBroker.start()
            let subscriber = try await TestSubscriber(broker: broker, topics: ["t/#"])
            let publisher = try client(broker, id: "hooked")
            let inHook = Atomic<Bool>(false)
            let release = DispatchSemaphore(value: 0)
            publisher.onConnected {
                inHook.store(true, ordering: .releasing)
                _ = release.wait(timeout: .now() + 10)
                _ = try? publisher.publish("t/order", payload: Array("hook".utf8), qos: .atLeastOnce)
            }
            publisher.start()
            try await eventually("the connected hook to be running") { inHook.load(ordering: .acquiring) }
            // Connected, but not to this thread until the hooks are done: it says so, and its publish fails.
            #expect(!publisher.isConnected)
            let started = ContinuousClock.now
            let refused = await Task.detached { () -> MQTTError? in
                do throws(MQTTError) {
                    try publisher.publish("t/order", payload: Array("other".utf8), qos: .atLeastOnce)
                    return nil
                } catch {
                    return error
                }
            }.value
            #expect(refused?.code == .notConnected, "refused while the hooks run")
            #expect(ContinuousClock.now - started < .seconds(1), "at once, not after the hooks")
            release.signal()
            try await eventually("the hook's message") { subscriber.payloads(on: "t/order") == ["hook"] }
            // Once the hooks are done, everyone publishes.
            try await eventually("the connection open to all") {
                (try? publisher.publish("t/order", payload: Array("after".utf8), qos: .atLeastOnce)) != nil
            }
            try await eventually("both messages") { subscriber.payloads(on: "t/order") == ["hook", "after"] }
            await publisher.shutdown()
            await subscriber.stop()
        }

        @Test("a client started while the broker is down connects when it comes up, and resubscribes")
        func startsWhileBrokerDown() async throws {
            let broker = try MosquittoBroker()
            let waiting = try client(broker, id: "waiting")
            waiting.subscribe(["t/in"], qos: .atLeastOnce)
            let connects = ConnectCounter()
            waiting.onConnected { connects.increment() }
            waiting.start()
            try await eventually("a refused connect to be reported") { waiting.lastError != nil }
            #expect(!waiting.isConnected)
            try broker.start()
            try await eventually("the first connect") { waiting.isConnected }
            try await eventually("the connected hook") { connects.value == 1 }
            let publisher = try client(broker, id: "pub2")
            publisher.start()
            try await eventually("the publisher") { publisher.isConnected }
            let received = Mutex<[MQTTMessage]>([])
            waiting.onMessage { message in received.withLock { $0.append(message) } }
            // Published again on every look until one arrives: the
            // subscription is renewed on connect, a moment after the hook.
            try await eventually("a message through the subscription made before connecting") {
                if received.withLock({ !$0.isEmpty }) { return true }
                try publisher.publish("t/in", payload: Array("x".utf8))
                return false
            }
            #expect(received.withLock { $0.first?.topic } == "t/in")
            #expect(waiting.connectCount == 1)
            await publisher.shutdown()
            await waiting.shutdown()
        }

        @Test("the last will is published when the gateway process dies without a goodbye")
        func willOnCrash() async throws {
            let broker = try MosquittoBroker.start()
            let subscriber = try await TestSubscriber(broker: broker, topics: ["claw/gateway/state"])
            let files = try TestSite(broker: broker)
            let gateway = try GatewayBinary.start(["run", "--config", files.config.path], log: files.log)
            try await subscriber.waitFor("claw/gateway/state") { $0 == "online" }
            subscriber.clear()
            gateway.signal(SIGKILL)
            gateway.wait()
            let state = try await subscriber.waitFor("claw/gateway/state", timeout: .seconds(15))
            #expect(state == "offline")
            await subscriber.stop()
        }

        @Test("SIGTERM publishes offline and exits 0")
        func gracefulStop() async throws {
            let broker = try MosquittoBroker.start()
            let subscriber = try await TestSubscriber(broker: broker, topics: ["claw/gateway/state"])
            let files = try TestSite(broker: broker)
            let gateway = try GatewayBinary.start(["run", "--config", files.config.path], log: files.log)
            try await subscriber.waitFor("claw/gateway/state") { $0 == "online" }
            subscriber.clear()
            gateway.signal(SIGTERM)
            #expect(await gateway.wait(timeout: 15) == 0, "\(files.logText)")
            let state = try await subscriber.waitFor("claw/gateway/state")
            #expect(state == "offline")
            await subscriber.stop()
        }

        @Test("after the broker is killed and restarted the gateway reconnects and republishes its state")
        func reconnectRepublishes() async throws {
            let broker = try MosquittoBroker.start()
            let topics = Topics()
            var configuration = MQTTClientConfiguration(host: "127.0.0.1", port: broker.port, clientID: "gw")
            configuration.will = MQTTService.will(topics: topics)
            configuration.reconnectDelay = 1...2
            let client = try MQTTClient(configuration: configuration, logger: logger)
            let republished = ConnectCounter()
            let service = MQTTService(
                client: client, topics: topics, subscriptions: [("claw/m1/ack", .atMostOnce)], logger: logger,
                onConnected: { republished.increment() }, handle: { _ in })
            let group = ServiceGroup(services: [service], logger: logger)
            let running = Task { try await group.run() }

            try await eventually("the first connect") { client.isConnected && republished.value == 1 }
            broker.kill()
            try await eventually("the lost connection to be noticed") { !client.isConnected }
            #expect(throws: MQTTError.self) { try client.publish("claw/m1/control", payload: [1]) }
            try broker.start()  // no persistence: the retained state is gone until republished
            try await eventually("the reconnect", timeout: .seconds(20)) { client.isConnected && republished.value == 2 }
            let subscriber = try await TestSubscriber(broker: broker, topics: ["claw/gateway/state"])
            let state = try await subscriber.waitFor("claw/gateway/state")
            #expect(state == "online")

            await group.triggerGracefulShutdown()
            try await running.value
            try await subscriber.waitFor("claw/gateway/state") { $0 == "offline" }
            await subscriber.stop()
        }

        @Test("with several brokers, one that is down is skipped for the next, and a lost one for another")
        func triesTheNextBroker() async throws {
            let first = try MosquittoBroker.start(), second = try MosquittoBroker.start()
            let nothing = try FreePort.next()
            var configuration = MQTTClientConfiguration(host: "127.0.0.1", port: nothing, clientID: "several")
            configuration.alternates = [first, second].map { MQTTBrokerAddress(host: "127.0.0.1", port: $0.port) }
            configuration.reconnectDelay = 1...2
            let client = try MQTTClient(configuration: configuration, logger: logger)
            client.start()
            try await eventually("a connection to the first broker that answers") { client.isConnected }
            #expect(client.broker.port == first.port)
            first.kill()
            try await eventually("a connection to the other broker") { client.broker.port == second.port && client.isConnected }
            #expect(client.connectCount == 2)
            await client.shutdown()
        }

        /// (Refused subscriptions: mosquitto 2.0 grants every SUBSCRIBE and
        /// filters by ACL on delivery, so they are tested against NATS, in
        /// NATSClusterTests.)
        @Test("a dropped connection is made again, and every SUBACK is reported")
        func dropAndSubscribeAcks() async throws {
            let broker = try MosquittoBroker.start()
            let acks = Recorder<MQTTSubscribeAck>()
            let client = try client(broker, id: "acks")
            client.onSubscribeAck { acks.append($0) }
            client.subscribe(["a/1", "b/2"], qos: .atLeastOnce)
            client.start()
            try await eventually("the first SUBACK") { acks.items.count == 1 }
            #expect(acks.items[0] == MQTTSubscribeAck(granted: ["a/1", "b/2"], refused: []))
            client.dropConnection(reason: "test")
            try await eventually("the connection made again, and its SUBACK") { client.connectCount == 2 && acks.items.count == 2 }
            #expect(acks.items[1] == acks.items[0])
            await client.shutdown()
        }

        @Test("TLS: connects with the CA that signed the broker's certificate")
        func tlsWithRightCA() async throws {
            let tls = try TLSFixture.make()
            let broker = try MosquittoBroker.start(config: tls.brokerConfig)
            let secure = try client(broker, id: "tls", tls: TLSSettings(caFile: tls.caCertificate.path))
            secure.subscribe(["t/tls"], qos: .atLeastOnce)
            secure.start()
            try await eventually("the TLS connection") { secure.isConnected }
            let received = Recorder<MQTTMessage>()
            secure.onMessage { received.append($0) }
            try secure.publish("t/tls", payload: Array("secret".utf8), qos: .atLeastOnce)
            try await eventually("the message back over TLS") { !received.items.isEmpty }
            #expect(received.items.first?.payload == Array("secret".utf8))
            await secure.shutdown()
        }

        @Test("TLS: a wrong CA never connects and says why")
        func tlsWithWrongCA() async throws {
            let tls = try TLSFixture.make()
            let other = try TLSFixture.make(name: "some-other-ca")
            let broker = try MosquittoBroker.start(config: tls.brokerConfig)
            let secure = try client(broker, id: "tls-wrong", tls: TLSSettings(caFile: other.caCertificate.path))
            secure.start()
            try await eventually("an error to be reported") { secure.lastError != nil }
            #expect(!secure.isConnected)
            #expect(secure.connectCount == 0)
            let error = secure.lastError ?? ""
            #expect(error.lowercased().contains("certificate") || error.lowercased().contains("tls"), "\(error)")
            await secure.shutdown()
        }

        @Test("TLS: a missing CA file is refused when the client is made")
        func tlsMissingFile() throws {
            let broker = try MosquittoBroker()
            #expect(throws: MQTTError.self) {
                _ = try client(broker, id: "tls-missing", tls: TLSSettings(caFile: "/nonexistent/ca.crt"))
            }
        }
    }

    /// Counts calls from any thread.
    final class ConnectCounter: Sendable {
        private let count = Mutex(0)
        func increment() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }
}
