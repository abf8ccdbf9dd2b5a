import Foundation
import Logging
import Protocol

/// What one transition changed, settled when it ends (see ``Machine/transition(_:)``).
struct Change {
    /// Written to storage in one transaction.
    var store: [StoreChange] = []
    /// The snapshot must be republished with a new `seq`.
    var snapshotChanged = false
    /// The waiting list when the transition began, to tell players whose position moved.
    let waitingBefore: [String]
}

extension Machine {
    /// Runs `body` under the lock, then settles: offers the next turn if the
    /// machine is free, tells waiting players whose position moved, writes the
    /// changes, republishes the snapshot and re-arms the turn timer.
    func transition<R: Sendable>(_ body: (inout MachineState, inout Change) -> R) -> R {
        state.withLock { state in
            var change = Change(waitingBefore: state.waiting.map(\.accid))
            let result = body(&state, &change)
            settle(&state, &change)
            return result
        }
    }

    private func settle(_ state: inout MachineState, _ change: inout Change) {
        offerNextTurn(&state, &change)
        if state.waiting.count != change.waitingBefore.count
            || !zip(state.waiting, change.waitingBefore).allSatisfy({ $0.accid == $1 })
        {
            change.snapshotChanged = true
            tellPositions(&state, before: change.waitingBefore)
        }
        if change.snapshotChanged {
            state.snapshotSeq += 1
            change.store.append(.meta(snapshotSeq: state.snapshotSeq, paused: state.paused))
        }
        do {
            try environment.store.apply(machine: id, change.store)
        } catch {
            logger.error("Storage write failed", metadata: ["error": .string(error.description)])
        }
        if change.snapshotChanged { publishSnapshot(state) }
        armTurnTimer(&state)
    }

    // MARK: Queue

    func join(
        _ player: String, nick: String?, provider: String, _ state: inout MachineState, _ change: inout Change
    ) throws(WireError) -> RequestOutcome {
        if state.turn?.player.accid == player || state.isWaiting(player) {
            throw WireError(.alreadyQueued, "You are already in the queue of \(config.name).")
        }
        guard state.waiting.count < settings.maxQueue else {
            throw WireError(.queueFull, "The queue of \(config.name) is full (\(settings.maxQueue) players); try again later.")
        }
        let entry = QueueEntry(accid: player, nick: nick ?? player, provider: provider)
        state.waiting.append(entry)
        change.store.append(.enqueue(entry, atHead: false, at: environment.clock.wallNow()))
        let position = state.waiting.count
        emit(.joined, &state) {
            $0.player = player
            $0.nick = entry.nick
            $0.position = position
        }
        offerNextTurn(&state, &change)
        if let turn = state.turn, turn.player.accid == player, turn.phase == .offered {
            return .offered(session: turn.session)
        }
        return .queued(position: position, length: state.waiting.count)
    }

    func leave(_ player: String, _ state: inout MachineState, _ change: inout Change) throws(WireError) -> RequestOutcome {
        if let turn = state.turn, turn.player.accid == player {
            emit(.left, &state) {
                $0.player = player
                $0.session = turn.session
            }
            switch turn.phase {
            case .offered:
                endTurn(.left, &state, &change)
            case .playing:
                // The coin is spent: drop the claw now and let the game end with its result.
                dropClaw(&state, &change)
            case .awaitingResult:
                break
            }
            return .left
        }
        guard let index = state.waiting.firstIndex(where: { $0.accid == player }) else {
            throw WireError(.notInQueue, "You are not in the queue of \(config.name).")
        }
        state.waiting.remove(at: index)
        change.store.append(.dequeue(accid: player))
        emit(.left, &state) { $0.player = player }
        return .left
    }

    // MARK: Turn

    /// Offers the head of the queue the turn when the machine is free.
    func offerNextTurn(_ state: inout MachineState, _ change: inout Change) {
        guard state.turn == nil, state.online, !state.paused, !state.stopped, !state.waiting.isEmpty else { return }
        let entry = state.waiting.removeFirst()
        let session = environment.newSessionID()
        let now = environment.clock.now()
        state.turn = Turn(
            player: entry, session: session, phase: .offered, deadline: now + settings.acceptTimeout,
            bucket: TokenBucket(perSecond: settings.maxCommandsPerSecond, now: now))
        change.store.append(.openGame(id: session, entry, offeredAt: environment.clock.wallNow()))
        change.snapshotChanged = true
        emit(.offered, &state) {
            $0.player = entry.accid
            $0.nick = entry.nick
            $0.session = session
        }
        let timeout = Int(settings.acceptTimeout.seconds.rounded(.up))
        reply(entry.accid, WireMessage(.turnOffer, data: session, serial: state.takeSerial(), timeout: timeout))
    }

    func accept(
        _ player: String, session: String, _ state: inout MachineState, _ change: inout Change
    ) throws(WireError) -> RequestOutcome {
        var turn = try offeredTurn(of: player, session: session, state)
        guard turn.phase == .offered else { return .ignored("the game has already started") }
        let serial = state.takeSerial()
        let coins = WireMessage(
            .addCoins, data: String(settings.coinsPerGame), serial: serial, session: session, player: player)
        guard publishToMachine(coins, on: topics.control) else {
            throw WireError(.gatewayUnavailable, "The gateway cannot reach \(config.name) right now; accept again in a moment.")
        }
        let now = environment.clock.now()
        state.acks.insert(PendingAck(sentAt: now, command: .addCoins, player: player, playerSerial: nil), serial: serial)
        turn.phase = .playing
        turn.deadline = now + settings.playTimeout
        state.turn = turn
        change.store.append(.startGame(id: session, at: environment.clock.wallNow()))
        change.snapshotChanged = true
        emit(.accepted, &state) {
            $0.player = player
            $0.session = session
            $0.serial = serial
        }
        watchAcks(&state)
        reply(player, WireMessage(.queuePosition, data: "0", length: state.waiting.count))
        return .accepted(session: session)
    }

    func decline(
        _ player: String, session: String, _ state: inout MachineState, _ change: inout Change
    ) throws(WireError) -> RequestOutcome {
        let turn = try offeredTurn(of: player, session: session, state)
        guard turn.phase == .offered else {
            throw WireError(.notYourTurn, "Your game has started and can no longer be declined; leave (7) to end it.")
        }
        emit(.declined, &state) {
            $0.player = player
            $0.session = session
        }
        endTurn(.declined, &state, &change)
        return .declined
    }

    /// The turn `player` holds under `session`, or the error that says why not.
    private func offeredTurn(of player: String, session: String, _ state: MachineState) throws(WireError) -> Turn {
        guard state.online else { throw offline }
        guard let turn = state.turn, turn.player.accid == player else {
            if state.isWaiting(player) {
                throw WireError(.notYourTurn, "It is not your turn yet; wait for a turn offer (11).")
            }
            throw WireError(.notInQueue, "You are not in the queue of \(config.name); join it (6) first.")
        }
        guard turn.session == session else {
            throw WireError(.sessionMismatch, "Session \"\(session)\" is not the turn you were offered; use the id from command 11.")
        }
        return turn
    }

    /// Closes the game record with `outcome`; the machine is free again.
    func endTurn(_ outcome: GameOutcome, _ state: inout MachineState, _ change: inout Change) {
        guard let turn = state.turn else { return }
        change.store.append(.closeGame(id: turn.session, outcome, at: environment.clock.wallNow(), commands: turn.commands))
        change.snapshotChanged = true
        state.turn = nil
        emit(.gameEnded, &state) {
            $0.player = turn.player.accid
            $0.nick = turn.player.nick
            $0.session = turn.session
            $0.outcome = outcome
            $0.commands = turn.commands
        }
        logger.info(
            "Game ended",
            metadata: [
                "player.accid": .string(turn.player.accid), "game.session": .string(turn.session),
                "game.outcome": .string(outcome.rawValue), "game.commands": .stringConvertible(turn.commands),
            ])
    }

    // MARK: Play

    func control(
        _ command: PlayerCommand, serial playerSerial: Int64, from player: String, _ state: inout MachineState,
        _ change: inout Change
    ) throws(WireError) -> RequestOutcome {
        guard state.online else { throw offline }
        guard var turn = state.turn, turn.player.accid == player else {
            throw WireError(.notYourTurn, "Someone else is playing \(config.name); join the queue (6) to get a turn.")
        }
        switch (turn.phase, command) {
        case (.offered, _):
            throw WireError(.notYourTurn, "Accept the turn (12 with the session id) before playing.")
        case (.awaitingResult, .move), (.awaitingResult, .grab):
            throw WireError(.notYourTurn, "The claw has dropped; wait for the result.")
        default:
            break
        }
        guard !turn.seenSerials.contains(playerSerial) else {
            throw WireError(.duplicateSerial, "Serial \(playerSerial) was already used in this game; send each command with a new serial.")
        }
        let now = environment.clock.now()
        let allowed = turn.bucket.take(now: now)
        state.turn = turn
        guard allowed else {
            throw WireError(.rateLimited, "At most \(settings.maxCommandsPerSecond) commands a second; slow down.")
        }
        let serial = state.takeSerial()
        let message: WireMessage
        let topic: String
        switch command {
        case .move(let direction):
            message = WireMessage(.move, data: direction.rawValue, serial: serial, session: turn.session, player: player)
            topic = topics.control
        case .camera(let camera):
            message = WireMessage(.camera, data: camera, serial: serial, session: turn.session, player: player)
            topic = topics.camera
        default:
            message = WireMessage(.grab, serial: serial, session: turn.session, player: player)
            topic = topics.control
        }
        guard publishToMachine(message, on: topic) else {
            throw WireError(.gatewayUnavailable, "The gateway cannot reach \(config.name) right now; your command was dropped.")
        }
        turn.seenSerials.insert(playerSerial)
        turn.commands += 1
        state.acks.insert(
            PendingAck(sentAt: now, command: command.code, player: player, playerSerial: playerSerial), serial: serial)
        emit(.command, &state) {
            $0.player = player
            $0.session = turn.session
            $0.command = command.code.description
            $0.data = message.data
            $0.serial = serial
            $0.playerSerial = playerSerial
        }
        if command == .grab {
            turn.phase = .awaitingResult
            turn.deadline = now + settings.resultTimeout
            change.snapshotChanged = true
            emit(.grab, &state) {
                $0.player = player
                $0.session = turn.session
                $0.serial = serial
            }
        }
        state.turn = turn
        watchAcks(&state)
        return .forwarded(serial: serial)
    }

    /// The gateway drops the claw itself: the play timer ran out or the player left.
    func dropClaw(_ state: inout MachineState, _ change: inout Change) {
        guard var turn = state.turn, turn.phase == .playing else { return }
        let serial = state.takeSerial()
        let now = environment.clock.now()
        let grab = WireMessage(.grab, serial: serial, session: turn.session, player: turn.player.accid)
        if publishToMachine(grab, on: topics.control) {
            turn.commands += 1
            state.acks.insert(PendingAck(sentAt: now, command: .grab, player: turn.player.accid, playerSerial: nil), serial: serial)
            watchAcks(&state)
        }
        turn.phase = .awaitingResult
        turn.deadline = now + settings.resultTimeout
        state.turn = turn
        change.snapshotChanged = true
        emit(.autoGrab, &state) {
            $0.player = turn.player.accid
            $0.session = turn.session
            $0.serial = serial
        }
    }

    func finishWithResult(won: Bool, data: String, _ state: inout MachineState, _ change: inout Change) {
        guard let turn = state.turn, turn.phase != .offered else {
            emit(.result, &state) { $0.data = data }
            logger.notice("Result with no game in progress", metadata: ["game.result": .string(data)])
            return
        }
        reply(turn.player.accid, WireMessage(.result, data: data))
        emit(.result, &state) {
            $0.player = turn.player.accid
            $0.session = turn.session
            $0.data = data
        }
        endTurn(won ? .won : .lost, &state, &change)
    }

    /// The turn timer of `generation` ran out.
    func turnTimerFired(generation: Int) {
        transition { state, change in
            guard let timer = state.timer, timer.generation == generation, let turn = state.turn else { return }
            state.timer = nil
            switch turn.phase {
            case .offered:
                emit(.expired, &state) {
                    $0.player = turn.player.accid
                    $0.session = turn.session
                }
                endTurn(.expired, &state, &change)
            case .playing:
                dropClaw(&state, &change)
            case .awaitingResult:
                emit(.noResult, &state) {
                    $0.player = turn.player.accid
                    $0.session = turn.session
                }
                endTurn(.noResult, &state, &change)
            }
        }
    }

    // MARK: Presence

    func goOnline(_ state: inout MachineState, _ change: inout Change) {
        guard !state.online else { return }
        state.online = true
        change.snapshotChanged = true
        emit(.online, &state)
        logger.info("Machine online")
    }

    /// The PC is gone: its game ends, pending acks will never come; the queue
    /// stays, and an offered player keeps the head of it.
    func goOffline(_ state: inout MachineState, _ change: inout Change) {
        guard state.online else { return }
        state.online = false
        change.snapshotChanged = true
        state.acks.removeAll()
        emit(.offline, &state)
        logger.warning("Machine offline")
        guard let turn = state.turn else { return }
        endTurn(.machineOffline, &state, &change)
        if turn.phase == .offered {
            state.waiting.insert(turn.player, at: 0)
            change.store.append(.enqueue(turn.player, atHead: true, at: environment.clock.wallNow()))
            reply(turn.player.accid, error: WireError(.machineOffline, "\(config.name) went offline; you keep the head of its queue."))
        } else {
            reply(turn.player.accid, error: WireError(.machineOffline, "\(config.name) went offline; your game has ended."))
        }
    }

    // MARK: Acks

    /// Matches the PC's ack to the command it acknowledges.
    func settleAck(serial: Int64, data: String?, _ state: inout MachineState) {
        guard let pending = state.acks.remove(serial) else {
            logger.debug("Ack for no pending serial", metadata: ["mqtt.serial": .stringConvertible(serial)])
            return
        }
        let latency = environment.clock.now() - pending.sentAt
        emit(.ack, &state) {
            $0.player = pending.player
            $0.command = pending.command.description
            $0.data = data
            $0.serial = serial
            $0.playerSerial = pending.playerSerial
            $0.latencyMs = (latency.seconds * 1_000_000).rounded() / 1000
        }
        if settings.relayAcks, let player = pending.player, let playerSerial = pending.playerSerial {
            reply(player, WireMessage(.ack, data: data, serial: playerSerial))
        }
    }

    private var offline: WireError {
        WireError(.machineOffline, "\(config.name) is offline; your request was dropped. Try again when it is back.")
    }
}
