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
    private let reader: Task<Void, Never>

    init(broker: MosquittoBroker, topics: [String], clientID: String = "test-sub-\(UUID().uuidString.prefix(6))") async throws {
        let configuration = MQTTClientConfiguration(host: "127.0.0.1", port: broker.port, clientID: clientID)
        client = try MQTTClient(configuration: configuration, logger: Logger(label: "test-subscriber"))
        client.subscribe(topics, qos: .atLeastOnce)
        let client = client, received = received
        reader = Task {
            for await message in client.messages {
                received.append(message)
            }
        }
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

    func clear() {
        received.removeAll()
    }

    func stop() async {
        await client.shutdown()
        await reader.value
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
