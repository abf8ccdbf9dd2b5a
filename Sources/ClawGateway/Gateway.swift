import Logging
import Protocol
import ServiceLifecycle

/// The running parts of one gateway, wired together from a config.
///
/// `services` are in start order: MQTT first, so that by the time anything
/// can reach a machine the broker connection is being made; the service
/// group stops them in reverse.
struct Gateway {
    let config: GatewayConfig
    let mqtt: MQTTClient
    let services: [any Service]

    static func build(config: GatewayConfig, logger: Logger) async throws -> Gateway {
        let topics = config.topics
        let mqtt = try MQTTClient(
            configuration: MQTTClientConfiguration(settings: config.mqtt, will: MQTTService.will(topics: topics)),
            logger: logger)
        var subscriptions: [(topic: String, qos: MQTTQoS)] = []
        for machine in config.machines {
            subscriptions.append((topics.machine(machine.id, .ack), .atMostOnce))
            subscriptions.append((topics.machine(machine.id, .result), .atLeastOnce))
            subscriptions.append((topics.machine(machine.id, .state), .atLeastOnce))
        }
        let mqttService = MQTTService(
            client: mqtt, topics: topics, subscriptions: subscriptions, logger: logger,
            onConnected: {},
            handle: { message in
                logger.info(
                    "MQTT message",
                    metadata: [
                        "mqtt.topic": .string(message.topic),
                        "mqtt.payload": .string(String(decoding: message.payload, as: UTF8.self)),
                    ])
            })
        return Gateway(config: config, mqtt: mqtt, services: [mqttService])
    }
}
