import Foundation
import Logging
import Protocol

/// A player's notification as an IM provider delivered it.
struct PlayerNotification: Sendable {
    /// The player's account.
    var from: String
    /// The machine's id or IM account.
    var to: String
    /// The wire JSON.
    var attach: [UInt8]
    /// Which provider delivered it: replies to the player go back the same way.
    var provider: String
}

/// Every machine of the site, found by id or IM account: the way in for
/// players' notifications and for the machines' MQTT messages.
final class Arcade: Sendable {
    /// In config order.
    let machines: [Machine]
    let topics: Topics
    private let byID: [String: Machine]
    private let byAccount: [String: Machine]
    private let players: any PlayerChannel
    private let logger: Logger

    /// The longest player account accepted.
    static let maxAccountLength = 128

    init(config: GatewayConfig, environment: MachineEnvironment) throws(StorageError) {
        topics = config.topics
        var machines: [Machine] = []
        for machine in config.machines {
            machines.append(
                try Machine(config: machine, settings: config.game, topics: config.topics, environment: environment))
        }
        self.machines = machines
        byID = Dictionary(uniqueKeysWithValues: machines.map { ($0.id, $0) })
        byAccount = Dictionary(uniqueKeysWithValues: machines.map { ($0.config.imAccount, $0) })
        players = environment.players
        logger = environment.logger
    }

    /// The machine with this id, or else with this IM account.
    func machine(_ idOrAccount: String) -> Machine? {
        byID[idOrAccount] ?? byAccount[idOrAccount]
    }

    /// What the gateway subscribes to: each machine's ack, result and state.
    var subscriptions: [(topic: String, qos: MQTTQoS)] {
        machines.flatMap { machine in
            [(machine.topics.ack, MQTTQoS.atMostOnce), (machine.topics.result, .atLeastOnce), (machine.topics.state, .atLeastOnce)]
        }
    }

    /// One player notification: decoded, checked, handed to its machine.
    ///
    /// Errors follow SPEC §2's precedence: a bad payload first, then an
    /// unknown machine, then what the machine's game says. A refusal is sent
    /// to the player as command 9, except for an unknown machine, which has no
    /// IM account to answer from.
    func handle(_ notification: PlayerNotification) -> RequestOutcome {
        let machine = machine(notification.to)
        var message: WireMessage?
        do throws(WireError) {
            try Self.checkAccount(notification.from)
            let decoded = try WireMessage.decode(notification.attach)
            message = decoded
            let request = try PlayerRequest(decoded)
            guard let machine else {
                throw WireError(.unknownMachine, "There is no machine \"\(notification.to)\" here.")
            }
            try request.validate(cameras: machine.config.cameraIDs)
            players.remember(player: notification.from, provider: notification.provider)
            return machine.handle(request, from: notification.from, provider: notification.provider)
        } catch {
            if let machine, error.code != .unknownMachine, !notification.from.isEmpty {
                players.remember(player: notification.from, provider: notification.provider)
                machine.refuse(player: notification.from, command: message?.code, serial: message?.serial, error)
            }
            return .rejected(error)
        }
    }

    /// One message from a machine's topics.
    func route(_ message: MQTTMessage) {
        guard let (id, kind) = topics.parse(message.topic), let machine = byID[id] else {
            logger.debug("Message on an unknown topic ignored", metadata: ["mqtt.topic": .string(message.topic)])
            return
        }
        switch kind {
        case .ack: machine.handleAck(message.payload)
        case .result: machine.handleResult(message.payload)
        case .state: machine.handlePresence(message.payload)
        case .control, .camera, .queue, .events: break
        }
    }

    /// Republishes every snapshot, e.g. after a reconnect.
    func republish() {
        for machine in machines { machine.republish() }
    }

    func stop() {
        for machine in machines { machine.stop() }
    }

    private static func checkAccount(_ accid: String) throws(WireError) {
        guard !accid.isEmpty, accid.utf8.count <= maxAccountLength,
            !accid.unicodeScalars.contains(where: { $0.properties.generalCategory == .control })
        else {
            throw WireError(.invalidPayload, "The sender account must be 1 to \(maxAccountLength) bytes without control characters.")
        }
    }
}
