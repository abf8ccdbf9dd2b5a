import Logging
import Synchronization

/// One role's connection to the chain's cluster (SPEC §9): a site's link, a
/// router and the recorder each compose one, and nothing else of theirs
/// speaks to the cluster's MQTT client about subscriptions or refusals.
///
/// The connection is up only while it is connected and the cluster granted
/// every subscription of this connection: a cluster that refuses one keeps
/// the connection open and says nothing else, so a refused SUBACK takes the
/// connection down (counted, logged, and said by ``problem`` until a later
/// connection has all its subscriptions) and it connects again, to the next
/// node, after the client's backoff.
final class BusLink: Sendable {
    /// Who holds the connection, for what the link says of itself.
    struct Role: Sendable {
        /// "Router": how a log line names it.
        var title: String
        /// "the router": how `/readyz` names it.
        var name: String
        /// "the router's".
        var possessive: String
        /// The cluster login the role connects with (deploy/chain/README.md).
        var login: String

        static let site = Role(title: "Chain link", name: "the chain link", possessive: "the link's", login: "site")
        static let router = Role(title: "Router", name: "the router", possessive: "the router's", login: "router")
        static let recorder = Role(title: "Recorder", name: "the recorder", possessive: "the recorder's", login: "recorder")
    }

    /// Where the connection stands, as the link knows it: the subscriptions
    /// are this connection's; whether the client is connected at all is the
    /// client's (``state`` joins the two).
    enum State: Sendable, Equatable {
        /// Not connected: connecting for the first time, or again.
        case connecting
        /// Connected; the cluster has granted these subscriptions so far.
        case subscribing(granted: Set<String>)
        /// Connected, and every subscription granted.
        case up
        /// The cluster refused these subscriptions: the connection was taken
        /// down, and the link stays refused until a connection has them all.
        case refused(topics: [String], granted: Set<String>)
    }

    let client: MQTTClient
    let role: Role
    /// The topic filters the role must hold.
    let subscriptions: [String]
    private let logger: Logger
    private let stored = Mutex(Stored())

    private struct Stored {
        var state = State.connecting
        var refusals = 0
    }

    init(role: Role, bus: BusSettings, subscriptions: [String], cleanSession: Bool, maxInboundPayload: Int, logger: Logger) throws(MQTTError) {
        self.role = role
        self.subscriptions = subscriptions
        self.logger = logger
        client = try MQTTClient(
            configuration: MQTTClientConfiguration(bus: bus, cleanSession: cleanSession, maxInboundPayload: maxInboundPayload), logger: logger)
    }

    /// Connects in the background and keeps connecting until ``shutdown()``.
    ///
    /// - Parameters:
    ///   - connected: after every connect, on the client's thread, before
    ///     the subscriptions are confirmed (only it publishes meanwhile).
    ///   - up: on the client's thread, when a connection has every subscription.
    ///   - message: every inbound message, in order, on the client's thread.
    func start(
        qos: MQTTQoS, connected: @escaping @Sendable () -> Void = {}, up: @escaping @Sendable () -> Void = {},
        message: @escaping @Sendable (MQTTMessage) -> Void
    ) {
        client.onConnected { [self] in
            stored.withLock { stored in
                if case .refused(let topics, _) = stored.state {
                    stored.state = .refused(topics: topics, granted: [])
                } else {
                    stored.state = .subscribing(granted: [])
                }
            }
            connected()
        }
        client.onSubscribeAck { [self] ack in
            if subscribed(ack) { up() }
        }
        client.onMessage(message)
        client.subscribe(subscriptions, qos: qos)
        client.start()
    }

    func shutdown() async {
        await client.shutdown()
    }

    var state: State {
        let connected = client.isConnected
        return stored.withLock { stored in
            switch stored.state {
            case .refused: return stored.state
            case .subscribing, .up: return connected ? stored.state : .connecting
            case .connecting: return .connecting
            }
        }
    }

    /// Subscriptions the cluster refused, in all.
    var refusals: Int { stored.withLock { $0.refusals } }

    /// Why the link is not up; nil when it is.
    var problem: String? {
        switch state {
        case .up:
            return nil
        case .refused(let topics, _):
            return "the chain's cluster refused \(role.possessive) subscription to \(topics.joined(separator: ", ")); "
                + "check the \(role.login) login's permissions (deploy/chain/README.md, \"Users and what they may do\")"
        case .connecting:
            return "\(role.name) is not connected to the chain's cluster (\(client.lastError ?? "connecting"))"
        case .subscribing:
            return "\(role.name) is waiting for the cluster to confirm its subscriptions"
        }
    }

    /// Takes a SUBACK in; true when it made the connection up.
    private func subscribed(_ ack: MQTTSubscribeAck) -> Bool {
        let subscriptions = subscriptions
        enum Outcome { case refused(Int), up, same }
        let outcome = stored.withLock { stored -> Outcome in
            let granted: Set<String>
            switch stored.state {
            case .up:
                guard !ack.refused.isEmpty else { return .same }
                granted = Set(subscriptions)
            case .subscribing(let before), .refused(_, let before): granted = before.union(ack.granted)
            case .connecting: granted = Set(ack.granted)
            }
            guard ack.refused.isEmpty else {
                stored.refusals += 1
                stored.state = .refused(topics: ack.refused, granted: granted)
                return .refused(stored.refusals)
            }
            if subscriptions.allSatisfy(granted.contains) {
                stored.state = .up
                return .up
            }
            if case .refused(let topics, _) = stored.state {
                stored.state = .refused(topics: topics, granted: granted)
            } else {
                stored.state = .subscribing(granted: granted)
            }
            return .same
        }
        let refusals: Int
        switch outcome {
        case .same:
            return false
        case .up:
            logger.info("\(role.title) up on the chain's cluster", metadata: ["chain.role": .string(role.login), "chain.broker": "\(client.broker)"])
            return true
        case .refused(let count):
            refusals = count
        }
        logger.error(
            "\(role.title) subscription refused by the chain's cluster: taking the connection down and connecting again",
            metadata: [
                "chain.role": .string(role.login), "chain.topics": .string(ack.refused.joined(separator: ",")),
                "chain.broker": "\(client.broker)", "chain.refusals": "\(refusals)",
            ])
        client.dropConnection(reason: "subscription refused: \(ack.refused.joined(separator: ", "))")
        return false
    }
}
