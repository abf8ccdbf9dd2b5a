import AsyncHTTPClient
import Foundation
import Logging
import Protocol
import ServiceLifecycle

/// The running parts of one gateway, wired together from a config.
///
/// `services` are in start order: the games (with their storage), the reply
/// queues, MQTT, then HTTP, so that by the time a notification or a machine's
/// message arrives, everything it needs is up. The service group stops them
/// in reverse: HTTP stops taking requests first, storage closes last.
struct Gateway {
    let config: GatewayConfig
    let mqtt: MQTTClient
    let store: GameStore
    let writer: StorageWriter
    let arcade: Arcade
    let services: [any Service]

    /// The largest message a PC may send the gateway: acks, results and
    /// states are tens of bytes; more is dropped before it is copied.
    static let maxMachineMessage = 4096

    /// - Parameters:
    ///   - players: replaces the IM providers (tests).
    ///   - exportsMetrics: serve `/metrics` (the process-wide
    ///     ``GatewayMetrics/registry``); false leaves the route out.
    static func build(
        config: GatewayConfig, logger: Logger, clock: GameClock = .system, players: (any PlayerChannel)? = nil,
        exportsMetrics: Bool = false
    ) async throws -> Gateway {
        if exportsMetrics { GatewayMetrics.prepare(version: ClawGatewayCommand.version) }
        let topics = config.topics
        var mqttConfiguration = MQTTClientConfiguration(settings: config.mqtt, will: MQTTService.will(topics: topics))
        mqttConfiguration.maxInboundPayload = Self.maxMachineMessage
        let mqtt = try MQTTClient(configuration: mqttConfiguration, logger: logger)
        let store = try GameStore(path: config.storage.path, shipsRecords: config.chain != nil)
        let writer = StorageWriter(store: store, logger: logger)
        let replyClient = replyHTTPClient(config.im)
        let queues = replyQueues(config.im, client: replyClient, logger: logger)
        let channel = players ?? ReplyRouter(
                queues: queues, configured: config.im.providers, clock: clock, logger: logger)
        let feed = ArcadeFeed(machines: config.machines.count, clock: clock, logger: logger) {
            ArcadeFeed.GatewayStatus(
                brokerConnected: mqtt.isConnected, storageWritable: writer.isWritable, repliesFailed: GatewayMetrics.repliesFailed)
        }
        let appServer = AppServer.make(config: config, store: store, client: replyClient, clock: clock, logger: logger)
        var environment = MachineEnvironment(
            clock: clock, publisher: mqtt, players: channel, writer: writer, deadlines: Deadlines(),
            limits: PlayerLimits(perSecond: config.game.maxCommandsPerSecond), logger: logger)
        environment.observers = [feed] + (appServer.map { [$0.mirror] } ?? [])
        let arcade = try Arcade(config: config, environment: environment)
        appServer?.attach(arcade)
        writer.start()
        let mqttService = MQTTService(
            client: mqtt, topics: topics, subscriptions: arcade.subscriptions, logger: logger,
            onConnected: { arcade.republish(connection: mqtt.connection) },
            handle: { message in arcade.route(message) })
        // The one ingress: HTTP copies and a chain's inbox alike (SPEC §9).
        let ingress = Ingress(arcade: arcade, im: config.im, logger: logger, now: clock.wallNow)
        // A site of a chain keeps its own link to the chain's cluster (SPEC §9);
        // copies from its inbox go through the same ingress as HTTP copies.
        let chainLink = try config.chain.map { chain throws(MQTTError) in
            let inbox = ChainInbox(
                ingress: ingress, maxAge: chain.inboxMaxAge, wallNow: clock.wallNow, logger: logger,
                eventLoop: replyClient.eventLoopGroup.any())
            return try ChainLink(
                settings: chain, prefix: config.mqtt.topicPrefix, machines: config.machines, clock: clock, logger: logger,
                inbox: inbox, store: store)
        }
        let exporter: (@Sendable () -> String)? =
            exportsMetrics
            ? { @Sendable in
                if let chainLink { ChainMetrics.export(chainLink) }
                return MetricsExport.text(arcade: arcade, mqtt: mqtt)
            } : nil
        let stats = StatsService(
            arcade: arcade, interval: config.gateway.statsInterval, gatewayID: config.gateway.id, topics: topics, clock: clock,
            start: clock.now(),
            connects: { mqtt.connectCount },
            publish: { topic, payload, expiry throws(MQTTError) in
                try mqtt.publish(topic, payload: payload, qos: .atMostOnce, retain: false, expiry: expiry)
            },
            feed: feed, logger: logger)
        let http = HTTPServer.application(
            HTTPServer.Dependencies(
                config: config, arcade: arcade, ingress: ingress, isBrokerConnected: { mqtt.isConnected }, metrics: exporter, feed: feed,
                uptime: { clock.now() }, now: clock.wallNow, chainProblem: { chainLink?.status.problem }, appServer: appServer),
            logger: logger)
        // The reply queues stop after MQTT, so results that arrive while MQTT
        // winds down still reach their players.
        var services: [any Service] = [ArcadeService(arcade: arcade, logger: logger), ClientService(client: replyClient)]
        services += players == nil ? queues.values.sorted { $0.delivery.provider < $1.delivery.provider } as [any Service] : []
        // The feed stops first: its streams would keep HTTP from stopping.
        services += [mqttService] + (chainLink.map { [ChainLinkService(link: $0, clock: clock, logger: logger)] } ?? [])
        services += (appServer?.services ?? []) + [stats, http, feed]
        return Gateway(config: config, mqtt: mqtt, store: store, writer: writer, arcade: arcade, services: services)
    }

    static func replyQueues(_ im: IMSettings, client: HTTPClient, logger: Logger) -> [String: ReplyQueue] {
        var queues: [String: ReplyQueue] = [:]
        if let netease = im.netease {
            queues["netease"] = ReplyQueue(
                delivery: NetEaseReplies(settings: netease, client: client), concurrency: netease.replyConcurrency,
                logger: logger)
        }
        if let generic = im.generic, let url = generic.outboundURL {
            queues["generic"] = ReplyQueue(
                delivery: GenericReplies(settings: generic, url: url, client: client), concurrency: generic.replyConcurrency,
                logger: logger)
        }
        return queues
    }

    /// The client replies go out through. A reply is never retried, so a
    /// refused connection fails it at once: retrying connections until the
    /// reply's timeout let a dead IM API hold every worker for seconds per
    /// reply, starving the replies behind them (and the stop).
    static func replyHTTPClient(_ im: IMSettings) -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        let timeouts = [im.netease?.replyTimeout, im.generic?.replyTimeout].compactMap { $0 }
        let connect = min(timeouts.max() ?? .seconds(5), .seconds(2))
        configuration.timeout.connect = .milliseconds(Int64(connect.milliseconds))
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }
}

extension IMSettings {
    /// The providers configured.
    var providers: Set<String> {
        Set([netease.map { _ in "netease" }, generic.map { _ in "generic" }].compactMap { $0 })
    }
}

/// Shuts the replies' HTTP client down once the reply queues have stopped
/// (it starts before them, so it stops after them).
struct ClientService: Service {
    let client: HTTPClient

    func run() async throws {
        try? await gracefulShutdown()
        try await client.shutdown()
    }
}
