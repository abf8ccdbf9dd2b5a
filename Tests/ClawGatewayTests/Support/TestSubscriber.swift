import Foundation
import Logging
import Synchronization
import Testing

@testable import ClawGateway

/// A real MQTT client that subscribes and records what it receives, for
/// checking what the gateway and the simulator publish.
final class TestSubscriber: Sendable {
    let client: MQTTClient
    private let received = Recorder<MQTTMessage>()

    init(broker: MosquittoBroker, topics: [String], clientID: String = "test-sub-\(UUID().uuidString.prefix(6))") async throws {
        let configuration = MQTTClientConfiguration(host: "127.0.0.1", port: broker.port, clientID: clientID)
        client = try MQTTClient(configuration: configuration, logger: Logger(label: "test-subscriber"))
        client.subscribe(topics, qos: .atLeastOnce)
        let received = received
        client.onMessage { received.append($0) }
        client.start()
        try await eventually("the test subscriber to connect") { client.isConnected }
    }

    var messages: [MQTTMessage] { received.items }

    func payloads(on topic: String) -> [String] {
        messages.filter { $0.topic == topic }.map { String(decoding: $0.payload, as: UTF8.self) }
    }

    /// Waits for a message on `topic` whose payload satisfies `match`, and returns it.
    @discardableResult
    func waitFor(
        _ topic: String, timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation,
        where match: @escaping (String) -> Bool = { _ in true }
    ) async throws -> String {
        var found: String?
        try await eventually("a message on \(topic)", timeout: timeout, sourceLocation: sourceLocation) {
            found = payloads(on: topic).first(where: match)
            return found != nil
        }
        return found ?? ""
    }

    /// Plays the PC's part at the start of a game: waits for the coin (1001)
    /// of `session` on `claw/<machine>/control` and acks it, without which the
    /// game's other commands never go out (docs/PROTOCOL.md, "The coin's ack").
    func ackCoin(machine: String = "m1", session: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let coin = try await waitFor("claw/\(machine)/control", sourceLocation: sourceLocation) {
            $0.hasPrefix(#"{"command":1001,"#) && $0.contains(#""session":"\#(session)""#)
        }
        guard let serial = coin.firstMatch(of: /"serial":(\d+)/)?.1 else {
            Issue.record("a coin without a serial: \(coin)", sourceLocation: sourceLocation)
            return
        }
        try client.publish("claw/\(machine)/ack", payload: Array(#"{"command":5,"serial":\#(serial)}"#.utf8))
    }

    func clear() {
        received.removeAll()
    }

    func stop() async {
        await client.shutdown()
    }
}

/// Items appended from any task, read from the test.
final class Recorder<Item: Sendable>: Sendable {
    private let storage = Mutex<[Item]>([])

    func append(_ item: Item) { storage.withLock { $0.append(item) } }
    func append(contentsOf items: [Item]) { storage.withLock { $0 += items } }
    func removeAll() { storage.withLock { $0.removeAll() } }
    var items: [Item] { storage.withLock { $0 } }
}
