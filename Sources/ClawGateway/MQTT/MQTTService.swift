import Logging
import Protocol
import ServiceLifecycle

/// The gateway's MQTT side as a service: connects, keeps the retained
/// `claw/gateway/state` up to date, subscribes the machines' inbound topics,
/// hands every inbound message to `handle` on the client's thread (an ack
/// reaches its machine with no hop), and on graceful shutdown publishes
/// `offline` and disconnects.
///
/// It starts after the games (which it feeds) and before the HTTP server and
/// the reply queues, and stops in the reverse order.
struct MQTTService: Service {
    let client: MQTTClient
    let topics: Topics
    let subscriptions: [(topic: String, qos: MQTTQoS)]
    let logger: Logger
    /// Runs after `online` is published on every (re)connect: republish what must be retained.
    let onConnected: @Sendable () -> Void
    /// Every inbound message, in order, on the client's thread; it must not block.
    let handle: @Sendable (MQTTMessage) -> Void

    /// The will that tells subscribers the gateway vanished.
    static func will(topics: Topics) -> MQTTWill {
        MQTTWill(topic: topics.gatewayState, payload: Array(Presence.offline.rawValue.utf8))
    }

    func run() async throws {
        let client = client, topics = topics, logger = logger, onConnected = onConnected
        client.onConnected {
            Self.publishPresence(.online, client: client, topics: topics, logger: logger)
            onConnected()
        }
        for qos in [MQTTQoS.atMostOnce, .atLeastOnce] {
            let batch = subscriptions.filter { $0.qos == qos }.map(\.topic)
            if !batch.isEmpty { client.subscribe(batch, qos: qos) }
        }
        client.onMessage(handle)
        client.start()
        try? await gracefulShutdown()
        Self.publishPresence(.offline, client: client, topics: topics, logger: logger)
        await client.shutdown()
        logger.info("MQTT service stopped")
    }

    private static func publishPresence(_ presence: Presence, client: MQTTClient, topics: Topics, logger: Logger) {
        do {
            try client.publish(topics.gatewayState, payload: Array(presence.rawValue.utf8), qos: .atLeastOnce, retain: true)
        } catch {
            logger.warning(
                "Gateway state not published", metadata: error.shape.metadata(["mqtt.topic": .string(topics.gatewayState)]))
        }
    }
}
