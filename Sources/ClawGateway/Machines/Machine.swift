import DequeModule
import Foundation
import Logging
import Protocol
import Synchronization

/// One claw machine: its game (``MachineState``) behind a lock, and the
/// effects of its transitions carried out in order.
///
/// Every entry point runs one transition of the state under the lock, which
/// does no I/O: it decides, appends the effects to the machine's outbox and
/// submits the writes to the storage writer (an append). After the lock is
/// released, the outbox is drained in order by whichever thread gets there
/// first, usually the caller itself (so a command is published from the
/// thread that handled the request, with no hop): commands to the PC at
/// once (but a coin only once the game's start is durable, and the commands
/// after it behind it), everything that tells a player or an operator only
/// when the writes before it are durable. What waits for a write is drained by whoever
/// learns that it is durable: the arcade, from the storage writer's reports,
/// or a request waiting for its answer (``waitTold(_:timeout:)``). The
/// writer never calls in here. Once stopped, the machine publishes and
/// replies nothing.
final class Machine: Sendable {
    /// The machine's place in the arcade, as the storage writer and the deadlines know it.
    let index: Int
    let topics: MachineTopics
    let logger: Logger
    private let environment: MachineEnvironment
    private let guarded: Mutex<Guarded>
    private let metrics: MachineMetrics
    private let warnings = LogLimiter()
    /// Set by ``stop()``; read before every effect, so that work taken from
    /// the outbox just before the stop goes no further either.
    private let halted = Atomic<Bool>(false)
    /// What the PC may send a second, checked before anything is decoded, so
    /// that a PC gone wild costs little and only its own machine: the MQTT
    /// loop handles every machine's messages one after the other.
    private let inboundBudget: Mutex<InboundBudget>

    private struct InboundBudget {
        /// A PC acks what it is sent: at most a player's commands and the
        /// gateway's own, twice over for bursts.
        var acks: TokenBucket
        /// Results and presence come once a game, or once a connection.
        var others: TokenBucket
    }

    private struct Guarded {
        var game: MachineState
        var outbox = MachineOutbox()
        /// The deadline the arcade's deadlines hold for this machine, if any.
        var scheduled: Duration?
        var stopped = false
        /// Requests waiting until what their transition decided is carried out.
        var toldWaiters: [(ticket: StorageWriter.Ticket, continuation: CheckedContinuation<Bool, Never>)] = []

        /// Takes the waiters whose transition's effects are all carried out.
        mutating func takeToldWaiters() -> [CheckedContinuation<Bool, Never>] {
            guard !toldWaiters.isEmpty else { return [] }
            var ready: [CheckedContinuation<Bool, Never>] = []
            toldWaiters.removeAll { waiter in
                guard outbox.isTold(through: waiter.ticket) else { return false }
                ready.append(waiter.continuation)
                return true
            }
            return ready
        }
    }

    /// Reads the machine's queue back from storage (see ``GameStore/restore(machine:)``)
    /// and takes up the turn that was open when the gateway stopped
    /// (``MachineState/takeUpInterrupted(_:_:)``); what cannot be taken up
    /// is closed, its records written and its players told once the
    /// storage writer runs. The machine
    /// counts as offline until its PC's `state` says otherwise.
    init(config: MachineConfig, index: Int, settings: GameSettings, topics: Topics, environment: MachineEnvironment)
        throws(StorageError)
    {
        id = config.id
        self.index = index
        self.topics = MachineTopics(config, topics)
        self.environment = environment
        var logger = environment.logger
        logger[metadataKey: "machine.id"] = .string(config.id)
        self.logger = logger
        let uptime = environment.clock.now()
        inboundBudget = Mutex(
            InboundBudget(
                acks: TokenBucket(perSecond: 2 * settings.maxCommandsPerSecond + 20, now: uptime),
                others: TokenBucket(perSecond: 20, now: uptime)))
        let wall = environment.clock.wallNow()
        let midnight = Calendar.current.startOfDay(for: wall)
        let today = try environment.writer.store.today(machine: config.id, since: midnight)
        metrics = MachineMetrics(machine: config.id, today: MachineStats.Today(day: midnight, games: today.games, wins: today.wins))
        let restored = try environment.writer.store.restore(machine: config.id)
        guarded = Mutex(
            Guarded(
                game: MachineState(
                    machine: config, settings: settings, restored: restored,
                    firstSerial: Int64(wall.timeIntervalSince1970 * 1000),
                    // The machine's id in every session id: game records are
                    // keyed by session, and every machine counts from 1.
                    sessionPrefix: "\(environment.sessionPrefix)\(config.id)-")))
        if let last = restored.openGames.last {
            let closed = restored.openGames.dropLast(last.open == nil ? 0 : 1)
            logger.notice(
                "Turns open at the last stop taken up",
                metadata: [
                    "games.taken_up": .string(last.open == nil ? "" : last.id),
                    "games.expired": .string(closed.filter { $0.startedAt == nil }.map(\.id).joined(separator: ",")),
                    "games.no_result": .string(closed.filter { $0.startedAt != nil }.map(\.id).joined(separator: ",")),
                ])
            _ = transition { game, context in game.takeUpInterrupted(restored.openGames, context) }
        }
    }

    let id: String
    /// As the last reload left it: the game's own (``MachineState/machine``).
    var config: MachineConfig { guarded.withLock { $0.game.machine } }
    var settings: GameSettings { guarded.withLock { $0.game.settings } }

    // MARK: Entry points

    /// A player's request, decoded; the game checks it against the machine's cameras.
    /// A refusal is answered to the player (command 9) by the game.
    ///
    /// - Returns: the outcome, and the ticket that must be durable before
    ///   the outcome may be told (nil when nothing was written).
    func handle(_ request: PlayerRequest, from player: PlayerAddress, voucher: ChainVoucher? = nil) -> (RequestOutcome, StorageWriter.Ticket?) {
        transition { game, context in game.handle(request, from: player, voucher: voucher, context) }
    }

    /// Answers a notification refused before it reached the game.
    func refuse(_ player: PlayerAddress, command: CommandCode?, serial: Int64?, _ error: WireError) {
        _ = transition { game, context in game.refuse(player, command: command, serial: serial, error, context) }
    }

    /// The PC's (or camera switch's) command 5 on `claw/<m>/ack`.
    func handleAck(_ message: MQTTMessage) {
        guard admit(ack: true, on: topics.ack), let ack = inbound(message, expecting: .ack, on: topics.ack), let serial = ack.serial else { return }
        _ = transition { game, context in game.ack(serial: serial, data: ack.data, context) }
    }

    /// The PC's command 4 on `claw/<m>/result`.
    func handleResult(_ message: MQTTMessage) {
        guard admit(ack: false, on: topics.result), let result = inbound(message, expecting: .result, on: topics.result) else { return }
        guard let data = result.data, let won = Bool(data) else {
            warn("Result without data true or false ignored", topic: topics.result, message.payload)
            return
        }
        _ = transition { game, context in game.result(won: won, data: data, session: result.session, serial: result.serial, context) }
    }

    /// The PC's presence on `claw/<m>/state`: as it says it, or as the broker kept it.
    func handlePresence(_ message: MQTTMessage) {
        guard admit(ack: false, on: topics.state) else { return }
        let text = String(decoding: message.payload, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let presence = Presence(rawValue: text) else {
            warn("Machine state neither online nor offline ignored", topic: topics.state, message.payload)
            return
        }
        _ = transition { game, context in game.presence(presence, retained: message.retain, context) }
    }

    /// The PC's fault report on `claw/<m>/fault` (SPEC §12): the machine
    /// goes into maintenance. A message that is not the documented JSON is
    /// logged (now and then) and ignored: it never takes a machine out.
    func handleFault(_ message: MQTTMessage) {
        guard admit(ack: false, on: topics.fault) else { return }
        if message.retain {
            warn("Retained message on a machine topic ignored", topic: topics.fault, nil)
            return
        }
        let report: MachineFaultReport
        do throws(MachineFaultReport.Invalid) {
            report = try MachineFaultReport.decode(message.payload)
        } catch {
            warn("Fault report not understood, ignored", topic: topics.fault, message.payload, error: error.message)
            return
        }
        endingGame { game, context in game.fault(report, context) }
    }

    /// Handles whatever deadline of the machine has passed; the arcade's
    /// deadlines call this.
    func fireDeadlines() {
        _ = transition { game, context in game.expire(context) } afterwards: { guarded in
            // The entry that woke us is gone; the transition schedules what is left.
            guarded.scheduled = nil
        }
    }

    /// After every (re)connect to the broker: ends a game whose coin went
    /// out on the connection that is gone and was never acked
    /// (``MachineState/brokerReconnected(_:)``), else publishes the retained
    /// snapshot as it is.
    /// The gateway is connected to the broker again, on `connection`.
    func republish(connection: Int) {
        endingGame { game, context in game.brokerReconnected(connection: connection, context) }
    }

    /// Runs a transition that may end a game early (its coin the PC cannot
    /// be known to have got, its board's fault); the commands of that game
    /// still waiting behind its coin are forgotten in the same breath, so
    /// none of them reaches the PC.
    private func endingGame(_ body: (inout MachineState, TransitionContext) -> Step<String?>) {
        _ = transition(body, then: { guarded, ended in
            if let ended { guarded.outbox.discardWaitingCommands(session: ended) }
        })
    }

    /// Ends the machine: nothing is published or told after this, whatever
    /// its transitions decided before and whenever their writes become
    /// durable.
    func stop() {
        // The open turn as it stands (the commands of its last phase too):
        // what the next start takes up (SPEC §13). The writer commits it
        // before it closes the file.
        let now = environment.clock.moment()
        if let open = guarded.withLock({ $0.stopped ? nil : $0.game.openRecord(at: now) }) {
            _ = environment.writer.submit([.game(open)], machine: index)
        }
        halted.store(true, ordering: .releasing)
        let waiters = guarded.withLock { guarded in
            guarded.stopped = true
            guarded.outbox.discard()
            defer { guarded.toldWaiters.removeAll() }
            return guarded.toldWaiters.map(\.continuation)
        }
        for waiter in waiters { waiter.resume(returning: false) }
    }

    /// Waits until `ticket` is durable and everything the machine decided up
    /// to the transition that got it is carried out (told), carrying it out
    /// itself if no one else is: true when it is, false when `timeout`
    /// passed first or the machine stopped. No answer waits for this (an
    /// answer waits for durability, ``Arcade/durable(_:)``): it is how a
    /// test knows the effects of what it did have happened, without sleeping.
    func waitTold(_ ticket: StorageWriter.Ticket, timeout: Duration) async -> Bool {
        guard await environment.writer.waitDurable(ticket, timeout: timeout) else { return false }
        drain()
        return await withCheckedContinuation { continuation in
            let answer: Bool? = guarded.withLock { guarded in
                if guarded.stopped { return false }
                if guarded.outbox.isTold(through: ticket) { return true }
                // Another thread is carrying it out; it wakes us when done.
                guarded.toldWaiters.append((ticket, continuation))
                return nil
            }
            if let answer { continuation.resume(returning: answer) }
        }
    }

    /// The machine's state now, as its retained snapshot shows it (also what
    /// the read API and the metrics read).
    func currentSnapshot() -> QueueSnapshot {
        let now = environment.clock.moment()
        return guarded.withLock { $0.game.snapshot(at: now) }
    }

    /// The machine's statistics for the interval that ends now, which
    /// starts the next one (SPEC §4, `claw/<m>/stats`).
    func takeStats(at now: Moment, interval: Duration) -> MachineStatsReport {
        let (online, status, length) = guarded.withLock { ($0.game.online, $0.game.status, $0.game.waiting.count) }
        let (figures, today) = metrics.stats.take(at: now.wall)
        return MachineStatsReport(
            machine: id, ts: Timestamp.string(now.wall), intervalSeconds: interval.seconds, online: online, state: status,
            queueLength: length, commands: figures.commands,
            dropped: Dictionary(uniqueKeysWithValues: figures.dropped.map { ($0.key.rawValue, $0.value) }), acks: figures.acks,
            ackTimeouts: figures.ackTimeouts, ackLatencyMs: figures.latency, gamesToday: today.games, winsToday: today.wins)
    }

    /// Brings the machine's gauges on `/metrics` up to date.
    func exportGauges() {
        let snapshot = currentSnapshot()
        metrics.queueLength.set(to: Double(snapshot.length))
        metrics.online.set(to: snapshot.online ? 1 : 0)
        metrics.suspect.set(to: snapshot.suspect ? 1 : 0)
        metrics.maintenance.set(to: snapshot.state == .maintenance ? 1 : 0)
        if let stock = snapshot.stock { metrics.stock(stock) }
    }

    /// What storage must hold for this machine, for the writer's rewrite after a failure.
    func durableImage() -> DurableMachine {
        let now = environment.clock.moment()
        return guarded.withLock { $0.game.durableImage(at: now) }
    }

    // MARK: Operators
    //
    // Every change an operator asks for carries its ``AuditDraft``: the
    // entry is written with the change, in the same transaction (SPEC §16),
    // showing the machine as ``OperatorView`` sees it before and after.

    /// Stops offering turns; the queue and a game in progress go on.
    func pause(_ audit: AuditDraft) -> (Bool, StorageWriter.Ticket?) {
        transition(audit: MachineAudit(audit)) { game, context in game.pause(context) }
    }

    func resume(_ audit: AuditDraft) -> (Bool, StorageWriter.Ticket?) {
        transition(audit: MachineAudit(audit)) { game, context in game.resume(context) }
    }

    /// Takes the machine out of play by hand (after its game in progress)
    /// or puts it back (SPEC §12).
    func maintain(on: Bool, reason: String?, _ audit: AuditDraft) -> (Bool, StorageWriter.Ticket?) {
        transition(audit: MachineAudit(audit)) { game, context in game.maintain(on: on, reason: reason, context) }
    }

    /// Sends the PC a reset (1002); see ``MachineState/reset(_:)``. Only a
    /// reset sent is an entry: a refused one changed nothing.
    func reset(_ audit: AuditDraft) -> (MachineState.ResetOutcome, StorageWriter.Ticket?) {
        transition(audit: MachineAudit(audit) { if case .sent = $0 { true } else { false } }) { game, context in game.reset(context) }
    }

    /// A reload changed the machine's config or the game's settings
    /// (``MachineState/reconfigure(_:settings:_:)``). The machine's id and
    /// topics stay. The reload's audit entry is the reloader's.
    func reconfigure(_ config: MachineConfig, settings: GameSettings) {
        _ = transition { game, context in game.reconfigure(config, settings: settings, context) }
    }

    /// A reload took the machine out of the config
    /// (``MachineState/retire(_:)``): once its game is over it clears its
    /// retained snapshot and tells the observers it is gone.
    func retire() {
        _ = transition { game, context in game.retire(context) }
    }

    /// Taken out by a reload and still finishing its last game.
    var isRetiring: Bool {
        guarded.withLock { $0.game.retiring }
    }

    /// Sets the board settings over the file's, or back to the file's (nil):
    /// from the next coin (``MachineState/setSettings(_:_:)``).
    func setSettings(_ settings: MachineSettings?, _ audit: AuditDraft) -> (Bool, StorageWriter.Ticket?) {
        transition(audit: MachineAudit(audit)) { game, context in game.setSettings(settings, context) }
    }

    /// The board settings the next coin carries, and whether an operator set them.
    var boardSettings: (settings: MachineSettings, runtime: Bool) {
        guarded.withLock { ($0.game.boardSettings, $0.game.settingsOverride != nil) }
    }

    /// The chain's ledger answered a debit (SPEC §11): taken when its session
    /// is this machine's turn (true), else left for another machine.
    func debitAnswered(_ answer: ChainWalletAnswer) -> Bool {
        guard guarded.withLock({ $0.game.phase.turn?.session == answer.session }) else { return false }
        _ = transition { game, context in game.debitAnswered(answer, context) }
        return true
    }

    /// An operator sets the machine's stock of prizes or adds to it, with a
    /// reason (SPEC §15; ``MachineState/restock(_:reason:_:)``).
    func restock(_ change: StockChange, reason: String, _ audit: AuditDraft) -> (MachineState.Restock, StorageWriter.Ticket?) {
        transition(audit: MachineAudit(audit) { if case .stock = $0 { true } else { false } }) { game, context in
            game.restock(change, reason: reason, context)
        }
    }

    /// The machine's prize and its counted stock (nil: never set), as they now are.
    var prizeStock: (prize: MachinePrize?, stock: Int64?) {
        guarded.withLock { ($0.game.machine.prize, $0.game.countedStock) }
    }

    /// Ends the current turn as `skipped`; false when nobody holds the machine.
    func skip(_ audit: AuditDraft) -> (Bool, StorageWriter.Ticket?) {
        transition(audit: MachineAudit(audit)) { game, context in game.skip(context) }
    }

    /// Takes a player out of the queue, or ends their turn as `skipped`;
    /// `provider` is needed only when the account is there for both.
    func remove(accid: String, provider: String?, _ audit: AuditDraft) -> (MachineState.Removal, StorageWriter.Ticket?) {
        transition(audit: MachineAudit(audit) { $0 == .removed }) { game, context in
            game.remove(accid: accid, provider: provider, context)
        }
    }

    /// An operator's correction of an ended game's result (SPEC §16;
    /// ``MachineState/correct(_:_:)``), written with its audit entry: the
    /// outcome counted and the prize's state, before and after.
    func correct(_ change: ResultCorrection, _ audit: AuditDraft) -> (MachineState.Corrected, StorageWriter.Ticket?) {
        let before = AuditValue(CorrectionView(outcome: change.game.countedOutcome, prize: change.prize?.state))
        let shows: (before: AuditValue, after: (MachineState.Corrected) -> AuditValue) = (
            before,
            { outcome in
                guard case .corrected(let prize) = outcome else { return before }
                return AuditValue(CorrectionView(outcome: change.correction.outcome, prize: prize?.state))
            }
        )
        let result = transition(audit: MachineAudit(audit, shows: shows) { if case .corrected = $0 { true } else { false } }) { game, context in
            game.correct(change, context)
        }
        if case .corrected = result.0, let ended = change.game.endedAt.flatMap(Timestamp.date) {
            let wins = (change.correction.outcome == .won ? 1 : 0) - (change.game.countedOutcome == .won ? 1 : 0)
            if wins != 0 { metrics.stats.corrected(endedAt: ended, wins: wins) }
        }
        return result
    }

    // MARK: Transitions and their effects

    /// Runs one transition under the lock, then carries out its effects.
    private func transition<Outcome: Sendable>(
        audit: MachineAudit<Outcome>? = nil,
        _ body: (inout MachineState, TransitionContext) -> Step<Outcome>,
        afterwards: (inout Guarded) -> Void = { _ in },
        then: (inout Guarded, Outcome) -> Void = { _, _ in }
    ) -> (Outcome, StorageWriter.Ticket?) {
        let connected = environment.publisher.isConnected
        let writable = environment.writer.isWritable
        let (outcome, ticket, schedule) = guarded.withLock { guarded in
            afterwards(&guarded)
            let (step, ticket) = environment.ledger.transact(machine: index) { money in
                let context = TransitionContext(
                    now: environment.clock.moment(), brokerConnected: connected, storageWritable: writable, wallets: money.book,
                    chainLedger: money.chain)
                let before = audit.map { $0.shows?.before ?? AuditValue(OperatorView(guarded.game)) }
                var step = body(&guarded.game, context)
                if let audit, let before, audit.accepted(step.outcome) {
                    let after = audit.shows.map { $0.after(step.outcome) } ?? AuditValue(OperatorView(guarded.game))
                    step.writes.append(.audit(audit.draft.entry(before: before, after: after, at: context.now.wall)))
                }
                return (step, step.writes)
            }
            then(&guarded, step.outcome)
            if !step.effects.isEmpty, !guarded.stopped {
                guarded.outbox.append(step.effects, ticket: ticket)
            }
            // Tell the deadlines only when this machine's next one came closer.
            var schedule: Duration?
            if let next = guarded.game.nextDeadline(), guarded.scheduled.map({ next < $0 }) ?? true {
                guarded.scheduled = next
                schedule = next
            }
            return (step.outcome, ticket, schedule)
        }
        if let schedule { environment.deadlines.schedule(index, at: schedule) }
        drain()
        return (outcome, ticket)
    }

    /// Carries out what is ready in the outbox, in order, unless another
    /// thread is already doing so (it will pick up what was added).
    func drain() {
        let writer = environment.writer
        while true {
            let work: MachineOutbox.Work? = guarded.withLock { guarded in
                guard !guarded.stopped, !guarded.outbox.draining else { return nil }
                let work = guarded.outbox.takeReady(
                    isDurable: writer.isDurable, awaitingCoin: guarded.game.sessionAwaitingCoinAck,
                    current: guarded.game.phase.turn?.session)
                guard !work.isEmpty else { return nil }
                guarded.outbox.draining = true
                return work
            }
            guard let work else { return }
            run(work)
            let (more, told) = guarded.withLock { guarded in
                guarded.outbox.draining = false
                return (!guarded.stopped && guarded.outbox.hasReady(isDurable: writer.isDurable), guarded.takeToldWaiters())
            }
            for waiter in told { waiter.resume(returning: true) }
            guard more else { return }
        }
    }

    private func run(_ work: MachineOutbox.Work) {
        // Coins that could not be published, and their games: nothing more of those goes out.
        var lostCoins: [Int64] = []
        var lostSessions: Set<String> = []
        // Coins published, and the connection each went on.
        var sentCoins: [(serial: Int64, connection: Int)] = []
        for _ in 0..<work.dropped { metrics.commandsLost.increment() }
        for (message, camera) in work.commands where !halted.load(ordering: .acquiring) {
            let topic = camera ? topics.camera : topics.control
            if !lostSessions.isEmpty, let session = message.session, lostSessions.contains(session) {
                metrics.commandsLost.increment()
                continue
            }
            do {
                let connection = try environment.publisher.publish(topic, payload: message.encoded(), qos: .atMostOnce, retain: false)
                if message.code == .addCoins, let serial = message.serial { sentCoins.append((serial, connection)) }
                metrics.stats.commandSent()
            } catch {
                metrics.commandsLost.increment()
                logger.warning("Command not published", metadata: error.shape.metadata(["mqtt.topic": .string(topic)]))
                if message.code == .addCoins, let serial = message.serial {
                    lostCoins.append(serial)
                    if let session = message.session { lostSessions.insert(session) }
                }
            }
        }
        defer {
            // After what this work tells: the game's end is told after its start.
            for serial in lostCoins where !halted.load(ordering: .acquiring) {
                endingGame { game, context in game.coinNotPublished(serial: serial, context) }
            }
            // A reconnect while a coin was on its way: was it before the coin went out, or after?
            for (serial, connection) in sentCoins where !halted.load(ordering: .acquiring) {
                endingGame { game, context in game.coinPublished(serial: serial, on: connection, context) }
            }
        }
        for effect in work.tells where !halted.load(ordering: .acquiring) {
            switch effect {
            case .command:
                break
            case .event(let event, let published):
                metrics.record(event, at: environment.clock.wallNow())
                note(event)
                if published { publish(event) }
            case .snapshot(let snapshot):
                publish(snapshot)
            case .reply(let reply):
                send(reply)
            case .confirmResult(let serial):
                confirm(result: serial)
            case .askDebit(let ask):
                environment.ledger.ask(ask)
            case .gone:
                leave()
            }
        }
    }

    /// Sends a reply, unless it is a refusal of a code the player was
    /// already sent within the last second. Notices (high priority: a turn
    /// that ended without its player) always go out.
    private func send(_ reply: PlayerReply) {
        if reply.message.code == .error, reply.priority == .normal, let code = reply.message.data.flatMap(ErrorCode.init(rawValue:)),
            !environment.limits.mayRefuse(reply.to, code: code, now: environment.clock.now())
        {
            metrics.refusalsHeldBack.increment()
            return
        }
        environment.players.send(reply, from: config)
    }

    /// Counts a notification for this machine dropped over its sender's budget.
    func countOverBudget() {
        metrics.dropped(.rateLimited)
    }

    /// Tells a player whose notification was over their budget (SPEC §2):
    /// no transition, no event; the arcade sends this at most once a second.
    func tellOverBudget(_ player: PlayerAddress, serial: Int64?) {
        guard !halted.load(ordering: .acquiring) else { return }
        let error = Arcade.overBudget(settings)
        environment.players.send(
            PlayerReply(
                to: player, message: WireMessage(.error, data: error.code.rawValue, serial: serial, message: error.message),
                priority: .normal, expires: nil),
            from: config)
    }

    private func publish(_ event: GameEvent) {
        let payload = event.encoded()
        for observer in environment.observers { observer.event(index, event, payload: payload) }
        do {
            try environment.publisher.publish(topics.events, payload: payload, qos: .atMostOnce, retain: false)
        } catch where error.code == .notConnected {
            // Events are a live stream; while the broker is away there is no one to tell.
        } catch {
            logger.warning("Event not published", metadata: error.shape.metadata(["event.type": .string(event.type.rawValue)]))
        }
    }

    /// The retained snapshot, QoS 1. While the broker is away it is skipped:
    /// the gateway republishes every snapshot when it reconnects.
    private func publish(_ snapshot: QueueSnapshot) {
        let payload = snapshot.encoded()
        for observer in environment.observers { observer.snapshot(index, snapshot, payload: payload) }
        do {
            try environment.publisher.publish(topics.queue, payload: payload, qos: .atLeastOnce, retain: true)
        } catch where error.code == .notConnected {
            logger.debug("Snapshot not published while disconnected")
        } catch {
            logger.warning("Snapshot not published", metadata: error.shape.metadata())
        }
    }

    /// Tells the PC its result `serial` is on disk, QoS 1, not retained. One
    /// that cannot go out now is not kept: the PC repeats its result until
    /// confirmed, and the repeat is confirmed again.
    private func confirm(result serial: Int64) {
        do {
            try environment.publisher.publish(
                topics.resultAck, payload: ResultConfirmation(serial: serial).encoded(), qos: .atLeastOnce, retain: false)
        } catch {
            logger.debug("Result not confirmed; the PC repeats it", metadata: error.shape.metadata(["mqtt.serial": "\(serial)"]))
        }
    }

    /// Retired and free: the retained snapshot is cleared (an empty retained
    /// message), so that no one takes the machine for one still there.
    private func leave() {
        do {
            try environment.publisher.publish(topics.queue, payload: [], qos: .atLeastOnce, retain: true)
        } catch {
            logger.warning("Retained snapshot of a removed machine not cleared", metadata: error.shape.metadata())
        }
        logger.notice("Machine removed: its last game is over")
        for observer in environment.observers { observer.gone(index) }
    }

    /// What operators want in the log, from the events.
    private func note(_ event: GameEvent) {
        switch event.type {
        case .gameEnded:
            logger.info(
                "Game ended",
                metadata: [
                    "player.accid": .string(event.player ?? ""), "game.session": .string(event.session ?? ""),
                    "game.outcome": .string(event.outcome?.rawValue ?? ""), "game.commands": .stringConvertible(event.commands ?? 0),
                ])
        case .online:
            logger.info("Machine online")
        case .offline:
            logger.warning("Machine offline")
        case .lowStock:
            logger.warning("Stock of prizes low: restock soon", metadata: ["machine.stock": .stringConvertible(event.stock ?? 0)])
        case .outOfStock:
            logger.warning("Out of prizes: no turn is offered until a restock")
        case .restocked:
            logger.notice(
                "Stock of prizes changed by an operator",
                metadata: [
                    "machine.stock": .stringConvertible(event.stock ?? 0), "stock.change": .stringConvertible(event.change ?? 0),
                    "stock.reason": .string(event.reason ?? ""),
                ])
        case .fault:
            logger.error(
                "Machine fault: out of play until it is reset",
                metadata: ["machine.fault": .string(event.data ?? ""), "machine.fault_text": .string(event.reason ?? "")])
        case .maintenance:
            logger.notice(
                event.data == "on" ? "Machine taken out of play" : "Machine back in play",
                metadata: ["machine.reason": .string(event.reason ?? "")])
        case .reset:
            logger.notice(
                event.data == "sent" ? "Reset sent" : "Reset not acked",
                metadata: ["mqtt.serial": .stringConvertible(event.serial ?? 0)])
        case .ackTimeout:
            logger.warning(
                "Ack timed out",
                metadata: ["mqtt.serial": .stringConvertible(event.serial ?? 0), "wire.command": .string(event.command ?? "")])
        case .staleResult:
            logger.notice(
                "Result for a game that is over ignored",
                metadata: ["game.session": .string(event.session ?? ""), "game.result": .string(event.data ?? "")])
        case .result where event.player == nil:
            logger.notice("Result with no game in progress", metadata: ["game.result": .string(event.data ?? "")])
        case .dropped:
            logger.debug(
                "Request refused",
                metadata: ErrorShape(code: event.reason ?? "refused", message: "The player was answered command 9 with this code").metadata([
                    "player.accid": .string(event.player ?? ""), "wire.command": .string(event.command ?? "?"),
                ]))
        default:
            break
        }
    }

    // MARK: Inbound messages

    /// Whether the PC's message is within its budget; the excess is dropped
    /// undecoded, counted with the ignored messages, and logged now and then.
    private func admit(ack: Bool, on topic: String) -> Bool {
        let now = environment.clock.now()
        let admitted = inboundBudget.withLock { budget in
            ack ? budget.acks.take(now: now) : budget.others.take(now: now)
        }
        if !admitted { warn("Machine's messages over its budget dropped", topic: topic, nil) }
        return admitted
    }

    /// A message on one of the machine's inbound topics, decoded; nil (and
    /// logged) when it is not the command expected there. Retained messages
    /// on `ack` and `result` are never acted on: they are old news, and a
    /// retained result would end every new game the moment the gateway
    /// subscribes.
    private func inbound(_ message: MQTTMessage, expecting code: CommandCode, on topic: String) -> WireMessage? {
        if message.retain {
            warn("Retained message on a machine topic ignored", topic: topic, nil)
            return nil
        }
        do throws(WireError) {
            let decoded = try WireMessage.decode(message.payload)
            guard decoded.code == code else {
                warn("Unexpected command on machine topic ignored", topic: topic, message.payload)
                return nil
            }
            return decoded
        } catch {
            warn("Undecodable message on machine topic ignored", topic: topic, message.payload, error: error.message)
            return nil
        }
    }

    /// A warning about what the PC sent: at most one of each kind every
    /// 10 s, the payload escaped and cut short.
    private func warn(_ text: Logger.Message, topic: String, _ payload: [UInt8]?, error: String? = nil) {
        metrics.badMessages.increment()
        var metadata: Logger.Metadata = ["mqtt.topic": .string(topic)]
        if let payload { metadata["mqtt.payload"] = .string(LogText.payload(payload)) }
        if let error { metadata["error.message"] = .string(error) }
        warnings.warning("\(text)", text, metadata, on: logger)
    }
}

extension Machine {
    /// The topics the machine's PC speaks on: its ack, result, state and faults.
    var inbound: [(topic: String, kind: MachineTopic)] {
        [(topics.ack, .ack), (topics.result, .result), (topics.state, .state), (topics.fault, .fault)]
    }

    /// What the gateway subscribes to for this machine: ``inbound``, at QoS
    /// 1, on the gateway's persistent session: what a PC says while the
    /// gateway restarts waits for it at the broker (SPEC §13).
    var subscriptions: [(topic: String, qos: MQTTQoS)] {
        inbound.map { ($0.topic, .atLeastOnce) }
    }
}

/// A machine's topics, worked out once.
struct MachineTopics: Sendable {
    let control, camera, ack, result, resultAck, state, fault, queue, events, stats: String

    init(_ machine: MachineConfig, _ topics: Topics) {
        control = topics.machine(machine.id, .control)
        camera = machine.cameraTopic ?? topics.machine(machine.id, .camera)
        ack = topics.machine(machine.id, .ack)
        result = topics.machine(machine.id, .result)
        resultAck = topics.machine(machine.id, .resultAck)
        state = topics.machine(machine.id, .state)
        fault = topics.machine(machine.id, .fault)
        queue = topics.machine(machine.id, .queue)
        events = topics.machine(machine.id, .events)
        stats = topics.machine(machine.id, .stats)
    }
}

/// An operator's change of a machine as its transition records it (SPEC §16).
struct MachineAudit<Outcome: Sendable> {
    var draft: AuditDraft
    /// Whether the outcome is a change made (or asked and already so), not a refusal: a refused request is no entry.
    var accepted: (Outcome) -> Bool
    /// What the entry shows before and after; nil: the machine as ``OperatorView`` sees it.
    var shows: (before: AuditValue, after: (Outcome) -> AuditValue)?

    init(
        _ draft: AuditDraft, shows: (before: AuditValue, after: (Outcome) -> AuditValue)? = nil,
        accepted: @escaping (Outcome) -> Bool = { _ in true }
    ) {
        self.draft = draft
        self.shows = shows
        self.accepted = accepted
    }
}

/// A machine as the audit trail shows it before and after an operator's
/// change: what operators change, nothing of the players' but the one who
/// holds the machine and how many wait.
struct OperatorView: Encodable {
    var state: MachineStatus
    var paused: Bool
    var maintenance: Maintenance?
    var settings: MachineSettings?
    var stock: Int64?
    var player: String?
    var waiting: Int

    init(_ game: MachineState) {
        state = game.status
        paused = game.paused
        maintenance = game.maintenance
        settings = game.settingsOverride
        stock = game.countedStock
        player = game.phase.turn.map { "\($0.player.provider)/\($0.player.accid)" }
        waiting = game.waiting.count
    }
}

/// A game as the audit trail shows its correction: the outcome counted, and its prize's state.
struct CorrectionView: Encodable {
    var outcome: GameOutcome?
    var prize: PrizeState?
}
