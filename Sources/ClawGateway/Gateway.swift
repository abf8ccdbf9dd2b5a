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
    /// Applies `gateway.yaml` again on SIGHUP (SPEC §13).
    let reloader: ConfigReloader
    let services: [any Service]

    /// The largest message a PC may send the gateway: acks, results and
    /// states are tens of bytes; more is dropped before it is copied.
    static let maxMachineMessage = 4096
    /// How long the broker keeps the gateway's MQTT session while it is
    /// away: a day, far longer than any game a restart could take up.
    static let mqttSessionExpiry: UInt32 = 86_400

    /// - Parameters:
    ///   - players: replaces the IM providers (tests).
    ///   - exportsMetrics: serve `/metrics` (the process-wide
    ///     ``GatewayMetrics/registry``); false leaves the route out.
    ///   - listener: where HTTP connections come from; nil binds `http.listen`.
    ///   - file: the file `config` was read from, read again on SIGHUP; nil
    ///     listens for no SIGHUP (tests reload through ``reloader``).
    static func build(
        config: GatewayConfig, logger: Logger, clock: GameClock = .system, players: (any PlayerChannel)? = nil,
        exportsMetrics: Bool = false, listener: HTTPListener? = nil, file: String? = nil
    ) async throws -> Gateway {
        if exportsMetrics { GatewayMetrics.prepare(version: ClawGatewayCommand.version) }
        let topics = config.topics
        var mqttConfiguration = MQTTClientConfiguration(settings: config.mqtt, will: MQTTService.will(topics: topics))
        mqttConfiguration.maxInboundPayload = Self.maxMachineMessage
        // SPEC §13: the broker keeps what the PCs say at QoS 1 while the
        // gateway is away (a restart, a crash), under its fixed client id,
        // and hands it over in order when it is back.
        mqttConfiguration.cleanSession = false
        mqttConfiguration.sessionExpiry = Self.mqttSessionExpiry
        let mqtt = try MQTTClient(configuration: mqttConfiguration, logger: logger)
        let store = try GameStore(
            path: config.storage.path, shipsRecords: config.chain != nil,
            clipsFirst: config.evidence == nil ? [] : EvidenceKeeper.clipped(config.machines))
        let writer = StorageWriter(store: store, logger: logger)
        let replies = Replies(im: config.im, clock: clock, logger: logger, players: players)
        let feed = ArcadeFeed(machines: config.machines.count, clock: clock, logger: logger) {
            ArcadeFeed.GatewayStatus(
                brokerConnected: mqtt.isConnected, storageWritable: writer.isWritable, repliesFailed: GatewayMetrics.repliesFailed)
        }
        // A site of a chain keeps its own link to the chain's cluster (SPEC §9):
        // its connection is made here, once, for the link and the ledger desk.
        let chainBus = try config.chain.map { chain throws(MQTTError) in
            try ChainLink.bus(
                settings: chain, prefix: config.mqtt.topicPrefix, wallet: config.credits != nil, prizes: config.prizes != nil, logger: logger)
        }
        // Games cost credits (SPEC §11): every balance, read from the ledger;
        // at a site of a chain the chain's ledger keeps them, asked over the link.
        let wallets = try config.chain == nil ? config.credits.map { credits throws(StorageError) in
            try Wallets(settings: credits, writer: writer, logger: logger)
        } : nil
        let chainLedger = config.credits == nil ? nil : config.chain.flatMap { chain in
            chainBus.map { bus in
                ChainLedgerDesk(
                    timeout: chain.walletTimeout, bus: bus, topics: ChainTopics(prefix: config.mqtt.topicPrefix, site: chain.site), store: store,
                    writer: writer, resendInterval: chain.resendInterval, clock: clock, logger: logger)
            }
        }
        let ledger: any GameLedger
        if let wallets {
            ledger = wallets
        } else if let chainLedger {
            ledger = chainLedger
        } else {
            ledger = FreeGames(writer: writer)
        }
        if exportsMetrics, wallets != nil { CreditsMetrics.prepare() }
        let appServer = AppServer.make(config: config, store: store, client: replies.client, clock: clock, wallets: wallets, logger: logger)
        var environment = MachineEnvironment(
            clock: clock, publisher: mqtt, players: replies.channel, writer: writer, deadlines: Deadlines(),
            limits: PlayerLimits(perSecond: config.game.maxCommandsPerSecond), logger: logger, ledger: ledger)
        // A video of every game (SPEC §14): the keeper hears games end as an observer.
        let evidence = config.evidence.map { settings in
            EvidenceKeeper(settings: settings, machines: config.machines, store: store, clock: clock, logger: logger)
        }
        if exportsMetrics, let evidence { EvidenceMetrics.prepare(evidence) }
        environment.observers = [feed] + (appServer.map { [$0.mirror] } ?? []) + (evidence.map { [$0] } ?? [])
        let arcade = try Arcade(config: config, environment: environment)
        appServer?.attach(arcade)
        // Prizes owed (SPEC §15): at a site alone its desk keeps the players'
        // choices and the parcels; in a chain the recorder does, centrally.
        let prizes = config.chain == nil ? config.prizes.map { settings in
            PrizeDesk(settings: settings, writer: writer, wallets: wallets, clock: clock, logger: logger, tell: { arcade.tell($0) })
        } : nil
        writer.start()
        let mqttService = MQTTService(
            client: mqtt, topics: topics, subscriptions: arcade.subscriptions, logger: logger,
            onConnected: { arcade.republish(connection: mqtt.connection) },
            handle: { message in arcade.route(message) })
        // The one ingress: HTTP copies and a chain's inbox alike (SPEC §9).
        let ingress = Ingress(arcade: arcade, im: config.im, logger: logger, now: clock.wallNow)
        // What the chain's recorder says of a player's prize, told through the arcade's IM (SPEC §15).
        let tellPlayer: @Sendable (PlayerReply) -> Void = { reply in arcade.tell(reply) }
        let tellPlayers = config.prizes == nil ? nil : tellPlayer
        // Copies from a chain's inbox go through the same ingress as HTTP copies.
        let chainLink = config.chain.flatMap { chain in
            chainBus.map { bus in
                let inbox = ChainInbox(
                    ingress: ingress, maxAge: chain.inboxMaxAge, wallNow: clock.wallNow, logger: logger,
                    eventLoop: replies.client.eventLoopGroup.any())
                return ChainLink(
                    bus: bus, settings: chain, prefix: config.mqtt.topicPrefix, machines: config.machines, clock: clock, logger: logger,
                    inbox: inbox, store: store, ledger: chainLedger, tell: tellPlayers)
            }
        }
        let exporter: (@Sendable () -> String)? =
            exportsMetrics
            ? { @Sendable in
                if let chainLink { ChainMetrics.export(chainLink) }
                if let evidence { EvidenceMetrics.export(evidence) }
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
        let routes = HTTPServer.router(
            HTTPServer.Dependencies(
                config: config, arcade: arcade, ingress: ingress, isBrokerConnected: { mqtt.isConnected }, metrics: exporter, feed: feed,
                uptime: { clock.now() }, now: clock.wallNow, chainProblem: { chainLink?.status.problem }, appServer: appServer,
                wallets: wallets, evidence: evidence, prizes: prizes, logger: logger))
        let http = HTTPServer.service(router: routes, http: config.http, ingress: ingress, listener: listener, logger: logger)
        let reloader = ConfigReloader(
            file: file, running: config, arcade: arcade, mqtt: mqtt, feed: feed, chainLink: chainLink, clock: clock, logger: logger)
        // The reply queues stop after MQTT, so results that arrive while MQTT
        // winds down still reach their players.
        var services: [any Service] = [ArcadeService(arcade: arcade, logger: logger)] + replies.services
        // The feed stops first: its streams would keep HTTP from stopping.
        services += [mqttService, reloader] + (chainLink.map { [ChainLinkService(link: $0, clock: clock, logger: logger)] } ?? [])
        services += (appServer?.services ?? []) + (evidence.map { [EvidenceService(keeper: $0)] } ?? []) + (prizes.map { [$0] } ?? [])
        services += [stats, http, feed]
        return Gateway(config: config, mqtt: mqtt, store: store, writer: writer, arcade: arcade, reloader: reloader, services: services)
    }
}
