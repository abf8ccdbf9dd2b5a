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
    /// Which provider delivered it: with `from`, who the player is (SPEC §5);
    /// replies to the player go back the same way.
    var provider: String
    /// How long ago the IM service stamped it (NetEase's `CurTime`, the
    /// webhook's `X-Claw-Timestamp`), on the ingress's wall clock; nil when
    /// it came without a stamp (the command line's `notify`).
    var age: Duration? = nil
}

/// Every machine of the site, found by id or IM account: the way in for
/// players' notifications and for the machines' MQTT messages.
final class Arcade: Sendable {
    /// In config order; a machine's index is its place here.
    let machines: [Machine]
    let topics: Topics
    let settings: GameSettings
    let writer: StorageWriter
    let deadlines: Deadlines
    let limits: PlayerLimits
    private let clock: GameClock
    private let byID: [String: Machine]
    private let byAccount: [String: Machine]
    /// Every topic the gateway subscribes to, and whose it is.
    private let byTopic: [String: (Machine, MachineTopic)]


    /// How long a request that changed the queue waits for its write before
    /// it is answered `gateway_unavailable`.
    static let durabilityWait: Duration = .seconds(2)

    init(config: GatewayConfig, environment: MachineEnvironment) throws(StorageError) {
        topics = config.topics
        settings = config.game
        writer = environment.writer
        deadlines = environment.deadlines
        limits = environment.limits
        clock = environment.clock
        var machines: [Machine] = []
        for (index, machine) in config.machines.enumerated() {
            machines.append(
                try Machine(config: machine, index: index, settings: config.game, topics: config.topics, environment: environment))
        }
        self.machines = machines
        byID = Dictionary(uniqueKeysWithValues: machines.map { ($0.id, $0) })
        byAccount = Dictionary(uniqueKeysWithValues: machines.map { ($0.config.imAccount, $0) })
        byTopic = Dictionary(
            uniqueKeysWithValues: machines.flatMap { machine in
                [(machine.topics.ack, (machine, MachineTopic.ack)), (machine.topics.result, (machine, .result)), (machine.topics.state, (machine, .state))]
            })
    }

    /// Acts on what the storage writer reports, until the task is cancelled
    /// or the writer stops: machines whose writes became durable tell what
    /// waited on them; a failing writer is handed every machine's state to
    /// rewrite. The writer only reports; this is where its reports reach the
    /// machines, in the arcade's own task, which ends before the machines
    /// stop.
    func runStorageReports() async {
        let machines = machines
        for await report in writer.reports {
            switch report {
            case .durable(let indices):
                for index in indices where machines.indices.contains(index) { machines[index].drain() }
            case .failing:
                writer.rewrite { machines.map { $0.durableImage() } }
            }
        }
    }

    /// The machine with this id, or else with this IM account.
    func machine(_ idOrAccount: String) -> Machine? {
        byID[idOrAccount] ?? byAccount[idOrAccount]
    }

    /// What the gateway subscribes to: each machine's ack, result and state.
    var subscriptions: [(topic: String, qos: MQTTQoS)] {
        machines.flatMap { machine in
            // QoS 1, on the gateway's persistent session: what a PC says
            // while the gateway restarts waits for it at the broker (SPEC §13).
            [(machine.topics.ack, MQTTQoS.atLeastOnce), (machine.topics.result, .atLeastOnce), (machine.topics.state, .atLeastOnce)]
        }
    }

    /// Whether what got `ticket` became durable within ``durabilityWait``:
    /// what every answer that depends on a write waits for (an ingress's, an
    /// operator's).
    func durable(_ ticket: StorageWriter.Ticket) async -> Bool {
        await writer.waitDurable(ticket, timeout: Self.durabilityWait)
    }

    /// The refusal of a notification over the sender's budget.
    static func overBudget(_ settings: GameSettings) -> WireError {
        WireError(.rateLimited, "At most \(settings.maxCommandsPerSecond) notifications a second from one player; slow down.")
    }

    /// The answer to a request whose change could not be saved in time.
    static let notSavedInTime = WireError(
        .gatewayUnavailable,
        "The gateway could not save your request yet; it takes effect once it is saved. Check your queue position before sending it again.")

    /// One player notification: the outcome, and the ticket that must be
    /// durable before it may be told (``durable(_:)``).
    ///
    /// Errors follow SPEC §2's precedence: a bad payload first, then an
    /// unknown machine, then what the machine's game says. A refusal is sent
    /// to the player as command 9, except for an unknown machine, which has no
    /// IM account to answer from.
    func handleNow(_ notification: PlayerNotification) -> (RequestOutcome, StorageWriter.Ticket?) {
        let machine = machine(notification.to)
        let player = PlayerAddress(accid: notification.from, provider: notification.provider)
        // The budget comes before anything else, even a bad payload: a flood
        // costs one lookup per notification and reaches no machine.
        let now = clock.now()
        guard limits.admit(player, now: now) else {
            machine?.countOverBudget()
            if let machine, !notification.from.isEmpty, limits.mayRefuse(player, code: .rateLimited, now: now) {
                machine.tellOverBudget(player, serial: (try? WireMessage.decode(notification.attach))?.serial)
            }
            return (.rejected(Self.overBudget(settings)), nil)
        }
        var message: WireMessage?
        do throws(WireError) {
            try Self.checkAccount(notification.from)
            let decoded = try WireMessage.decode(notification.attach)
            message = decoded
            let request = try PlayerRequest(decoded)
            guard let machine else {
                throw WireError(.unknownMachine, "There is no machine \"\(notification.to)\" here.")
            }
            if request.command.isControl, let age = notification.age, age > settings.commandMaxAge {
                GatewayMetrics.commandsTooOld.increment()
                throw Self.tooOld(age)
            }
            try request.validate(cameras: machine.config.cameraIDs)
            return machine.handle(request, from: player)
        } catch {
            if let machine, error.code != .unknownMachine, !notification.from.isEmpty {
                machine.refuse(player, command: message?.code, serial: message?.serial, error)
            }
            return (.rejected(error), nil)
        }
    }

    /// A move, grab or camera switch that took longer than
    /// `game.command_max_age` to come: dropped, not played late (SPEC §13).
    static func tooOld(_ age: Duration) -> WireError {
        WireError(
            .gatewayUnavailable,
            "Your command reached the arcade \(String(format: "%.1f", age.seconds)) s after you sent it; it was dropped, not played late.")
    }

    /// One message from a machine's topics.
    func route(_ message: MQTTMessage) {
        guard let (machine, kind) = byTopic[message.topic] else { return }
        switch kind {
        case .ack: machine.handleAck(message)
        case .result: machine.handleResult(message)
        case .state: machine.handlePresence(message)
        case .control, .camera, .queue, .events, .stats: break
        }
    }

    /// The gateway is connected to the broker again, on `connection`: every
    /// snapshot is republished, and games whose coin went out on the
    /// connection that is gone end.
    func republish(connection: Int) {
        for machine in machines { machine.republish(connection: connection) }
    }

    /// Lets every machine handle what is due now: what the deadlines' loop
    /// does when it wakes, and what tests call after moving their clock.
    func fireDueDeadlines() {
        for index in deadlines.takeDue(now: clock.now()) {
            machines[index].fireDeadlines()
        }
    }

    /// Runs the deadlines until the task is cancelled.
    func runDeadlines() async {
        let machines = machines
        await deadlines.run(clock: clock) { index in machines[index].fireDeadlines() }
    }

    func stop() {
        for machine in machines { machine.stop() }
    }

    private static func checkAccount(_ accid: String) throws(WireError) {
        guard !accid.isEmpty, accid.utf8.count <= PlayerText.maxAccountBytes, !PlayerText.hasHiddenCharacters(accid) else {
            throw WireError(
                .invalidPayload,
                "The sender account must be 1 to \(PlayerText.maxAccountBytes) bytes without control or invisible formatting characters.")
        }
    }
}
