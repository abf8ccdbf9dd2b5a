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
    mutating func result(won: Bool, data: String, session: String?, _ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        let turn = phase.turn
        if let session, session != turn?.session {
            emit(.staleResult, &fx) {
                $0.session = session
                $0.data = data
            }
            return finish((), &fx)
        }
        switch phase {
        case .playing(let turn), .awaitingResult(let turn):
            reply(turn.player.address, WireMessage(.result, data: data, session: turn.session), .high, &fx)
            emit(.result, &fx) {
                $0.player = turn.player.accid
                $0.session = turn.session
                $0.data = data
            }
            endTurn(won ? .won : .lost, &fx)
        case .idle, .offered:
            // No game is waiting for a result: recorded for operators, told to no one.
            emit(.result, &fx) { $0.data = data }
        }
        return finish((), &fx)
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
        let latency = context.now.uptime - pending.sentAt
        emit(.ack, &fx) {
            $0.player = pending.player?.accid
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

    /// The PC's retained `state`.
    mutating func presence(_ presence: Presence, _ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        switch presence {
        case .online: goOnline(&fx)
        case .offline: goOffline(&fx)
        }
        return finish((), &fx)
    }

    private mutating func goOnline(_ fx: inout Effects) {
        // A fresh `online` clears a suspect machine, whether it was offline or not.
        acksMissedInARow = 0
        clearSuspect(&fx)
        guard link != .online else { return }
        link = .online
        fx.snapshotChanged = true
        emit(.online, &fx)
    }

    private mutating func clearSuspect(_ fx: inout Effects) {
        guard suspect else { return }
        suspect = false
        fx.snapshotChanged = true
        emit(.suspectCleared, &fx)
    }

    /// The PC is gone: its game ends and its pending acks will never come.
    /// The queue stays, and an offered player keeps the head of it.
    private mutating func goOffline(_ fx: inout Effects) {
        guard link == .online else { return }
        link = .offline
        fx.snapshotChanged = true
        acks.removeAll()
        emit(.offline, &fx)
        guard let turn = phase.turn else { return }
        let wasOffered = if case .offered = phase { true } else { false }
        endTurn(.machineOffline, &fx)
        if wasOffered {
            waiting.insert(turn.player, at: 0)
            fx.writes.append(.enqueue(machine: id, turn.player, atHead: true, at: fx.now.wall))
            fx.queueMoved(from: 0)
            reply(turn.player.address, error: WireError(.machineOffline, "\(machine.name) went offline; you keep the head of its queue."), &fx)
        } else {
            reply(turn.player.address, error: WireError(.machineOffline, "\(machine.name) went offline; your game has ended."), &fx)
        }
    }

    // MARK: Deadlines

    /// Everything whose deadline has passed at `context.now`: the turn's timer
    /// (an offer expires, the play timer drops the claw, the result timer
    /// gives up) and the acks that did not come within `ack_timeout`.
    mutating func expire(_ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        let now = context.now.uptime
        if let turn = phase.turn, turn.deadline <= now {
            switch phase {
            case .offered:
                emit(.expired, &fx) {
                    $0.player = turn.player.accid
                    $0.session = turn.session
                }
                endTurn(.expired, &fx)
            case .playing:
                dropClaw(&fx)
            case .awaitingResult:
                emit(.noResult, &fx) {
                    $0.player = turn.player.accid
                    $0.session = turn.session
                }
                endTurn(.noResult, &fx)
            case .idle:
                break
            }
        }
        while let (serial, pending) = acks.oldest(), pending.sentAt + settings.ackTimeout <= now {
            _ = acks.remove(serial)
            emit(.ackTimeout, &fx) {
                $0.player = pending.player?.accid
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
        }
        return finish((), &fx)
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
            $0.player = turn.player.accid
            $0.session = turn.session
        }
        endTurn(.skipped, &fx)
        return finish(true, &fx)
    }

    /// Takes a player out of the queue, or ends their turn as `skipped`.
    mutating func remove(player: String, _ context: TransitionContext) -> Step<Bool> {
        var fx = Effects(context)
        if let turn = phase.turn, turn.player.accid == player {
            emit(.removed, &fx) {
                $0.player = player
                $0.session = turn.session
            }
            endTurn(.skipped, &fx)
            return finish(true, &fx)
        }
        guard let index = waiting.firstIndex(where: { $0.accid == player }) else { return finish(false, &fx) }
        waiting.remove(at: index)
        fx.writes.append(.dequeue(machine: id, accid: player))
        fx.queueMoved(from: index)
        emit(.removed, &fx) { $0.player = player }
        return finish(true, &fx)
    }

    /// Republishes the snapshot as it is, with its current `seq` (after a
    /// reconnect of the broker): nothing changed, nothing is written.
    func republish(at now: Moment) -> [MachineEffect] {
        [.snapshot(snapshot(at: now))]
    }
}
