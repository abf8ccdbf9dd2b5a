import Foundation

/// A message received from the broker.
struct MQTTMessage: Sendable, Equatable {
    var topic: String
    var payload: [UInt8]
    var retain: Bool
}

enum MQTTQoS: Int32, Sendable {
    case atMostOnce = 0
    case atLeastOnce = 1
}

enum MQTTProtocolVersion: Sendable {
    /// What the site broker speaks: message expiry, reason codes.
    case v5
    /// What a NATS cluster speaks: it refuses MQTT v5 connections.
    case v311
}

/// One broker of a cluster: the client tries them in turn.
struct MQTTBrokerAddress: Sendable, Equatable, CustomStringConvertible {
    var host: String
    var port: Int

    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// A SUBACK: which topics of one SUBSCRIBE the broker granted and which it
/// refused (return code 0x80).
struct MQTTSubscribeAck: Sendable, Equatable {
    var granted: [String]
    var refused: [String]
}

/// What the broker publishes for this client when it disappears without a
/// clean disconnect.
struct MQTTWill: Sendable {
    var topic: String
    var payload: [UInt8]
    var qos: MQTTQoS = .atLeastOnce
    var retain: Bool = true
}

struct MQTTClientConfiguration: Sendable {
    var host: String
    var port: Int
    var clientID: String
    var username: String?
    var password: String?
    /// Seconds.
    var keepalive: Int = 30
    var tls: TLSSettings?
    var will: MQTTWill?
    /// Seconds between reconnect attempts, doubling from the lower bound up to the upper.
    var reconnectDelay: ClosedRange<Int> = 1...30
    /// Inbound payloads larger than this are dropped before they are copied; nil takes any.
    var maxInboundPayload: Int?
    /// Further brokers of the same cluster, tried in turn after `host`:`port`
    /// when one cannot be reached or a connection ends.
    var alternates: [MQTTBrokerAddress] = []
    var protocolVersion: MQTTProtocolVersion = .v5
    /// False: the broker keeps the session (subscriptions, QoS 1 messages
    /// for it) while the client is away, under its client id.
    var cleanSession = true
    /// MQTT v5 only, with `cleanSession` false: how long the broker keeps
    /// the session after the client is gone (v5's default, 0, ends it with
    /// the connection). MQTT 3.1.1 sessions last until the broker's own limit.
    var sessionExpiry: UInt32 = 0

    /// Every broker, in the order they are tried.
    var brokers: [MQTTBrokerAddress] { [MQTTBrokerAddress(host: host, port: port)] + alternates }

    init(settings: MQTTSettings, will: MQTTWill?) {
        host = settings.url.host
        port = settings.url.port
        clientID = settings.clientID
        username = settings.username
        password = settings.password
        keepalive = settings.keepalive
        tls = settings.url.usesTLS ? (settings.tls ?? TLSSettings()) : nil
        self.will = will
    }

    init(host: String, port: Int, clientID: String) {
        self.host = host
        self.port = port
        self.clientID = clientID
    }
}
