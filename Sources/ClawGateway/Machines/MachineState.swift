import Foundation
import Protocol

/// A player waiting in a machine's queue.
struct QueueEntry: Sendable, Equatable {
    var accid: String
    var nick: String
    /// The IM provider the account is of: with the account, who the player
    /// is (two providers' `alice` are two players); replies
    /// to them go back through it.
    var provider: String

    var address: PlayerAddress { PlayerAddress(accid: accid, provider: provider) }
}

/// One claw machine's game (SPEC §3) as a plain value: the queue, whose turn
/// it is and in which phase, the deadlines, the commands in flight to the PC.
///
/// Every change is a named `mutating` transition that takes the time and the
/// circumstances (``TransitionContext``) as inputs and returns a ``Step``:
/// the answer, the effects to carry out and the writes to make durable first.
/// Transitions do no I/O and read no clock, so each one is tested as a plain
/// function. ``Machine`` owns one of these behind a lock and carries out the
/// effects after releasing it.
///
/// The phases follow SPEC §3: `idle` → `offered` → `playing` →
/// `awaitingResult` → `idle`. The machine's presence (``Link``) and the
/// operator's pause are orthogonal to the phase: while the PC is offline the
/// machine shows as `offline` whatever the phase, and no turn is offered
/// while it is offline or paused.
struct MachineState: Sendable {
    /// The player holding the machine, from the offer to the end of the game.
    struct Turn: Sendable {
        var player: QueueEntry
        /// The game's id: in storage, in every message to the PC, in the PC's result.
        var session: String
        /// When the timer of the current phase runs out, on the game clock.
        var deadline: Duration
        var offeredAt: Date
        var startedAt: Date?
        /// Commands sent to the PC in this game.
        var commands = 0
        /// Player serials already forwarded: IM copies can come twice.
        var serials = SerialWindow()
        /// ``commands`` as the open game's record last wrote it, and when:
        /// moves write nothing, so a checkpoint writes them at most every
        /// ``MachineState/checkpointEvery`` (``checkpointDue``).
        var writtenCommands = 0
        var writtenAt: Duration = .zero
        /// The PC's serial of the result that ended the game, when it numbers its results (SPEC §4).
        var resultSerial: Int64?
        /// The gateway serial of the game's coin (1001), once it went out.
        var coinSerial: Int64?
        /// The PC acked the coin: it started this game.
        var coinAcked = false
        /// The coin was the full-power grab (SPEC §12): the record says so, for the fairness report.
        var strong = false
        /// What the player paid for the game (SPEC §11); nil: nothing. In a
        /// chain, what the chain's ledger was asked to debit for it, from the
        /// ask on: a turn that ends with it set asks for it back (the
        /// ledger pays back only a debit it holds).
        var paid: Int64?
        /// In a chain: the debit is asked of the chain's ledger and not
        /// answered yet; at this moment the accept is given up on.
        var debitAskedUntil: Duration?
        /// What the offer (11) said a game costs (SPEC §11): what the accept
        /// debits, whatever a reload made the price meanwhile; nil: free.
        var price: Int64? = nil
        /// A continue (SPEC §3): the how-manyth in a row this turn is; 0 for
        /// a turn offered to the head of the queue.
        var continues = 0

        var isContinue: Bool { continues > 0 }
    }

    /// Whose turn it is.
    enum Phase: Sendable {
        case idle
        /// The head of the queue was offered the turn (11) and may accept (12).
        case offered(Turn)
        /// Coins are in; the player steers.
        case playing(Turn)
        /// The claw dropped (by the player, the play timer, or because the
        /// player left); waiting for the PC's result.
        case awaitingResult(Turn)

        var turn: Turn? {
            switch self {
            case .idle: nil
            case .offered(let turn), .playing(let turn), .awaitingResult(let turn): turn
            }
        }

        var status: MachineStatus {
            switch self {
            case .idle: .idle
            case .offered: .offered
            case .playing: .playing
            case .awaitingResult: .awaitingResult
            }
        }
    }

    /// The game whose coin (1001) went out and is not acked yet: until the
    /// PC acks it, that game's other commands wait in the outbox.
    var sessionAwaitingCoinAck: String? {
        guard let session = phase.turn?.session, acks.coin(for: session) != nil else { return nil }
        return session
    }

    /// What the PC last said on its retained `state` topic.
    enum Link: Sendable, Equatable {
        case offline
        case online
        /// The PC said `offline` during a game, which is kept until `until`
        /// (``GameSettings/offlineGrace``); the turn's timer is stopped with
        /// `remaining` left on it.
        case reconnecting(until: Duration, remaining: Duration)
    }

    // The state below changes only through the transitions, in this file and
    // the `MachineState+*.swift` beside it.
    /// A reload changes these (``reconfigure(_:settings:_:)``): the machine's
    /// config at once, the settings from the next turn.
    var machine: MachineConfig
    var settings: GameSettings
    /// Settings a reload brought while a turn was open: they apply once the
    /// machine is free, so a turn keeps the timers it was offered with.
    var nextSettings: GameSettings?
    /// Taken out of the config by a reload: the game in progress finishes,
    /// no turn is offered, nobody joins (``retire(_:)``).
    var retiring = false
    /// Retired and free: the machine said `gone` and is out of the arcade.
    var gone = false
    /// Games lost in a row since the machine's last win: when it reaches the
    /// machine's `guarantee_after`, the next coin is the full-power grab
    /// (SPEC §12). Counted from the game records, so it outlives a restart.
    var lostInARow: Int
    /// Board settings an operator set at runtime (`PUT …/settings`), over
    /// the file's; nil: the file's.
    var settingsOverride: MachineSettings?

    /// The board settings the next coin carries.
    var boardSettings: MachineSettings { settingsOverride ?? machine.settings }
    /// Out of play (SPEC §12): its board's fault, an operator's reason, or
    /// both; nil: in play. Durable.
    var maintenance: Maintenance?
    /// A reset (1002) on its way: no turn is offered until it is done.
    var reset: ResetProgress?
    var link: Link = .offline
    var paused: Bool
    /// The PC missed ``GameSettings/suspectAfter`` acks in a row: no new turn
    /// is offered until an ack or a fresh `online` from it (SPEC §3).
    var suspect = false
    var acksMissedInARow = 0
    var waiting: [QueueEntry]
    var phase: Phase = .idle
    /// Of the retained snapshot; durable, so it keeps increasing across restarts.
    private(set) var snapshotSeq: Int64
    /// Of the events; increases within one run.
    private(set) var eventSeq: Int64 = 0
    /// The next gateway serial, unique per machine across restarts (see ``init(machine:settings:restored:firstSerial:sessionPrefix:)``).
    private(set) var nextSerial: Int64
    var acks: PendingAcks
    /// The latest broker connection the gateway reconnected on (see ``brokerReconnected(connection:_:)``).
    var brokerConnection = 0
    private let sessionPrefix: String
    private var sessionsMade = 0
    /// Events of the start (a turn taken up) decided before the gateway
    /// had a broker connection: published again on the first one.
    var startEvents: [GameEvent] = []
    /// The player whose game has just ended `won` or `lost`, and the
    /// continues they had in a row: set by ``endTurn(_:reason:_:)``, and
    /// taken by the same transition's ``settle(_:)``, which offers them a
    /// continue or lets it go (SPEC §3).
    var mayContinue: (player: QueueEntry, continues: Int)?
    /// The last result taken with a PC's serial, and its game: a repeat of
    /// it changes nothing and is confirmed again (SPEC §4, `result/ack`).
    /// Read back from the last game's record after a restart.
    var lastResult: TakenResult?
    /// The prizes left in the machine (SPEC §15), and the number of the last
    /// line of its stock log; nil until an operator sets it (not counted).
    /// Durable; changed by wins and restocks, both transitions of this value.
    var stock: StockLevel?

    /// - Parameters:
    ///   - restored: the queue, pause flag and snapshot sequence read back from storage.
    ///   - firstSerial: larger than any serial of an earlier run, e.g. the wall clock in milliseconds.
    ///   - sessionPrefix: unique to this run; session ids are the prefix and a counter.
    init(machine: MachineConfig, settings: GameSettings, restored: RestoredMachine, firstSerial: Int64, sessionPrefix: String) {
        self.machine = machine
        self.settings = settings
        paused = restored.paused
        lostInARow = restored.lostInARow
        settingsOverride = restored.settings
        maintenance = restored.maintenance
        lastResult = restored.lastResult
        stock = restored.stock
        waiting = restored.queue
        snapshotSeq = restored.snapshotSeq
        nextSerial = firstSerial
        acks = PendingAcks(floor: firstSerial)
        self.sessionPrefix = sessionPrefix
    }

    var id: String { machine.id }
    var online: Bool { link == .online }

    /// The state shown in snapshots, events and the read API. A machine
    /// taken out by an operator shows `maintenance` once its game in
    /// progress is over.
    var status: MachineStatus {
        if maintenance != nil, case .idle = phase { return .maintenance }
        if outOfStock, case .idle = phase { return .outOfStock }
        return online ? phase.status : .offline
    }

    /// The retained snapshot of this state (SPEC §4).
    func snapshot(at now: Moment) -> QueueSnapshot {
        // While reconnecting, the deadline shown is the grace's end.
        let deadline: Duration? =
            if case .reconnecting(let until, _) = link { until } else { phase.turn?.deadline }
        return QueueSnapshot(
            machine: id, seq: snapshotSeq, state: status, online: online, paused: paused, suspect: suspect,
            player: phase.turn.map { turn in
                CurrentPlayer(
                    accid: turn.player.accid, provider: turn.player.provider, nick: turn.player.nick, session: turn.session,
                    deadline: deadline.map { Timestamp.string(now.wall(at: $0)) }, isContinue: turn.isContinue)
            },
            waiting: waiting.map { WaitingPlayer(accid: $0.accid, provider: $0.provider, nick: $0.nick) },
            fault: maintenance?.fault, reason: maintenance?.reason, stock: countedStock,
            playsUntilGuarantee: playsUntilGuarantee)
    }

    /// Games left before the next full-power grab (SPEC §16); nil without
    /// `guarantee_after`. Counted over `won` and `lost` games as the coin
    /// decides them (``MachineSettings/coin(lostInARow:)``), so a
    /// correction does not move it.
    var playsUntilGuarantee: Int? {
        let after = boardSettings.guaranteeAfter
        return after > 0 ? max(0, after - lostInARow) : nil
    }

    /// The earliest moment at which ``expire(_:)`` has something to do: the
    /// turn's deadline (stopped while reconnecting, when the grace's end
    /// counts instead) or the oldest pending ack's timeout.
    mutating func nextDeadline() -> Duration? {
        let ack = acks.nextDue(after: settings.ackTimeout)
        var turn: Duration? =
            if case .reconnecting(let until, _) = link { until } else { phase.turn?.deadline }
        // An offer whose debit is asked waits for the ask's answer or timeout (``expire(_:)``).
        if let asked = phase.turn?.debitAskedUntil { turn = asked }
        if let due = phase.turn?.checkpointDue { turn = turn.map { min($0, due) } ?? due }
        guard let turn else { return ack }
        return ack.map { min($0, turn) } ?? turn
    }

    /// What storage must hold for this machine, written whole after a failure.
    func durableImage(at now: Moment) -> DurableMachine {
        DurableMachine(
            machine: id, queue: waiting, snapshotSeq: snapshotSeq, paused: paused, openGame: openRecord(at: now),
            settings: settingsOverride, maintenance: maintenance, stock: stock)
    }

    /// The current turn's record while it is open, with what a restart
    /// needs to take it up again (SPEC §13): its phase, its deadline as an
    /// absolute time, its coin. While the PC reconnects the turn's timer is
    /// stopped: the deadline written is what remained, from now.
    func openRecord(at now: Moment) -> GameRow? {
        let open: OpenGame.Phase
        switch phase {
        case .idle: return nil
        case .offered: open = .offered
        case .playing: open = .playing
        case .awaitingResult: open = .awaitingResult
        }
        guard let turn = phase.turn else { return nil }
        let deadline = if case .reconnecting(_, let remaining) = link { now.uptime + remaining } else { turn.deadline }
        var row = record(turn, endedAt: nil, outcome: nil)
        row.open = OpenGame(
            phase: open, deadline: now.wall(at: deadline), coinSerial: turn.coinSerial, coinAcked: turn.coinAcked,
            serials: turn.serials.inOrder, continues: turn.continues)
        return row
    }

    /// Writes the open turn's record as it stands (``openRecord(at:)``),
    /// its commands and serial window too: no checkpoint is due until more come.
    mutating func writeOpenGame(_ fx: inout Effects) {
        guard let row = openRecord(at: fx.now) else { return }
        fx.writes.append(.game(row))
        let now = fx.now.uptime
        modifyTurn { turn in
            turn.writtenCommands = turn.commands
            turn.writtenAt = now
        }
    }

    // MARK: Building blocks of the transitions

    /// What one transition decides, collected as it goes.
    struct Effects {
        let context: TransitionContext
        var list: [MachineEffect] = []
        var writes: [StoreChange] = []
        /// The snapshot must be republished with a new `seq`.
        var snapshotChanged = false
        /// The first index of the waiting list whose position changed: from
        /// there on, players are told their new position.
        var positionsFrom: Int?
        /// What this transition has changed in the players' wallets so far.
        var walletChanges: [PlayerAddress: Int64] = [:]
        private var stamp: String?

        init(_ context: TransitionContext) {
            self.context = context
        }

        var now: Moment { context.now }

        /// The events' `ts`: every event of one transition has the same.
        mutating func timestamp() -> String {
            if let stamp { return stamp }
            let text = Timestamp.string(context.now.wall)
            stamp = text
            return text
        }

        mutating func queueMoved(from index: Int) {
            positionsFrom = min(positionsFrom ?? index, index)
        }

        /// The player's balance as this transition has left it; nil when games are free.
        func balance(of player: PlayerAddress) -> Int64? {
            guard let book = context.wallets else { return nil }
            return book.balance(of: player) + (walletChanges[player] ?? 0)
        }
    }

    /// Ends a transition: settles what every transition settles (offers the
    /// next turn when the machine is free, tells players whose position moved,
    /// republishes the snapshot when anything in it changed) and hands over
    /// what was decided.
    mutating func finish<Outcome: Sendable>(_ outcome: Outcome, _ fx: inout Effects) -> Step<Outcome> {
        settle(&fx)
        return Step(outcome: outcome, effects: fx.list, writes: fx.writes)
    }

    private mutating func settle(_ fx: inout Effects) {
        if case .idle = phase, let next = nextSettings {
            settings = next
            nextSettings = nil
        }
        offerContinue(&fx)
        offerNextTurn(&fx)
        if let from = fx.positionsFrom {
            fx.snapshotChanged = true
            let length = waiting.count
            let why = heldBack
            for index in from..<length {
                reply(
                    waiting[index].address, WireMessage(.queuePosition, data: String(index + 1), length: length, message: why), .high, &fx)
            }
        }
        if fx.snapshotChanged {
            snapshotSeq += 1
            fx.writes.append(.meta(machine: id, snapshotSeq: snapshotSeq, paused: paused))
            fx.list.append(.snapshot(snapshot(at: fx.now)))
        }
        if retiring, !gone, case .idle = phase {
            gone = true
            fx.list.append(.gone)
        }
    }

    /// Why a free machine offers nobody a turn, told with each position
    /// (8 `message`) so that a player who joins a machine in maintenance,
    /// out of prizes, paused or offline knows why the queue does not move;
    /// nil while turns are offered.
    var heldBack: String? {
        guard case .idle = phase, !offersTurns else { return nil }
        let name = machine.name
        if !online { return "\(name) is offline right now; you keep your place and are offered a turn when it is back." }
        if maintenance != nil || reset != nil {
            return "\(name) is out of play for maintenance; you keep your place and are offered a turn when it is back."
        }
        if outOfStock { return "\(name) is out of prizes until the arcade refills it; you keep your place." }
        if paused { return "\(name) is paused by the arcade; you keep your place." }
        return "\(name) offers no turn right now; you keep your place."
    }

    /// Whether the machine offers a turn at all when it is free: online,
    /// and not paused, suspect, retiring, in maintenance or being reset.
    var offersTurns: Bool {
        online && !paused && !suspect && !retiring && maintenance == nil && reset == nil && !outOfStock
    }

    /// Offers the head of the queue the turn when the machine is free.
    mutating func offerNextTurn(_ fx: inout Effects) {
        guard case .idle = phase, offersTurns, !waiting.isEmpty else { return }
        let entry = waiting.removeFirst()
        fx.queueMoved(from: 0)
        let session = newSession()
        let deadline = fx.now.uptime + settings.acceptTimeout
        var turn = Turn(player: entry, session: session, deadline: deadline, offeredAt: fx.now.wall)
        turn.price = price
        phase = .offered(turn)
        fx.writes.append(.dequeue(machine: id, player: entry.address))
        writeOpenGame(&fx)
        fx.snapshotChanged = true
        emit(.offered, &fx) {
            $0.set(entry.address)
            $0.nick = entry.nick
            $0.session = session
        }
        let timeout = Int(settings.acceptTimeout.seconds.rounded(.up))
        reply(entry.address, offer(turn, serial: takeSerial(), timeout: timeout, fx), .high, &fx, expires: deadline)
    }

    /// Closes the game record with `outcome`; the machine is free again.
    /// `reason` says why, on the `game_ended` event, when the outcome alone does not.
    mutating func endTurn(_ outcome: GameOutcome, reason: String? = nil, _ fx: inout Effects) {
        guard let turn = phase.turn else { return }
        fx.writes.append(.game(record(turn, endedAt: fx.now.wall, outcome: outcome)))
        refundIfOwed(
            paid: turn.paid, outcome: outcome, coinAcked: turn.coinAcked, of: turn.player.address, session: turn.session, &fx)
        switch outcome {
        case .won: lostInARow = 0
        case .lost: lostInARow += 1
        default: break
        }
        fx.snapshotChanged = true
        phase = .idle
        mayContinue = outcome == .won || outcome == .lost ? (turn.player, turn.continues) : nil
        emit(.gameEnded, &fx) {
            $0.set(turn.player.address)
            $0.nick = turn.player.nick
            $0.session = turn.session
            $0.outcome = outcome
            $0.commands = turn.commands
            $0.reason = reason
        }
        // A won game is a prize owed, written with the game's end (SPEC §15).
        if outcome == .won { makePrize(turn, &fx) }
    }

    /// The game record of `turn` as storage keeps it.
    func record(_ turn: Turn, endedAt: Date?, outcome: GameOutcome?) -> GameRow {
        GameRow(
            id: turn.session, machine: id, player: turn.player.accid, nick: turn.player.nick,
            provider: turn.player.provider, offeredAt: turn.offeredAt, startedAt: turn.startedAt, endedAt: endedAt,
            outcome: outcome, commands: turn.commands, resultSerial: turn.resultSerial, strong: turn.strong)
    }

    /// Runs `body` on the turn where it is, without copying it: the phase is
    /// emptied while `body` runs so the turn's storage is not shared.
    @discardableResult
    mutating func modifyTurn<R>(_ body: (inout Turn) -> R) -> R? {
        switch phase {
        case .idle:
            return nil
        case .offered(var turn):
            phase = .idle
            defer { phase = .offered(turn) }
            return body(&turn)
        case .playing(var turn):
            phase = .idle
            defer { phase = .playing(turn) }
            return body(&turn)
        case .awaitingResult(var turn):
            phase = .idle
            defer { phase = .awaitingResult(turn) }
            return body(&turn)
        }
    }

    /// The id of a turn about to be offered: this run's prefix, the machine's id and a count.
    mutating func newSession() -> String {
        sessionsMade += 1
        return "\(sessionPrefix)\(sessionsMade)"
    }

    mutating func takeSerial() -> Int64 {
        defer { nextSerial += 1 }
        return nextSerial
    }

    /// Numbers and stamps one event on `claw/<m>/events`. One that does not
    /// go out (``GameSettings/publishes(_:)``) only counts in the metrics,
    /// which take their own time: it is not stamped.
    @discardableResult
    mutating func emit(_ type: EventType, _ fx: inout Effects, _ fill: (inout GameEvent) -> Void = { _ in }) -> GameEvent {
        eventSeq += 1
        let published = settings.publishes(type)
        var event = GameEvent(type: type, seq: eventSeq, ts: published ? fx.timestamp() : "", machine: id)
        fill(&event)
        fx.list.append(.event(event, published: published))
        return event
    }

    func reply(
        _ player: PlayerAddress, _ message: WireMessage, _ priority: PlayerReply.Priority, _ fx: inout Effects,
        expires: Duration? = nil
    ) {
        fx.list.append(.reply(PlayerReply(to: player, message: message, priority: priority, expires: expires)))
    }

    /// A refusal: the answer to a request that was not taken. Refusals of
    /// what a player sends too often are held back to one of a code a
    /// second (``PlayerLimits``); one that ends, refuses or changes the
    /// player's own turn, game or wallet (``WireError/isAlwaysTold``) always
    /// goes out (SPEC §2): the player's client waits on it.
    func reply(_ player: PlayerAddress, error: WireError, serial: Int64? = nil, _ fx: inout Effects) {
        reply(
            player,
            WireMessage(.error, data: error.code.rawValue, serial: serial, message: error.message, balance: error.balance, price: error.price),
            error.isAlwaysTold ? .high : .normal, &fx)
    }

    /// A command 9 that answers no request: the player's turn changed without
    /// them (SPEC §3). It goes out ahead of refusals and is never held back
    /// as a repeated refusal is.
    func notice(_ player: PlayerAddress, _ error: WireError, _ fx: inout Effects) {
        reply(player, WireMessage(.error, data: error.code.rawValue, message: error.message), .high, &fx)
    }
}

/// What storage holds for one machine, for rewriting it whole.
struct DurableMachine: Sendable, Equatable {
    var machine: String
    var queue: [QueueEntry]
    var snapshotSeq: Int64
    var paused: Bool
    /// The game in progress, if any.
    var openGame: GameRow?
    /// The board settings set at runtime, if any.
    var settings: MachineSettings? = nil
    /// Why the machine is out of play, if it is.
    var maintenance: Maintenance? = nil
    /// Its counted stock of prizes, if an operator ever set it.
    var stock: StockLevel? = nil
}
