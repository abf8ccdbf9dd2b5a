import Foundation
import Logging
import Protocol
import Synchronization

/// The site gateway's own link to the chain's cluster (SPEC §9): MQTT 3.1.1,
/// client id `claw-site-<site>`, clean session false, every node known.
///
/// The connection is a ``BusLink``: up only while every subscription is
/// granted. After every connect it publishes its retained directory;
/// ``tick()``, every second, publishes the heartbeat and watches the
/// routers' beats.
final class ChainLink: Sendable {
    /// Silence from the routers, while connected, after which the link is
    /// taken down and up again.
    static let beatTimeout: Duration = .seconds(5)

    let bus: BusLink
    var client: MQTTClient { bus.client }
    let topics: ChainTopics
    let site: String
    /// Published retained after every connect, and again when a reload
    /// changes the machines (``setDirectory(_:)``).
    private let directory: Mutex<[UInt8]>
    private let clock: GameClock
    private let logger: Logger
    /// Where copies from the routers go; nil takes none (tests of the link alone).
    private let inbox: ChainInbox?
    /// Ships the site's finished games to the recorder (SPEC §10); nil ships none.
    let records: RecordShipper?
    /// Asks the chain's ledger for debits and sends it refunds (SPEC §11);
    /// nil when games are free.
    let ledger: ChainLedgerDesk?
    /// Tells a player what the recorder said of their prize (SPEC §15: 15,
    /// and 14 after an exchange); nil hears nothing of prizes.
    private let tell: (@Sendable (PlayerReply) -> Void)?
    /// Wakes the shipping loop: an acknowledgement made room, or a second passed.
    let shippingWakes: AsyncStream<Void>
    private let wakeShipping: AsyncStream<Void>.Continuation
    private let state = Mutex(LinkState())

    private struct LinkState {
        /// Times the link was taken down because the routers' beats stopped.
        var silences = 0
        /// When the last router beat came (``GameClock/now``); nil until the
        /// first: a chain whose routers are not running yet is not a broken link.
        var lastBeat: Duration?
        var heartbeats = 0
        /// Copies from the inbox, by what became of them.
        var copies: [ChainInbox.Outcome: Int] = [:]
        var receipts = 0
    }

    /// What the link says of itself, for `/readyz` and the metrics.
    struct Status: Sendable, Equatable {
        var connected: Bool
        var subscribed: Bool
        var connects: Int
        var refusals: Int
        var silences: Int
        var heartbeats: Int
        var copies: [ChainInbox.Outcome: Int]
        var receipts: Int
        var broker: String
        /// Why the link is not up; nil when it is.
        var problem: String?
    }

    /// - Parameters:
    ///   - bus: the link's connection (``bus(settings:prefix:wallet:logger:)``),
    ///     which the chain's ledger desk publishes its asks on too.
    init(
        bus: BusLink, settings: ChainSettings, prefix: String, machines: [MachineConfig], clock: GameClock, logger: Logger,
        inbox: ChainInbox? = nil, store: GameStore? = nil, ledger: ChainLedgerDesk? = nil,
        tell: (@Sendable (PlayerReply) -> Void)? = nil
    ) {
        site = settings.site
        self.inbox = inbox
        self.ledger = ledger
        self.tell = tell
        self.bus = bus
        (shippingWakes, wakeShipping) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        topics = ChainTopics(prefix: prefix, site: settings.site)
        self.logger = Self.logger(logger, site: settings.site)
        self.clock = clock
        directory = Mutex(Self.directory(site: settings.site, machines))
        let client = bus.client
        let topics = topics
        records = store.map { store in
            RecordShipper(
                store: store, site: settings.site, resendInterval: settings.resendInterval, clock: clock, logger: logger,
                publish: { payload throws(MQTTError) in
                    try client.publish(topics.records, payload: payload, qos: .atLeastOnce, retain: false)
                })
        }
    }

    /// The site link's connection to the cluster (SPEC §9): MQTT 3.1.1,
    /// client id `claw-site-<site>`, clean session false, subscribed to the
    /// site's inbox, its records' acknowledgement, with the chain's wallets
    /// (`wallet`) its ledger's answers, and with prizes (`prizes`) what the
    /// recorder tells its players of them.
    static func bus(settings: ChainSettings, prefix: String, wallet: Bool, prizes: Bool = false, logger: Logger) throws(MQTTError) -> BusLink {
        let topics = ChainTopics(prefix: prefix, site: settings.site)
        // Copies are a few KB; the cluster refuses more than 1 MB anyway.
        return try BusLink(
            role: .site, bus: settings.busSettings(prefix: prefix),
            subscriptions: [topics.inbox, topics.recordsAck] + (wallet ? [topics.walletAck] : []) + (prizes ? [topics.tell] : []),
            cleanSession: false,
            maxInboundPayload: 1 << 20, logger: Self.logger(logger, site: settings.site))
    }

    private static func logger(_ logger: Logger, site: String) -> Logger {
        var logger = logger
        logger[metadataKey: "chain.site"] = .string(site)
        return logger
    }

    /// The directory: each machine's id, IM account, name, and the price
    /// of its games where they cost credits (what the routers' vouchers
    /// carry, SPEC §9).
    static func directory(site: String, _ machines: [MachineConfig]) -> [UInt8] {
        JSONCoding.encode(
            ChainDirectory(
                site: site,
                machines: machines.map { machine in
                    .init(id: machine.id, imAccount: machine.imAccount, name: machine.name, price: machine.price.flatMap { $0 > 0 ? $0 : nil })
                }))
    }

    /// A reload changed the site's machines: the routers learn it from the
    /// retained directory, published now if the link is up (and after every
    /// connect as always).
    func setDirectory(_ machines: [MachineConfig]) {
        let payload = Self.directory(site: site, machines)
        let changed = directory.withLock { current in
            defer { current = payload }
            return current != payload
        }
        if changed, client.isConnected { publishDirectory() }
    }

    private func publishDirectory() {
        do {
            try client.publish(topics.directory, payload: directory.withLock { $0 }, qos: .atLeastOnce, retain: true)
        } catch {
            logger.warning("Chain directory not published", metadata: error.shape.metadata())
        }
    }

    /// Connects in the background, and keeps the link up until ``shutdown()``.
    func start() {
        bus.start(
            qos: .atLeastOnce, connected: { [self] in connected() },
            up: { [self] in
                records?.linkUp()
                ledger?.linkUp()
            },
            message: { [self] message in received(message) })
    }

    func shutdown() async {
        wakeShipping.finish()
        await bus.shutdown()
    }

    /// Publishes the game records that are due (see ``RecordShipper``).
    func ship() async {
        await records?.ship()
        await ledger?.shipRefunds()
    }

    var status: Status {
        let state = bus.state
        let problem = bus.problem
        let refusals = bus.refusals
        return self.state.withLock { link in
            Status(
                connected: client.isConnected, subscribed: state == .up, connects: client.connectCount, refusals: refusals,
                silences: link.silences, heartbeats: link.heartbeats, copies: link.copies, receipts: link.receipts,
                broker: client.broker.description, problem: problem)
        }
    }

    /// Every second: the heartbeat, and the routers' beats checked.
    func tick() {
        wakeShipping.yield()
        publishHeartbeat()
        let now = clock.now()
        let silent = state.withLock { state -> Duration? in
            guard client.isConnected, let lastBeat = state.lastBeat, now - lastBeat > Self.beatTimeout else { return nil }
            state.silences += 1
            // The next connection gets its own full wait for a beat.
            state.lastBeat = now
            return now - lastBeat
        }
        guard let silent else { return }
        logger.warning(
            "No beat from the chain's routers: taking the chain link down and up again",
            metadata: ["chain.silent_ms": "\(silent.milliseconds)", "chain.broker": "\(client.broker)"])
        client.dropConnection(reason: "no beat from the chain's routers for \(silent.milliseconds) ms")
    }

    private func publishHeartbeat() {
        guard client.isConnected else { return }
        let wall = clock.wallNow()
        let count = state.withLock { state in
            state.heartbeats += 1
            return state.heartbeats
        }
        let payload = #"{"site":"\#(site)","seq":\#(count),"ts":"\#(Timestamp.string(wall))"}"#
        do {
            try client.publish(topics.heartbeat, payload: Array(payload.utf8), qos: .atMostOnce, retain: false)
        } catch {
            logger.debug("Chain heartbeat not sent", metadata: error.shape.metadata())
        }
    }

    // MARK: On the client's thread

    private func connected() {
        let now = clock.now()
        state.withLock { state in
            // A new connection gets its own full wait for the routers' beats:
            // the silence before it was the link's, not the routers'.
            if state.lastBeat != nil { state.lastBeat = now }
        }
        records?.linkDown()
        publishDirectory()
        publishHeartbeat()
    }

    private func received(_ message: MQTTMessage) {
        if message.topic == topics.recordsAck {
            guard let ack = ChainRecordsAck.decode(message.payload) else {
                logger.warning("An acknowledgement of game records does not decode: ignored", metadata: ["chain.bytes": "\(message.payload.count)"])
                return
            }
            if records?.acknowledged(ack) == true { wakeShipping.yield() }
            return
        }
        if message.topic == topics.walletAck {
            ledger?.answered(message.payload)
            return
        }
        if message.topic == topics.tell {
            told(message.payload)
            return
        }
        guard message.topic == topics.inbox else { return }
        if Self.isBeat(message.payload) {
            let now = clock.now()
            state.withLock { $0.lastBeat = now }
            return
        }
        guard let inbox else { return }
        let outcome = inbox.receive(message.payload) { [self] receipt in acknowledge(receipt) }
        state.withLock { $0.copies[outcome, default: 0] += 1 }
    }

    /// The recorder's word on a player's prize: told to the player (15; 14
    /// too after an exchange), from the site's IM accounts.
    private func told(_ payload: [UInt8]) {
        guard let tell, let notice = ChainPrizeNotice.decode(payload) else {
            logger.warning("A word of the recorder on a prize does not decode: ignored", metadata: ["chain.bytes": "\(payload.count)"])
            return
        }
        let player = PlayerAddress(accid: notice.account, provider: notice.provider)
        if let credits = notice.credits, let balance = notice.balance {
            tell(
                PlayerReply(
                    to: player,
                    message: WireMessage(.creditsChanged, data: String(balance), change: credits, reason: LedgerEntry.Kind.exchange.rawValue),
                    priority: .high, expires: nil))
        }
        tell(
            PlayerReply(
                to: player,
                message: WireMessage(.prizeChanged, data: notice.prize, state: notice.state, prize: notice.name, tracking: notice.tracking),
                priority: .high, expires: nil))
    }

    /// The site's answer to a copy, for the router waiting on it. QoS 1: the
    /// router answers the IM service on it, and a lost receipt costs a resend.
    private func acknowledge(_ receipt: ChainReceipt) {
        do {
            try client.publish(topics.inboxAck, payload: receipt.payload, qos: .atLeastOnce, retain: false)
            state.withLock { $0.receipts += 1 }
        } catch {
            logger.warning(
                "Receipt for a copy not sent: the router answers the IM service 5xx and the copy comes again",
                metadata: error.shape.metadata(["chain.copy": .string(receipt.id)]))
        }
    }

    private static func isBeat(_ payload: [UInt8]) -> Bool {
        // A beat is a few bytes; a copy is a whole notification.
        guard payload.count < 256,
            let object = try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any]
        else { return false }
        return object["type"] as? String == "beat"
    }
}
