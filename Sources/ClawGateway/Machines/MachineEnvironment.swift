import Foundation
import Logging
import Protocol

/// Where a machine publishes: the MQTT client in the daemon, a recorder in tests.
protocol MachinePublisher: Sendable {
    var isConnected: Bool { get }
    /// Publishes now or throws ``MQTTError/Code/notConnected``; never queues.
    func publish(_ topic: String, payload: [UInt8], qos: MQTTQoS, retain: Bool) throws(MQTTError)
}

extension MQTTClient: MachinePublisher {
    func publish(_ topic: String, payload: [UInt8], qos: MQTTQoS, retain: Bool) throws(MQTTError) {
        try publish(topic, payload: payload, qos: qos, retain: retain, expiry: nil)
    }
}

/// How replies reach players (commands 4, 5, 8, 9, 11). Sending never blocks
/// the game: an implementation hands the message to its own delivery.
protocol PlayerChannel: Sendable {
    /// Sends `message` to `player` from the machine's IM account.
    func send(_ message: WireMessage, to player: String, from machine: MachineConfig)
    /// Notes the provider through which `player` last reached the gateway.
    func remember(player: String, provider: String)
}

extension PlayerChannel {
    func remember(player: String, provider: String) {}
}

/// What a machine's game is given: its clock, where it publishes, how it
/// answers players, where it records.
struct MachineEnvironment: Sendable {
    var clock: GameClock
    var publisher: any MachinePublisher
    var players: any PlayerChannel
    var store: GameStore
    var logger: Logger
    var newSessionID: @Sendable () -> String = { UUID().uuidString.lowercased() }
}

/// What became of a player's request, for the ingress to answer with.
enum RequestOutcome: Sendable, Equatable {
    /// A command went to the machine with this gateway serial.
    case forwarded(serial: Int64)
    /// The player is in the queue at `position` (1-based) of `length`.
    case queued(position: Int, length: Int)
    /// The player joined a free machine and was offered the turn at once (11).
    case offered(session: String)
    /// The game started.
    case accepted(session: String)
    case declined
    case left
    /// Nothing to do, e.g. an accept repeated by a duplicated IM copy.
    case ignored(String)
    /// Refused; the player was sent command 9 with this code.
    case rejected(WireError)
}
