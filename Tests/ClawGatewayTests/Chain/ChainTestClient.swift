import Foundation
import Logging
import Testing

@testable import ClawGateway

/// An MQTT 3.1.1 client of the chain's cluster for the tests, logged in as
/// one of `users.conf`'s users: records what it receives and every SUBACK.
final class ChainTestClient: Sendable {
    let client: MQTTClient
    private let received = Recorder<MQTTMessage>()
    private let acks = Recorder<MQTTSubscribeAck>()

    /// Connects to the first of `urls` that answers (the others in turn).
    init(
        _ urls: [String], user: String, password: String? = nil, clientID: String? = nil, cleanSession: Bool = true,
        waitForConnection: Bool = true
    ) async throws {
        let clientID = clientID ?? Self.clientID(for: user)
        let brokers = urls.compactMap { URLComponents(string: $0) }.map { MQTTBrokerAddress(host: $0.host ?? "", port: $0.port ?? 1883) }
        var configuration = MQTTClientConfiguration(host: brokers[0].host, port: brokers[0].port, clientID: clientID)
        configuration.alternates = Array(brokers.dropFirst())
        configuration.username = user
        configuration.password = password ?? NATSCluster.passwords[user]
        configuration.protocolVersion = .v311
        configuration.cleanSession = cleanSession
        configuration.keepalive = 5
        client = try MQTTClient(configuration: configuration, logger: Logger(label: "chain-test-client"))
        let received = received, acks = acks
        client.onMessage { received.append($0) }
        client.onSubscribeAck { acks.append($0) }
        client.start()
        if waitForConnection {
            let client = client
            try await eventually("\(user) to connect to the cluster", timeout: .seconds(20)) { client.isConnected }
        }
    }

    /// A client id the chain's login service lets `user` have, new each time.
    static func clientID(for user: String) -> String {
        let test = "test-\(UUID().uuidString.prefix(8))"
        switch user {
        case "router": return "claw-router-\(test)"
        case "recorder": return "claw-recorder-\(test)"
        case let site where site.hasPrefix("site-"): return "claw-\(site)_\(test)"
        default: return test
        }
    }

    var messages: [MQTTMessage] { received.items }
    var subscribeAcks: [MQTTSubscribeAck] { acks.items }

    func payloads(on topic: String) -> [String] {
        messages.filter { $0.topic == topic }.map { String(decoding: $0.payload, as: UTF8.self) }
    }

    /// Subscribes and waits for the SUBACK; returns it.
    @discardableResult
    func subscribe(
        _ topics: [String], qos: MQTTQoS = .atLeastOnce, sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> MQTTSubscribeAck {
        let before = acks.items.count
        client.subscribe(topics, qos: qos)
        let acks = acks
        try await eventually("a SUBACK for \(topics)", timeout: .seconds(20), sourceLocation: sourceLocation) {
            acks.items.count > before
        }
        return acks.items[before]
    }

    /// Waits for a message on `topic` whose payload satisfies `match`, and returns it.
    @discardableResult
    func waitFor(
        _ topic: String, timeout: Duration = .seconds(20), sourceLocation: SourceLocation = #_sourceLocation,
        where match: @escaping (MQTTMessage) -> Bool = { _ in true }
    ) async throws -> MQTTMessage? {
        var found: MQTTMessage?
        try await eventually("a message on \(topic)", timeout: timeout, sourceLocation: sourceLocation) {
            found = messages.first { $0.topic == topic && match($0) }
            return found != nil
        }
        return found
    }

    /// Subscribes to `filter` until a retained message on `topic` comes,
    /// asking again every few seconds as the router does: a NATS node takes
    /// a retained message into its own store a moment after the cluster has
    /// it, and a subscription in between gets nothing retained.
    func retained(
        _ topic: String, filter: String, qos: MQTTQoS = .atLeastOnce, timeout: Duration = .seconds(30),
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> MQTTMessage? {
        let deadline = ContinuousClock.now + timeout
        while true {
            let before = messages.count
            #expect(try await subscribe([filter], qos: qos, sourceLocation: sourceLocation).refused.isEmpty, sourceLocation: sourceLocation)
            let asked = ContinuousClock.now
            while ContinuousClock.now - asked < .seconds(3) {
                if let found = messages.dropFirst(before).first(where: { $0.topic == topic && $0.retain }) { return found }
                try await Task.sleep(for: .milliseconds(10))
            }
            if ContinuousClock.now >= deadline {
                Issue.record("no retained message on \(topic) in \(timeout) (\(messages.count - before) others)", sourceLocation: sourceLocation)
                return nil
            }
        }
    }

    /// Publishes, retrying while the client is between nodes.
    func publish(_ topic: String, _ payload: String, retain: Bool = false, qos: MQTTQoS = .atLeastOnce) async throws {
        var published = false
        try await eventually("a publish to \(topic)", timeout: .seconds(20)) {
            do {
                try client.publish(topic, payload: Array(payload.utf8), qos: qos, retain: retain)
                published = true
            } catch {}
            return published
        }
    }

    func stop() async {
        await client.shutdown()
    }
}
