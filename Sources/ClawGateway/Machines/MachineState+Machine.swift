import Protocol

/// What the machine's PC says (SPEC §2–§4): its presence, its acks, its
/// results; and what happens when a deadline passes.
extension MachineState {
    // MARK: Results

    /// The PC's command 4.
    ///
    /// A result naming a session that is not the current game's came too late
    /// for its game and is ignored (event `stale_result`): it can never end
    /// the next player's game. A result without a session is the current
    /// game's, since the NetEase PC format has none.
    ///
    /// A PC that numbers its results (`serial`) repeats each until it is
    /// confirmed on `result/ack`, which goes out once what the result
    /// changed is durable (SPEC §4): a repeat of the result already taken
    /// changes nothing and is confirmed again, and so is a stale one. A
    /// result without a serial is taken as it comes, once, as ever.
    mutating func result(won: Bool, data: String, session: String?, serial: Int64? = nil, _ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        if let serial, let taken = lastResult, taken.serial == serial, session == nil || session == taken.session {
            confirmResult(serial, &fx)
            return finish((), &fx)
        }
        let turn = phase.turn
        if let session, session != turn?.session {
            emit(.staleResult, &fx) {
                $0.session = session
                $0.data = data
            }
            confirmResult(serial, &fx)
            return finish((), &fx)
        }
        switch phase {
        case .playing(let turn), .awaitingResult(let turn):
            reply(turn.player.address, WireMessage(.result, data: data, session: turn.session), .high, &fx)
            emit(.result, &fx) {
                $0.set(turn.player.address)
                $0.session = turn.session
                $0.data = data
            }
            if let serial {
                modifyTurn { $0.resultSerial = serial }
                lastResult = TakenResult(serial: serial, session: turn.session)
            }
            endTurn(won ? .won : .lost, &fx)
        case .idle, .offered:
            // No game is waiting for a result: recorded for operators, told to no one.
            emit(.result, &fx) { $0.data = data }
        }
        confirmResult(serial, &fx)
        return finish((), &fx)
    }

    /// Tells the PC its numbered result is taken (`result/ack`): a telling
    /// effect, so it goes out once this transition's writes are durable.
    private func confirmResult(_ serial: Int64?, _ fx: inout Effects) {
        if let serial { fx.list.append(.confirmResult(serial: serial)) }
    }

    // MARK: Acks

    /// The PC's (or camera switch's) command 5 for the gateway serial `serial`.
    mutating func ack(serial: Int64, data: String?, _ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        // Any ack, even a late one, shows the PC is there.
        acksMissedInARow = 0
        clearSuspect(&fx)
        guard let pending = acks.remove(serial) else {
            // Late (after its timeout), repeated, or not ours: nothing waits for it.
            return finish((), &fx)
        }
        if pending.command == .reset { resetAcked(serial: serial) }
        if pending.command == .addCoins, let session = pending.session, phase.turn?.session == session {
            // The PC started the game: a restart from now on takes it up with its coin acked.
            modifyTurn { $0.coinAcked = true }
            writeOpenGame(&fx)
        }
        let latency = context.now.uptime - pending.sentAt
        emit(.ack, &fx) {
            $0.set(pending.player)
            $0.command = pending.command.description
            $0.data = data
            $0.serial = serial
            $0.playerSerial = pending.playerSerial
            $0.latencyMs = (latency.seconds * 1_000_000).rounded() / 1000
        }
        if settings.relayAcks, let player = pending.player, let playerSerial = pending.playerSerial {
            reply(player, WireMessage(.ack, data: data, serial: playerSerial), .normal, &fx)
        }
        return finish((), &fx)
    }

    // MARK: Presence

    /// The PC's `state`. `retained` is true when the broker delivered it
    /// from its store, on (re)subscribing, rather than as the PC said it.
    mutating func presence(_ presence: Presence, retained: Bool, _ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        switch presence {
        case .online: goOnline(retained: retained, &fx)
        case .offline: goOffline(&fx)
        }
        return finish((), &fx)
    }

    private mutating func goOnline(retained: Bool, _ fx: inout Effects) {
        // A fresh `online` clears a suspect machine, whether it was offline or
        // not. A retained one is what the broker kept, maybe from long ago:
        // a dead PC's stays there when its will never fired (the case
        // `suspect` exists for), and the gateway is given it again on every
        // reconnect to the broker.
        if !retained {
            acksMissedInARow = 0
            clearSuspect(&fx)
            resetDone(&fx)
        }
        switch link {
        case .online:
            return
        case .reconnecting(_, let remaining):
            // Back within the grace: the game goes on, its timer from where it stopped.
            link = .online
            let resumed = fx.now.uptime + remaining
            modifyTurn { $0.deadline = resumed }
            writeOpenGame(&fx)
            fx.snapshotChanged = true
            emit(.online, &fx)
            guard let turn = phase.turn else { return }
            emit(.reconnected, &fx) {
                $0.set(turn.player.address)
                $0.session = turn.session
            }
            // "0": it is your game (again); the app takes its controls back.
            reply(turn.player.address, WireMessage(.queuePosition, data: "0", length: waiting.count), .high, &fx)
        case .offline:
            link = .online
            fx.snapshotChanged = true
            emit(.online, &fx)
        }
    }

    private mutating func clearSuspect(_ fx: inout Effects) {
        guard suspect else { return }
        suspect = false
        fx.snapshotChanged = true
        emit(.suspectCleared, &fx)
    }

    /// The PC is gone and its pending acks will never come. A game in
    /// progress is kept for `game.offline_grace` with its timer stopped, in
    /// case the PC comes back (a network blip); an offer is undone and its
    /// player keeps the head of the queue; the queue stays.
    private mutating func goOffline(_ fx: inout Effects) {
        guard link == .online else { return }
        link = .offline
        fx.snapshotChanged = true
        // A PC that leaves before it acked the game's coin cannot be known to
        // have got it: a process killed as the coin went out comes back in no
        // game, so the game ends now, not after the grace. Its moves never
        // go out.
        let coinUnacked = phase.turn.map { acks.coin(for: $0.session) != nil } ?? false
        acks.removeAll()
        resetLost()
        emit(.offline, &fx)
        guard let turn = phase.turn else { return }
        if coinUnacked, endGameOfLostCoin(turn.session, reason: Self.coinMachineOffline, &fx) { return }
        switch phase {
        case .playing, .awaitingResult:
            guard settings.offlineGrace > .zero else { break }
            let until = fx.now.uptime + settings.offlineGrace
            link = .reconnecting(until: until, remaining: max(.zero, turn.deadline - fx.now.uptime))
            writeOpenGame(&fx)
            emit(.reconnecting, &fx) {
                $0.set(turn.player.address)
                $0.session = turn.session
            }
            let seconds = Int(settings.offlineGrace.seconds.rounded(.up))
            let kept = "\(machine.name) lost its connection; your game is kept for \(seconds) s while it reconnects. "
                + "Commands sent meanwhile are dropped."
            notice(turn.player.address, WireError(.machineOffline, kept), &fx)
            return
        case .offered, .idle:
            break
        }
        endOfflineTurn(turn, &fx)
    }

    /// Ends the turn of a machine that is gone: an offer goes back to the
    /// head of the queue, a game ends `machine_offline`.
    private mutating func endOfflineTurn(_ turn: Turn, _ fx: inout Effects) {
        let wasOffered = if case .offered = phase { true } else { false }
        endTurn(.machineOffline, &fx)
        if wasOffered, turn.isContinue {
            // A continue was never a place in the queue: the waiting players keep theirs.
            notice(turn.player.address, WireError(.machineOffline, "\(machine.name) went offline; your continue has ended. Join again to play."), &fx)
        } else if wasOffered {
            waiting.insert(turn.player, at: 0)
            fx.writes.append(.enqueue(machine: id, turn.player, atHead: true, at: fx.now.wall))
            fx.queueMoved(from: 0)
            notice(turn.player.address, WireError(.machineOffline, "\(machine.name) went offline; you keep the head of its queue."), &fx)
        } else {
            notice(turn.player.address, WireError(.machineOffline, "\(machine.name) went offline; your game has ended."), &fx)
        }
    }

    // MARK: Deadlines

    /// Everything whose deadline has passed at `context.now`: the turn's timer
    /// (an offer expires, the play timer drops the claw, the result timer
    /// gives up) and the acks that did not come within `ack_timeout`.
    mutating func expire(_ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        let now = context.now.uptime
        debitUnanswered(&fx)
        checkpointIfDue(&fx)
        if case .reconnecting(let until, _) = link, until <= now {
            // The grace ran out: the machine is gone after all.
            link = .offline
            fx.snapshotChanged = true
            if let turn = phase.turn { endOfflineTurn(turn, &fx) }
        } else if case .reconnecting = link {
            // The turn's timer is stopped while the PC reconnects.
        } else if let turn = phase.turn, turn.deadline <= now {
            switch phase {
            case .offered where turn.debitAskedUntil != nil:
                // Accepted in time, its debit asked of the chain's ledger: the
                // offer waits for the answer (or the ask's timeout) before it expires.
                break
            case .offered:
                emit(.expired, &fx) {
                    $0.set(turn.player.address)
                    $0.session = turn.session
                }
                endTurn(.expired, &fx)
                let seconds = Int(acceptWindow(turn).seconds.rounded(.up))
                let what = turn.isContinue ? "Your continue" : "Your turn"
                let passed = "\(what) on \(machine.name) passed: it was not accepted within \(seconds) s. Join again to play."
                notice(turn.player.address, WireError(.offerExpired, passed), &fx)
            case .playing:
                dropClaw(&fx)
            case .awaitingResult:
                emit(.noResult, &fx) {
                    $0.set(turn.player.address)
                    $0.session = turn.session
                }
                endTurn(.noResult, &fx)
                let lost = "\(machine.name) reported no result for your game in time; it is recorded as no_result."
                notice(turn.player.address, WireError(.noResult, lost), &fx)
            case .idle:
                break
            }
        }
        while let (serial, pending) = acks.oldest(), pending.sentAt + settings.ackTimeout <= now {
            _ = acks.remove(serial)
            emit(.ackTimeout, &fx) {
                $0.set(pending.player)
                $0.command = pending.command.description
                $0.serial = serial
                $0.playerSerial = pending.playerSerial
            }
            acksMissedInARow += 1
            if settings.suspectAfter > 0, acksMissedInARow >= settings.suspectAfter, !suspect {
                suspect = true
                fx.snapshotChanged = true
                emit(.suspect, &fx)
            }
            if pending.command == .addCoins { endGameOfLostCoin(pending.session, reason: Self.coinNotAcked, &fx) }
            if pending.command == .reset { resetNotAcked(serial: serial, &fx) }
        }
        return finish((), &fx)
    }

    // MARK: The coin

    /// `reason` of the `game_ended` of a game whose coin (1001) was not acked within `ack_timeout`.
    static let coinNotAcked = "coin_not_acked"
    /// ... whose coin was published on a broker connection that is gone, unacked.
    static let coinConnectionLost = "coin_connection_lost"
    /// ... whose coin could not be published.
    static let coinNotPublished = "coin_not_published"
    /// ... whose PC went offline before it acked the coin.
    static let coinMachineOffline = "coin_machine_offline"

    /// The gateway reconnected to the broker (its connection `connection`):
    /// a coin still unacked that went out on a connection that is gone (QoS
    /// 0, never sent again) ends its game before any later command of it
    /// goes out. A coin not published yet (taken out of the outbox, on its
    /// way) goes out on this connection: its game goes on. Otherwise the
    /// snapshot is republished as it is.
    ///
    /// - Returns: the session of the game that ended, if any.
    mutating func brokerReconnected(connection: Int, _ context: TransitionContext) -> Step<String?> {
        brokerConnection = max(brokerConnection, connection)
        let announced = startEvents.map { MachineEffect.event($0) }
        startEvents = []
        guard let session = phase.turn?.session, let serial = acks.coin(for: session),
            let sentOn = acks[serial: serial]?.sentOn, sentOn < connection
        else {
            return Step(outcome: nil, effects: announced + republish(at: context.now), writes: [])
        }
        var fx = Effects(context)
        fx.list = announced
        _ = acks.remove(serial)
        endGameOfLostCoin(session, reason: Self.coinConnectionLost, &fx)
        return finish(session, &fx)
    }

    /// The coin `serial` was published on the broker connection
    /// `connection`. If the gateway has reconnected since (the reconnect
    /// came between the coin's publish and this), the coin went out on a
    /// connection that is gone, and its game ends as it would have then.
    ///
    /// - Returns: the session of the game that ended, if any.
    mutating func coinPublished(serial: Int64, on connection: Int, _ context: TransitionContext) -> Step<String?> {
        var fx = Effects(context)
        guard let pending = acks.coinSent(serial, on: connection), connection < brokerConnection else { return finish(nil, &fx) }
        _ = acks.remove(serial)
        let ended = endGameOfLostCoin(pending.session, reason: Self.coinConnectionLost, &fx)
        return finish(ended ? pending.session : nil, &fx)
    }

    /// Publishing the coin `serial` failed: the PC never got it.
    ///
    /// - Returns: the session of the game that ended, if any.
    mutating func coinNotPublished(serial: Int64, _ context: TransitionContext) -> Step<String?> {
        var fx = Effects(context)
        guard let pending = acks.remove(serial), pending.command == .addCoins else { return finish(nil, &fx) }
        let ended = endGameOfLostCoin(pending.session, reason: Self.coinNotPublished, &fx)
        return finish(ended ? pending.session : nil, &fx)
    }

    /// Ends the game of a coin the PC cannot be known to have got, if it is
    /// still the current one: the coin's ack is the PC's word that the game
    /// started, and a game the PC never started must not take the player's
    /// commands (docs/PROTOCOL.md). Ends it `machine_offline`, told to its
    /// player like any turn that ends without them; the `game_ended` event
    /// carries `reason`.
    @discardableResult
    private mutating func endGameOfLostCoin(_ session: String?, reason: String, _ fx: inout Effects) -> Bool {
        guard let session, let turn = phase.turn, turn.session == session else { return false }
        switch phase {
        case .playing, .awaitingResult: break
        case .offered, .idle: return false
        }
        endTurn(.machineOffline, reason: reason, &fx)
        let ended = "\(machine.name) did not confirm the start of your game; it has ended. Join again to play."
        notice(turn.player.address, WireError(.machineOffline, ended), &fx)
        return true
    }

    // MARK: Start

    /// How long a game taken up at start waits for its PC's `online` when
    /// `game.offline_grace` is 0: the retained `state` comes with the
    /// subscription, within moments of the start.
    static let startGrace: Duration = .seconds(5)

    /// Takes up the turn that was open when the gateway stopped, cleanly or
    /// by a crash (SPEC §13): an offer is sent again with the time left, a
    /// game goes on from where it was once its PC says `online` (as after a
    /// network drop, within `game.offline_grace`), a game waiting for its
    /// result waits the rest of the result timer; a deadline that passed
    /// while the gateway was away fires at once. A coin not acked yet waits
    /// for its ack again (the broker kept what the PC said meanwhile); the
    /// other commands' acks are not waited for.
    ///
    /// A turn open in a file written before games were taken up (no phase,
    /// no deadline), and every open turn but the newest, cannot be: each
    /// ends as if its timer had run out, with its record kept: an offer
    /// `expired`, a started game `no_result`. Their players are told once
    /// the records are durable.
    mutating func takeUpInterrupted(_ games: [GameRow], _ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        var closing = games
        if let last = games.last, let open = last.open {
            closing.removeLast()
            takeUp(last, open, &fx)
        }
        for game in closing { closeInterrupted(game, &fx) }
        return finish((), &fx)
    }

    private mutating func takeUp(_ game: GameRow, _ open: OpenGame, _ fx: inout Effects) {
        let now = fx.now
        // In whole milliseconds, as storage keeps times (it reads one back
        // into the middle of its millisecond).
        let left = Duration.milliseconds(max(0, Int64((open.deadline.timeIntervalSince(now.wall) * 1000).rounded(.down))))
        let player = QueueEntry(accid: game.player, nick: game.nick, provider: game.provider)
        var turn = Turn(player: player, session: game.id, deadline: now.uptime + left, offeredAt: game.offeredAt)
        turn.startedAt = game.startedAt
        turn.commands = game.commands
        turn.writtenCommands = game.commands
        turn.writtenAt = now.uptime
        turn.serials = SerialWindow(open.serials)
        turn.coinSerial = open.coinSerial
        turn.coinAcked = open.coinAcked
        turn.paid = game.paid
        turn.continues = open.continues
        // An offer sent again says what a game costs now: that is what its accept debits.
        turn.price = price
        switch open.phase {
        case .offered:
            phase = .offered(turn)
            // A passed offer expires at once and is told as such; one still
            // running is offered again with the time it has left.
            if left > .zero {
                let seconds = Int(left.seconds.rounded(.up))
                reply(player.address, offer(turn, serial: takeSerial(), timeout: seconds, fx), .high, &fx, expires: turn.deadline)
            }
        case .playing, .awaitingResult:
            phase = open.phase == .playing ? .playing(turn) : .awaitingResult(turn)
            // Its timer stays stopped until the PC's `online`, which comes
            // retained with the subscription; a PC that never says it ends
            // the game `machine_offline`, as after any drop.
            let grace = settings.offlineGrace > .zero ? settings.offlineGrace : Self.startGrace
            link = .reconnecting(until: now.uptime + grace, remaining: left)
            if let coin = open.coinSerial, !open.coinAcked {
                acks.insert(PendingAck(sentAt: now.uptime, command: .addCoins, session: game.id), serial: coin)
            }
        }
        fx.snapshotChanged = true
        let restored = emit(.restored, &fx) {
            $0.set(player.address)
            $0.nick = player.nick
            $0.session = game.id
            $0.data = open.phase.rawValue
        }
        // Decided before the broker connection: the first one publishes it.
        startEvents.append(restored)
    }

    private mutating func closeInterrupted(_ game: GameRow, _ fx: inout Effects) {
        let offered = game.startedAt == nil
        let outcome: GameOutcome = offered ? .expired : .noResult
        var closed = game
        closed.endedAt = fx.now.wall
        closed.outcome = outcome
        closed.open = nil
        fx.writes.append(.game(closed))
        let player = PlayerAddress(accid: game.player, provider: game.provider)
        // Whether its PC acked the coin is not known from a file of before
        // games were taken up: no_result is paid back either way.
        refundIfOwed(paid: game.paid, outcome: outcome, coinAcked: game.open?.coinAcked ?? false, of: player, session: game.id, &fx)
        emit(offered ? .expired : .noResult, &fx) {
            $0.set(player)
            $0.session = game.id
        }
        emit(.gameEnded, &fx) {
            $0.set(player)
            $0.nick = game.nick
            $0.session = game.id
            $0.outcome = outcome
            $0.commands = game.commands
        }
        if offered {
            let passed = "Your turn on \(machine.name) passed: the gateway restarted before you accepted it. Join again to play."
            notice(player, WireError(.offerExpired, passed), &fx)
        } else {
            let lost = "Your game on \(machine.name) was cut short by a restart of the gateway; it is recorded as no_result."
            notice(player, WireError(.noResult, lost), &fx)
        }
    }

    // MARK: Operators

    /// Stops offering turns; the queue and a game in progress go on.
    mutating func pause(_ context: TransitionContext) -> Step<Bool> {
        var fx = Effects(context)
        guard !paused else { return finish(false, &fx) }
        paused = true
        fx.snapshotChanged = true
        emit(.paused, &fx)
        return finish(true, &fx)
    }

    mutating func resume(_ context: TransitionContext) -> Step<Bool> {
        var fx = Effects(context)
        guard paused else { return finish(false, &fx) }
        paused = false
        fx.snapshotChanged = true
        emit(.resumed, &fx)
        return finish(true, &fx)
    }

    /// Ends the current turn as `skipped`; false when nobody holds the machine.
    mutating func skip(_ context: TransitionContext) -> Step<Bool> {
        var fx = Effects(context)
        guard let turn = phase.turn else { return finish(false, &fx) }
        emit(.skipped, &fx) {
            $0.set(turn.player.address)
            $0.session = turn.session
        }
        endTurnByOperator(turn, &fx)
        return finish(true, &fx)
    }

    /// Takes a player out of the queue, or ends their turn as `skipped`.
    /// An operator names the account, and the provider when the account
    /// alone does not say which player it is (SPEC §5).
    mutating func remove(accid: String, provider: String?, _ context: TransitionContext) -> Step<Removal> {
        var fx = Effects(context)
        let holder = phase.turn.map { [$0.player] } ?? []
        let matches = (holder + waiting).filter { $0.accid == accid && (provider == nil || $0.provider == provider) }
        guard let match = matches.first else { return finish(.notFound, &fx) }
        guard matches.count == 1 else { return finish(.ambiguous(matches.map(\.provider)), &fx) }
        let player = match.address
        if let turn = phase.turn, turn.player.address == player {
            emit(.removed, &fx) {
                $0.set(player)
                $0.session = turn.session
            }
            endTurnByOperator(turn, &fx)
            return finish(.removed, &fx)
        }
        guard let index = waiting.firstIndex(where: { $0.address == player }) else { return finish(.notFound, &fx) }
        let entry = waiting.remove(at: index)
        fx.writes.append(.dequeue(machine: id, player: player))
        fx.queueMoved(from: index)
        emit(.removed, &fx) { $0.set(player) }
        // SPEC has no code of its own for this: not_in_queue is what the app
        // would hear at its next leave or accept, said now.
        notice(entry.address, WireError(.notInQueue, "An operator took you out of the queue of \(machine.name)."), &fx)
        return finish(.removed, &fx)
    }

    /// What became of an operator's removal.
    enum Removal: Sendable, Equatable {
        case removed
        case notFound
        /// The account is there for several providers (these): name one.
        case ambiguous([String])
    }

    /// An operator ended the turn (skip, or removing its player): like the
    /// turns that end by timer, it is told to its player (SPEC §3), with the
    /// code the app would get for its next command, `not_your_turn`.
    private mutating func endTurnByOperator(_ turn: Turn, _ fx: inout Effects) {
        endTurn(.skipped, &fx)
        notice(turn.player.address, WireError(.notYourTurn, "An operator ended your turn on \(machine.name)."), &fx)
    }

    /// Republishes the snapshot as it is, with its current `seq` (after a
    /// reconnect of the broker): nothing changed, nothing is written.
    func republish(at now: Moment) -> [MachineEffect] {
        [.snapshot(snapshot(at: now))]
    }
}
