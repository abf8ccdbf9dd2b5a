import Foundation
import Logging
import Protocol
import Synchronization

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
    /// The router's voucher for an accept's debit, at a site of a chain (SPEC §9).
    var voucher: ChainVoucher? = nil
}

/// Every machine of the site, found by id or IM account: the way in for
/// players' notifications and for the machines' MQTT messages.
///
/// The machines are a table a reload replaces whole (``reload(_:)``, SPEC
/// §13): a machine keeps its index (its place for the storage writer and the
/// deadlines) for as long as it is in the arcade, and a new one gets the
/// next. A machine taken out of the config stays until its last game is
/// over, then leaves by itself (``departures``).
final class Arcade: Sendable {
    let topics: Topics
    let writer: StorageWriter
    let deadlines: Deadlines
    let limits: PlayerLimits
    /// Machines that left after a reload, once their last game was over:
    /// the gateway unsubscribes their topics and drops them from the chain's
    /// directory.
    let departures: AsyncStream<Machine>
    let clock: GameClock
    private let environment: MachineEnvironment
    private let table: Mutex<Table>

    /// The machines as one reload left them; replaced, never changed.
    private final class Table: Sendable {
        let settings: GameSettings
        /// In config order, then those finishing their last game.
        let machines: [Machine]
        let bySlot: [Int: Machine]
        let byID: [String: Machine]
        let byAccount: [String: Machine]
        /// Every topic the gateway subscribes to, and whose it is.
        let byTopic: [String: (Machine, MachineTopic)]
        let nextIndex: Int

        init(settings: GameSettings, machines: [Machine], nextIndex: Int) {
            self.settings = settings
            self.machines = machines
            self.nextIndex = nextIndex
            bySlot = Dictionary(uniqueKeysWithValues: machines.map { ($0.index, $0) })
            byID = Dictionary(uniqueKeysWithValues: machines.map { ($0.id, $0) })
            // The first listed keeps an account: a machine of the new config before one finishing its last game.
            byAccount = Dictionary(machines.map { ($0.config.imAccount, $0) }, uniquingKeysWith: { first, _ in first })
            byTopic = Dictionary(
                uniqueKeysWithValues: machines.flatMap { machine in machine.inbound.map { ($0.topic, (machine, $0.kind)) } })
        }
    }

    /// Hears machines leave: takes them out of the table, then tells ``departures``.
    private final class Departures: MachineObserver {
        private let arcade = Mutex<Weak>(Weak())
        let continuation: AsyncStream<Machine>.Continuation

        struct Weak: @unchecked Sendable {
            weak var arcade: Arcade?
        }

        init(_ continuation: AsyncStream<Machine>.Continuation) {
            self.continuation = continuation
        }

        func attach(_ arcade: Arcade) {
            self.arcade.withLock { $0.arcade = arcade }
        }

        func snapshot(_ index: Int, _ snapshot: QueueSnapshot, payload: [UInt8]) {}
        func event(_ index: Int, _ event: GameEvent, payload: [UInt8]) {}
        func gone(_ index: Int) {
            guard let machine = arcade.withLock({ $0.arcade })?.remove(index) else { return }
            continuation.yield(machine)
        }
    }

    init(config: GatewayConfig, environment: MachineEnvironment) throws(StorageError) {
        topics = config.topics
        writer = environment.writer
        deadlines = environment.deadlines
        limits = environment.limits
        clock = environment.clock
        let (departures, continuation) = AsyncStream.makeStream(of: Machine.self)
        self.departures = departures
        let observer = Departures(continuation)
        var environment = environment
        environment.observers.append(observer)
        self.environment = environment
        var machines: [Machine] = []
        for (index, machine) in config.machines.enumerated() {
            machines.append(
                try Machine(config: machine, index: index, settings: config.game, topics: config.topics, environment: environment))
        }
        table = Mutex(Table(settings: config.game, machines: machines, nextIndex: machines.count))
        observer.attach(self)
        try closeGamesOfMachinesGone(keeping: Set(config.machines.map(\.id)))
    }

    /// Closes the games still open on machines that are no longer in the
    /// config, as a start closes a turn it cannot take up (`expired` when
    /// offered, `no_result` when started): none stays open for ever. Their
    /// players cannot be told: their machine has no IM account any more.
    private func closeGamesOfMachinesGone(keeping machines: Set<String>) throws(StorageError) {
        let orphans = try writer.store.openGames(notOn: machines)
        guard !orphans.isEmpty else { return }
        let now = clock.wallNow()
        // No machine waits on this write: an index no machine has. Through
        // the ledger, like every change to a wallet.
        _ = environment.ledger.transact(machine: -1) { money in
            let closed = orphans.flatMap { game in
                var game = game
                game.endedAt = now
                game.outcome = game.startedAt == nil ? .expired : .noResult
                // A started game it paid for is paid back (SPEC §11), with its end;
                // in a chain also a turn whose debit was asked.
                let inChain = money.chain != nil
                let refund: StoreChange? = game.paid.flatMap { paid in
                    guard inChain || game.startedAt != nil else { return nil }
                    return .refund(
                        paid, to: PlayerAddress(accid: game.player, provider: game.provider), session: game.id, machine: game.machine,
                        inChain: inChain, at: now)
                }
                return [StoreChange.game(game)] + (refund.map { [$0] } ?? [])
            }
            return ((), closed)
        }
        environment.logger.notice(
            "Games open on machines no longer in the config closed",
            metadata: ["games.closed": .string(orphans.map { "\($0.machine)/\($0.id)" }.joined(separator: ","))])
    }

    /// In config order, then those a reload took out that are finishing their last game.
    var machines: [Machine] { table.withLock { $0.machines } }
    var settings: GameSettings { table.withLock { $0.settings } }

    /// The machine at `index`, while it is in the arcade.
    func machine(at index: Int) -> Machine? {
        table.withLock { $0.bySlot[index] }
    }

    /// What a reload did to the machines.
    struct Change: Sendable, Equatable {
        var added: [String] = []
        var removed: [String] = []
        /// Machines whose config changed, or all of them when the game's settings did.
        var changed: [String] = []
        /// Machines a reload put back while they still finish the game of
        /// their removal: kept out until they are gone; reload again then.
        var stillLeaving: [String] = []

        var isEmpty: Bool { added.isEmpty && removed.isEmpty && changed.isEmpty && stillLeaving.isEmpty }
    }

    /// Takes the machines and the game's settings of a new config (SPEC
    /// §13): a new machine starts, a removed one finishes its game and then
    /// leaves, a changed one takes its config at once and the settings from
    /// its next turn. No game ends because of it.
    func reload(_ config: GatewayConfig) throws(StorageError) -> Change {
        let old = table.withLock { $0 }
        var change = Change()
        var kept: [Machine] = []
        var reconfigured: [(Machine, MachineConfig)] = []
        var next = old.nextIndex
        let wanted = Set(config.machines.map(\.id))
        for machineConfig in config.machines {
            if let machine = old.byID[machineConfig.id] {
                if machine.isRetiring {
                    change.stillLeaving.append(machine.id)
                    continue
                }
                kept.append(machine)
                if machine.config != machineConfig || old.settings != config.game {
                    reconfigured.append((machine, machineConfig))
                    change.changed.append(machine.id)
                }
            } else {
                kept.append(
                    try Machine(config: machineConfig, index: next, settings: config.game, topics: topics, environment: environment))
                next += 1
                change.added.append(machineConfig.id)
            }
        }
        let leaving = old.machines.filter { !wanted.contains($0.id) || $0.isRetiring }
        change.removed = leaving.filter { !$0.isRetiring }.map(\.id)
        let table = Table(settings: config.game, machines: kept + leaving, nextIndex: next)
        self.table.withLock { $0 = table }
        for (machine, machineConfig) in reconfigured { machine.reconfigure(machineConfig, settings: config.game) }
        for machine in leaving { machine.retire() }
        return change
    }

    /// Takes a machine that is gone out of the table.
    private func remove(_ index: Int) -> Machine? {
        table.withLock { table in
            guard let machine = table.bySlot[index] else { return nil }
            table = Table(settings: table.settings, machines: table.machines.filter { $0.index != index }, nextIndex: table.nextIndex)
            return machine
        }
    }

    /// How long a request that changed the queue waits for its write before
    /// it is answered `gateway_unavailable`.
    static let durabilityWait: Duration = .seconds(2)

    /// Acts on what the storage writer reports, until the task is cancelled
    /// or the writer stops: machines whose writes became durable tell what
    /// waited on them; a failing writer is handed every machine's state to
    /// rewrite. The writer only reports; this is where its reports reach the
    /// machines, in the arcade's own task, which ends before the machines
    /// stop.
    func runStorageReports() async {
        for await report in writer.reports {
            switch report {
            case .durable(let indices):
                let bySlot = table.withLock { $0.bySlot }
                for index in indices { bySlot[index]?.drain() }
            case .failing:
                writer.rewrite { [self] in machines.map { $0.durableImage() } }
            }
        }
    }

    /// The machine with this id, or else with this IM account.
    func machine(_ idOrAccount: String) -> Machine? {
        let table = table.withLock { $0 }
        return table.byID[idOrAccount] ?? table.byAccount[idOrAccount]
    }

    /// What the gateway subscribes to: each machine's ack, result and state.
    var subscriptions: [(topic: String, qos: MQTTQoS)] {
        machines.flatMap(\.subscriptions)
    }

    /// Whether what got `ticket` became durable within ``durabilityWait``:
    /// what every answer that depends on a write waits for (an ingress's, an
    /// operator's).
    func durable(_ ticket: StorageWriter.Ticket) async -> Bool {
        await writer.waitDurable(ticket, timeout: Self.durabilityWait)
    }

    /// Tells a player what no machine decided (a top-up, an operator's
    /// adjustment: SPEC §11), from the first machine's IM account: the
    /// machines' are the only accounts the gateway speaks from.
    func tell(_ reply: PlayerReply) {
        guard let machine = machines.first else { return }
        environment.players.send(reply, from: machine.config)
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
        let table = table.withLock { $0 }
        let machine = table.byID[notification.to] ?? table.byAccount[notification.to]
        let settings = table.settings
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
            return machine.handle(request, from: player, voucher: notification.voucher)
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
        guard let (machine, kind) = table.withLock({ $0.byTopic[message.topic] }) else { return }
        switch kind {
        case .ack: machine.handleAck(message)
        case .result: machine.handleResult(message)
        case .state: machine.handlePresence(message)
        case .fault: machine.handleFault(message)
        case .control, .camera, .resultAck, .queue, .events, .stats: break
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
            machine(at: index)?.fireDeadlines()
        }
    }

    /// Runs the deadlines until the task is cancelled.
    /// Acts on what the ledger reports (the chain's answers to the
    /// machines' debits, a refund to tell), until the task is cancelled or
    /// the ledger has nothing more: as the writer's reports, in the arcade's
    /// own task. A ledger that never reports (free games, a site's wallets)
    /// ends at once.
    func runLedgerReports() async {
        guard let reports = environment.ledger.reports else { return }
        for await report in reports {
            switch report {
            case .debitAnswered(let answer):
                _ = machines.first { $0.debitAnswered(answer) }
            case .tell(let reply):
                tell(reply)
            }
        }
    }

    func runDeadlines() async {
        await deadlines.run(clock: clock) { [self] index in machine(at: index)?.fireDeadlines() }
    }

    func stop() {
        for machine in machines { machine.stop() }
    }

    private static func checkAccount(_ accid: String) throws(WireError) {
        guard PlayerText.isAccount(accid) else {
            throw WireError(
                .invalidPayload,
                "The sender account must be 1 to \(PlayerText.maxAccountBytes) bytes without control or invisible formatting characters.")
        }
    }
}
