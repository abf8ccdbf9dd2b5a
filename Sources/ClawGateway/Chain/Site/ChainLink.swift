import Foundation
import Logging
import Synchronization

/// A site's topics on the chain's cluster, all under `<prefix>/<site>/` (SPEC §9).
struct ChainTopics: Sendable, Equatable {
    let base: String

    init(prefix: String, site: String) {
        base = "\(prefix)/\(site)"
    }

    /// Copies from the routers, and their beats.
    var inbox: String { "\(base)/inbox" }
    /// The site's receipts for copies.
    var inboxAck: String { "\(base)/inbox/ack" }
    /// Retained: which machines (IM accounts) the site owns.
    var directory: String { "\(base)/gateway/directory" }
    /// Every second while the site is up.
    var heartbeat: String { "\(base)/gateway/heartbeat" }
    /// Finished games, for the recorder (SPEC §10).
    var records: String { "\(base)/records" }
    /// Retained by the recorder: how far it has written.
    var recordsAck: String { "\(base)/records/ack" }
}

/// `<prefix>/<site>/gateway/directory`: what the routers learn ownership from.
struct ChainDirectory: Codable, Sendable, Equatable {
    struct Machine: Codable, Sendable, Equatable {
        var id: String
        var imAccount: String
        var name: String

        enum CodingKeys: String, CodingKey {
            case id, name
            case imAccount = "im_account"
        }
    }

    var site: String
    var machines: [Machine]

    init(site: String, machines: [MachineConfig]) {
        self.site = site
        self.machines = machines.map { Machine(id: $0.id, imAccount: $0.imAccount, name: $0.name) }
    }
}

/// The site gateway's own link to the chain's cluster (SPEC §9): MQTT 3.1.1,
/// client id `claw-site-<site>`, clean session false, every node known.
///
/// The link is up only when it is connected and the cluster granted every
/// subscription of this connection: a cluster that refuses one keeps the
/// connection open and says nothing else, so a refused SUBACK takes the link
/// down (counted, logged) and it connects again, to the next node, after
/// the client's backoff. After every connect it subscribes again and
/// publishes its retained directory; ``tick()``, every second, publishes the
/// heartbeat and watches the routers' beats.
final class ChainLink: Sendable {
    /// Silence from the routers, while connected, after which the link is
    /// taken down and up again.
    static let beatTimeout: Duration = .seconds(5)

    let client: MQTTClient
    let topics: ChainTopics
    let site: String
    private let directory: [UInt8]
    private let clock: GameClock
    private let logger: Logger
    /// Where copies from the routers go; nil takes none (tests of the link alone).
    private let inbox: ChainInbox?
    /// Ships the site's finished games to the recorder (SPEC §10); nil ships none.
    let records: RecordShipper?
    /// Wakes the shipping loop: an acknowledgement made room, or a second passed.
    let shippingWakes: AsyncStream<Void>
    private let wakeShipping: AsyncStream<Void>.Continuation
    private let state = Mutex(LinkState())

    private struct LinkState {
        /// Subscriptions the cluster granted on this connection.
        var granted: Set<String> = []
        /// Why the last subscription failed, until one succeeds.
        var refusal: String?
        var refusals = 0
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

    /// The topics the link must hold a subscription to.
    var subscriptions: [String] { [topics.inbox, topics.recordsAck] }

    init(
        settings: ChainSettings, prefix: String, machines: [MachineConfig], clock: GameClock, logger: Logger,
        inbox: ChainInbox? = nil, store: GameStore? = nil
    ) throws(MQTTError) {
        site = settings.site
        self.inbox = inbox
        (shippingWakes, wakeShipping) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        topics = ChainTopics(prefix: prefix, site: settings.site)
        var logger = logger
        logger[metadataKey: "chain.site"] = .string(settings.site)
        self.logger = logger
        self.clock = clock
        directory = JSONCoding.encode(ChainDirectory(site: settings.site, machines: machines))
        // Copies are a few KB; the cluster refuses more than 1 MB anyway.
        let configuration = MQTTClientConfiguration(bus: settings.busSettings(prefix: prefix), cleanSession: false, maxInboundPayload: 1 << 20)
        let client = try MQTTClient(configuration: configuration, logger: logger)
        self.client = client
        let topics = topics
        records = store.map { store in
            RecordShipper(
                store: store, site: settings.site, resendInterval: settings.resendInterval, clock: clock, logger: logger,
                publish: { payload throws(MQTTError) in
                    try client.publish(topics.records, payload: payload, qos: .atLeastOnce, retain: false)
                })
        }
    }

    /// Connects in the background, and keeps the link up until ``shutdown()``.
    func start() {
        client.onConnected { [self] in connected() }
        client.onSubscribeAck { [self] ack in subscribed(ack) }
        client.onMessage { [self] message in received(message) }
        client.subscribe(subscriptions, qos: .atLeastOnce)
        client.start()
    }

    func shutdown() async {
        wakeShipping.finish()
        await client.shutdown()
    }

    /// Publishes the game records that are due (see ``RecordShipper``).
    func ship() async {
        await records?.ship()
    }

    var status: Status {
        let connected = client.isConnected
        let lastError = client.lastError
        return state.withLock { state in
            let subscribed = connected && subscriptions.allSatisfy { state.granted.contains($0) }
            var problem: String?
            if let refusal = state.refusal {
                problem = refusal
            } else if !connected {
                problem = "the chain link is not connected to the cluster (\(lastError ?? "connecting"))"
            } else if !subscribed {
                problem = "the chain link is waiting for the cluster to confirm its subscriptions"
            }
            return Status(
                connected: connected, subscribed: subscribed, connects: client.connectCount, refusals: state.refusals,
                silences: state.silences, heartbeats: state.heartbeats, copies: state.copies, receipts: state.receipts, broker: client.broker.description, problem: problem)
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
            logger.debug("Chain heartbeat not sent", metadata: ["chain.error": .string(error.message)])
        }
    }

    // MARK: On the client's thread

    private func connected() {
        let now = clock.now()
        state.withLock { state in
            state.granted = []
            // A new connection gets its own full wait for the routers' beats:
            // the silence before it was the link's, not the routers'.
            if state.lastBeat != nil { state.lastBeat = now }
        }
        records?.linkDown()
        do {
            try client.publish(topics.directory, payload: directory, qos: .atLeastOnce, retain: true)
        } catch {
            logger.warning("Chain directory not published", metadata: ["chain.error": .string(error.message)])
        }
        publishHeartbeat()
    }

    private func subscribed(_ ack: MQTTSubscribeAck) {
        let refusals = state.withLock { state -> Int? in
            state.granted.formUnion(ack.granted)
            guard !ack.refused.isEmpty else {
                if subscriptions.allSatisfy({ state.granted.contains($0) }) { state.refusal = nil }
                return nil
            }
            state.refusals += 1
            state.refusal =
                "the chain's cluster refused the link's subscription to \(ack.refused.joined(separator: ", ")); "
                + "check the site login's permissions (deploy/chain/README.md, \"Users and what they may do\")"
            return state.refusals
        }
        guard let refusals else {
            if status.subscribed { records?.linkUp() }
            logger.info("Chain link up", metadata: ["chain.broker": "\(client.broker)"])
            return
        }
        logger.error(
            "Chain link subscription refused: taking the link down and retrying",
            metadata: [
                "chain.topics": .string(ack.refused.joined(separator: ",")), "chain.broker": "\(client.broker)",
                "chain.refusals": "\(refusals)",
            ])
        client.dropConnection(reason: "subscription refused: \(ack.refused.joined(separator: ", "))")
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

    /// The site's answer to a copy, for the router waiting on it. QoS 1: the
    /// router answers the IM service on it, and a lost receipt costs a resend.
    private func acknowledge(_ receipt: ChainReceipt) {
        do {
            try client.publish(topics.inboxAck, payload: receipt.payload, qos: .atLeastOnce, retain: false)
            state.withLock { $0.receipts += 1 }
        } catch {
            logger.warning(
                "Receipt for a copy not sent: the router answers the IM service 5xx and the copy comes again",
                metadata: ["chain.copy": .string(receipt.id), "chain.error": .string(error.message)])
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
