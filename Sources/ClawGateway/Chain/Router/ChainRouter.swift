import Foundation
import HTTPTypes
import Logging
import Protocol
import Synchronization

/// A player's notification, verified, on its way to the site that owns `to`.
struct RouterCopy: Sendable {
    /// `netease` or `generic`: the provider the player is an account of.
    var provider: String
    var from: String
    /// The machine's IM account (or, for the generic webhook, its id).
    var to: String
    /// The wire JSON, for the serial of a refusal.
    var attach: [UInt8]
    /// The request's body and verification headers, as they came: the site verifies them again.
    var body: [UInt8]
    var headers: [String: String]
    /// When the router got it.
    var received: Date
    var arrived: ContinuousClock.Instant
}

/// The chain's router (SPEC §9): one MQTT 3.1.1 connection to the chain's
/// cluster (every node known, clean session: a router keeps nothing), the
/// sites as the cluster tells them (``ChainSites``), and the copies on their
/// way to their sites.
///
/// A copy is published at QoS 1 on its site's `inbox` with an id of this
/// router's (client id, a nonce of this run, a random nonce of the copy) and
/// waits for that site's receipt with that id on its `inbox/ack`, up to
/// `router.receipt_timeout` (``ReceiptWaits``). A receipt that finds none of
/// this router's waiting (it came too late, or twice) is counted and
/// dropped, as is one that came from another site than the copy went to;
/// receipts of other routers' copies are none of its business.
///
/// The connection is a ``BusLink``: up only while every subscription is
/// granted, as a site's link's.
final class ChainRouter: Sendable {
    let bus: BusLink
    var client: MQTTClient { bus.client }
    let sites: ChainSites
    let receiptTimeout: Duration
    private let clock: GameClock
    private let players: any PlayerChannel
    /// Each sender's budget of answered notifications (SPEC §2), and at
    /// most one refusal of each code a second to one player.
    private let limits: PlayerLimits
    private let logger: Logger
    /// Every copy id of this process starts with this.
    private let idPrefix: String
    /// The copies waiting for their receipt.
    let receipts: ReceiptWaits
    /// `router.ledger_key`: what the vouchers of accepts are made with (SPEC §9); nil makes none.
    private let ledgerKey: String?
    private let warnings = LogLimiter()

    init(
        bus: BusSettings, receiptTimeout: Duration, maxCommandsPerSecond: Int = 10, ledgerKey: String? = nil, players: any PlayerChannel,
        clock: GameClock, logger: Logger
    ) throws(MQTTError) {
        self.receiptTimeout = receiptTimeout
        self.ledgerKey = ledgerKey
        limits = PlayerLimits(perSecond: maxCommandsPerSecond)
        self.players = players
        self.clock = clock
        self.logger = logger
        sites = ChainSites(prefix: bus.topicPrefix, clock: clock, logger: logger)
        receipts = ReceiptWaits(clock: clock)
        idPrefix = "\(bus.clientID)-\(Signatures.nonce(bytes: 3))-"
        // Stateless: nothing is kept for a router that is gone, nothing piles
        // up. Directories and snapshots are a few KB.
        self.bus = try BusLink(
            role: .router, bus: bus, subscriptions: sites.subscriptions, cleanSession: true, maxInboundPayload: 1 << 20, logger: logger)
    }

    /// Connects in the background, and keeps connecting until ``shutdown()``.
    func start() {
        // QoS 0: a NATS node keeps no JetStream consumer for the router
        // (none to delete when it comes back, nothing to stall its
        // reconnect after a node dies). Directories are retained, beats
        // and snapshots come again, and a lost receipt is a 503 the IM
        // service answers by sending the copy again.
        bus.start(
            qos: .atMostOnce, connected: { [self] in sites.deaf() }, up: { [self] in sites.listening() },
            message: { [self] message in received(message) })
    }

    func shutdown() async {
        await bus.shutdown()
        // Whoever still waits is answered 503: the IM service sends the copy again.
        receipts.close()
    }

    /// Why the router is not ready, or nil: connected, every subscription
    /// granted, and (with `needsDirectory`) at least one site's directory
    /// held and every listed site's liveness known (its heartbeat heard, or
    /// 3 s listened for it in vain): a router that has just started is not
    /// ready before it could tell players the truth about every site.
    func problem(needsDirectory: Bool = true) -> String? {
        if let linkProblem = bus.problem { return linkProblem }
        if needsDirectory, sites.known.isEmpty { return "the router holds no site's directory yet" }
        if needsDirectory, case let unknown = sites.unknown, !unknown.isEmpty {
            return "the router is waiting for the heartbeats of \(unknown.joined(separator: ", "))"
        }
        return nil
    }

    /// Every second: a beat on every known site's inbox, so that a site
    /// whose link hears none for 5 s takes it down and up again.
    func tick() {
        sites.awake()
        guard client.isConnected else { return }
        for site in sites.known {
            do {
                try client.publish(ChainTopics(prefix: sites.prefix, site: site).inbox, payload: Self.beat, qos: .atMostOnce, retain: false)
                RouterMetrics.beats.increment()
            } catch {
                logger.debug("Beat not sent", metadata: error.shape.metadata(["chain.site": .string(site)]))
            }
        }
    }

    static let beat = Array(#"{"type":"beat"}"#.utf8)

    /// What the player is told of a copy whose site cannot be reached now.
    static let unreachable = WireError(
        .gatewayUnavailable, "The arcade of this machine cannot be reached right now; your command was dropped. Try again in a minute.")

    // MARK: Copies

    /// Routes a verified notification: to its site, answered with the site's
    /// receipt; or, when that cannot be, the player told why (from `to`,
    /// with their command's serial) and the IM service answered.
    func route(_ copy: RouterCopy) async -> IngressAnswer {
        let site: String
        switch sites.owner(of: copy.to) {
        case .nobody where !sites.settled:
            // Just started or reconnected: the machine's site may not have said its directory yet.
            return refuse(
                copy, .gatewayUnavailable,
                Self.unreachable)
        case .nobody:
            return refuse(copy, .unknownMachine, WireError(.unknownMachine, "There is no machine \"\(copy.to)\" in this chain."))
        case .disputed(let claimants):
            warn("disputed", "A copy for an IM account two sites claim: answered unknown_machine", [
                "im.account": .string(copy.to), "chain.sites": .string(claimants.joined(separator: ",")),
            ])
            return refuse(copy, .disputed, WireError(.unknownMachine, "There is no machine \"\(copy.to)\" in this chain."))
        case .site(let owner):
            site = owner
        }
        // A site not heard from yet (the router has just started or come
        // back) is tried: its receipt says it is up, and without one the IM
        // service is answered 503 and sends the copy again.
        guard sites.liveness(of: site) != .unreachable else {
            return refuse(
                copy, .gatewayUnavailable,
                Self.unreachable)
        }
        // Unpredictable: no one can answer for a copy before it is sent.
        let id = idPrefix + Signatures.nonce(bytes: 8)
        let message = ChainCopy(
            id: id, provider: copy.provider, received: copy.received, deadline: deadline(for: copy), headers: copy.headers,
            body: copy.body, voucher: voucher(for: copy, id: id, site: site))
        let topic = ChainTopics(prefix: sites.prefix, site: site).inbox
        let outcome = await receipts.wait(id: id, site: site, timeout: receiptTimeout) { () throws(MQTTError) in
            try client.publish(topic, payload: message.payload, qos: .atLeastOnce, retain: false)
        }
        switch outcome {
        case .receipt(let receipt):
            RouterMetrics.routed(site: site)
            RouterMetrics.latency.recordNanoseconds(Int64((ContinuousClock.now - copy.arrived).seconds * 1e9))
            guard (200...599).contains(receipt.status) else {
                return IngressAnswer.error(Refusal(.badGateway, code: "bad_receipt", "The site answered with HTTP status \(receipt.status)."))
            }
            return IngressAnswer(status: HTTPResponse.Status(code: receipt.status), body: Array(receipt.body.utf8))
        case .timedOut:
            RouterMetrics.refused[.noReceipt]?.increment()
            warn("no_receipt", "No receipt from the site in time: answered 503, the IM service sends the copy again", [
                "chain.site": .string(site), "chain.copy": .string(id),
            ])
            return .error(
                Refusal(
                    .serviceUnavailable, code: "no_receipt",
                    "The arcade did not confirm the notification within router.receipt_timeout; send it again."))
        case .notPublished(let reason):
            RouterMetrics.refused[.busUnavailable]?.increment()
            warn("bus_unavailable", "A copy not published: the router is not connected to the cluster", ErrorShape(code: "bus_unavailable", message: "Not published", cause: reason).metadata())
            return .error(.unavailable("The router cannot reach the chain's cluster right now; send the notification again."))
        }
    }

    /// The moment after which the site must not play `copy`: a little before
    /// this router gives up on its receipt and answers 503, so that the
    /// receipt of a copy played just in time still gets back. A copy the IM
    /// service is told failed is never played; it comes again.
    private func deadline(for copy: RouterCopy) -> Date {
        let margin = min(Self.receiptMargin, receiptTimeout / 4)
        return copy.received.addingTimeInterval(Double((receiptTimeout - margin).milliseconds) / 1000)
    }

    /// Time left for a receipt to come back from a copy played at its deadline.
    static let receiptMargin: Duration = .milliseconds(200)

    /// The voucher of an accept (12) of a machine whose games cost credits
    /// (SPEC §9): the site's only way to have the chain's ledger debit the
    /// player for it. Made over what the router itself read and verified (the
    /// player, the session they accepted), the copy's id and time, and the
    /// price the site's directory lists; nil for anything else, or without
    /// `router.ledger_key`.
    private func voucher(for copy: RouterCopy, id: String, site: String) -> ChainVoucher? {
        guard let ledgerKey, let price = sites.price(of: copy.to, at: site),
            let command = try? WireMessage.decode(copy.attach), let request = try? PlayerRequest(command),
            case .accept(let session) = request.command
        else { return nil }
        RouterMetrics.vouchers.increment()
        return ChainVoucher(
            key: ledgerKey, site: site, provider: copy.provider, account: copy.from, session: session, copy: id,
            receivedMS: ChainCopy.milliseconds(copy.received), price: price)
    }

    /// A copy no site takes: the player is told (once a second per code at
    /// most), the IM service answered as a site would have answered it.
    private func refuse(_ copy: RouterCopy, _ reason: RouterMetrics.Refusal, _ error: WireError) -> IngressAnswer {
        RouterMetrics.refused[reason]?.increment()
        tell(copy, error)
        switch copy.provider {
        case "generic": return Ingress.answer(.rejected(error))
        default: return Ingress.copyAccepted
        }
    }

    /// Command 9 from `to`, with the serial of the player's command. Only a
    /// command players send (1, 2, 3, 6, 7, 12, 13) is answered: other custom
    /// notifications the IM app copies too (players messaging each other)
    /// get no reply, and none costs the app's API quota. Nor does a sender
    /// over their budget (`router.max_commands_per_second`), and a player
    /// gets at most one refusal of each code a second.
    private func tell(_ copy: RouterCopy, _ error: WireError) {
        guard !copy.from.isEmpty, !copy.to.isEmpty, copy.from.utf8.count <= PlayerText.maxAccountBytes,
            let command = try? WireMessage.decode(copy.attach), (try? PlayerRequest(command)) != nil
        else { return }
        let player = PlayerAddress(accid: copy.from, provider: copy.provider)
        let now = clock.now()
        guard limits.admit(player, now: now), limits.mayRefuse(player, code: error.code, now: now) else { return }
        players.send(
            PlayerReply(
                to: player, message: WireMessage(.error, data: error.code.rawValue, serial: command.serial, message: error.message),
                priority: .normal, expires: nil),
            from: MachineConfig(id: copy.to, name: copy.to, imAccount: copy.to, cameras: []))
    }

    private func warn(_ kind: String, _ message: Logger.Message, _ metadata: Logger.Metadata) {
        warnings.warning(kind, message, metadata, on: logger)
    }

    // MARK: On the client's thread

    private func received(_ message: MQTTMessage) {
        guard let topic = sites.parse(message.topic) else { return }
        guard case .receipt(let site) = topic else {
            if let again = sites.receive(topic, payload: message.payload) { client.subscribe([again], qos: .atMostOnce) }
            return
        }
        guard let receipt = ChainReceipt.decode(message.payload), receipt.id.hasPrefix(idPrefix) else { return }
        switch receipts.deliver(receipt, from: site) {
        case .delivered:
            break
        case .late:
            RouterMetrics.lateReceipts.increment()
            logger.debug("A receipt after its copy was answered: dropped", metadata: ["chain.copy": .string(receipt.id)])
        case .wrongSite(let expected):
            RouterMetrics.foreignReceipts.increment()
            warn("foreign_receipt", "A site sent a receipt for a copy that went to another site: ignored", [
                "chain.site": .string(site), "chain.copy_site": .string(expected), "chain.copy": .string(receipt.id),
            ])
        }
    }
}
