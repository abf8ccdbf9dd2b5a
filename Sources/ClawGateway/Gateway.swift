import Logging
import Protocol
import ServiceLifecycle

/// The running parts of one gateway, wired together from a config.
///
/// `services` are in start order: the games (with their storage) first, then
/// MQTT, so that by the time a machine's message arrives its game is
/// restored; the service group stops them in reverse.
struct Gateway {
    let config: GatewayConfig
    let mqtt: MQTTClient
    let store: GameStore
    let arcade: Arcade
    let services: [any Service]

    static func build(
        config: GatewayConfig, logger: Logger, clock: GameClock = .system, players: (any PlayerChannel)? = nil
    ) async throws -> Gateway {
        let topics = config.topics
        let mqtt = try MQTTClient(
            configuration: MQTTClientConfiguration(settings: config.mqtt, will: MQTTService.will(topics: topics)),
            logger: logger)
        let store = try GameStore(path: config.storage.path)
        let environment = MachineEnvironment(
            clock: clock, publisher: mqtt, players: players ?? LoggedReplies(logger: logger), store: store, logger: logger)
        let arcade = try Arcade(config: config, environment: environment)
        let mqttService = MQTTService(
            client: mqtt, topics: topics, subscriptions: arcade.subscriptions, logger: logger,
            onConnected: { arcade.republish() },
            handle: { message in arcade.route(message) })
        return Gateway(
            config: config, mqtt: mqtt, store: store, arcade: arcade,
            services: [ArcadeService(arcade: arcade, store: store, logger: logger), mqttService])
    }
}
