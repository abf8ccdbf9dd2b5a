import Protocol

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

/// Players' requests (SPEC §2, §3): joining and leaving the queue, taking or
/// declining a turn, steering the claw.
extension MachineState {
    /// A player's request, decoded; checked here against the machine's
    /// cameras (a reload may change them). A refusal is answered to the player (command 9) and counted as
    /// a `dropped` event.
    /// - Parameter voucher: at a site of a chain, the router's voucher for
    ///   an accept's debit (SPEC §9), passed on to the chain's ledger.
    mutating func handle(
        _ request: PlayerRequest, from player: PlayerAddress, voucher: ChainVoucher? = nil, _ context: TransitionContext
    ) -> Step<RequestOutcome> {
        var fx = Effects(context)
        let outcome: RequestOutcome
        do throws(WireError) {
            try request.validate(cameras: machine.cameraIDs)
            switch request.command {
            case .join(let nick):
                outcome = try join(player, nick: nick, &fx)
            case .leave:
                outcome = try leave(player, &fx)
            case .accept(let session):
                outcome = try accept(player, session: session, voucher: voucher, &fx)
            case .decline(let session):
                outcome = try decline(player, session: session, &fx)
            case .move, .grab, .camera:
                // A control command without a serial is refused while decoding.
                outcome = try control(request.command, serial: request.serial ?? 0, from: player, &fx)
            }
        } catch {
            drop(player, command: request.command.code, serial: request.serial, error, &fx)
            outcome = .rejected(error)
        }
        return finish(outcome, &fx)
    }

    /// Answers a notification refused before it reached the game (a bad
    /// payload for this machine) the way the game refuses requests.
    mutating func refuse(
        _ player: PlayerAddress, command: CommandCode?, serial: Int64?, _ error: WireError, _ context: TransitionContext
    ) -> Step<Void> {
        var fx = Effects(context)
        drop(player, command: command, serial: serial, error, &fx)
        return finish((), &fx)
    }

    private mutating func drop(_ player: PlayerAddress, command: CommandCode?, serial: Int64?, _ error: WireError, _ fx: inout Effects) {
        reply(player, error: error, serial: serial, &fx)
        emit(.dropped, &fx) {
            $0.set(player)
            $0.command = command?.description
            $0.playerSerial = serial
            $0.reason = error.code.rawValue
        }
    }

    // MARK: Queue

    private mutating func join(_ player: PlayerAddress, nick: String?, _ fx: inout Effects) throws(WireError) -> RequestOutcome {
        guard !retiring else { throw Self.removed(machine) }
        if phase.turn?.player.address == player || waiting.contains(where: { $0.address == player }) {
            throw WireError(.alreadyQueued, "You are already in the queue of \(machine.name).")
        }
        guard waiting.count < settings.maxQueue else {
            throw WireError(.queueFull, "The queue of \(machine.name) is full (\(settings.maxQueue) players); try again later.")
        }
        try requireCredits(player, fx)
        try requireStorage(fx)
        let entry = QueueEntry(accid: player.accid, nick: nick ?? player.accid, provider: player.provider)
        waiting.append(entry)
        let position = waiting.count
        fx.writes.append(.enqueue(machine: id, entry, atHead: false, at: fx.now.wall))
        fx.queueMoved(from: position - 1)
        emit(.joined, &fx) {
            $0.set(entry.address)
            $0.nick = entry.nick
            $0.position = position
        }
        offerNextTurn(&fx)
        if case .offered(let turn) = phase, turn.player.address == player {
            return .offered(session: turn.session)
        }
        return .queued(position: position, length: waiting.count)
    }

    private mutating func leave(_ player: PlayerAddress, _ fx: inout Effects) throws(WireError) -> RequestOutcome {
        if let turn = phase.turn, turn.player.address == player {
            try requireStorage(fx)
            emit(.left, &fx) {
                $0.set(player)
                $0.session = turn.session
            }
            switch phase {
            case .offered:
                endTurn(.left, &fx)
            case .playing where !online:
                // The PC is reconnecting and cannot drop the claw: the game ends here.
                endTurn(.left, &fx)
            case .playing:
                // The coin is spent: drop the claw now and let the game end with its result.
                dropClaw(&fx)
            case .awaitingResult, .idle:
                break
            }
            return .left
        }
        guard let index = waiting.firstIndex(where: { $0.address == player }) else {
            throw WireError(.notInQueue, "You are not in the queue of \(machine.name).")
        }
        try requireStorage(fx)
        waiting.remove(at: index)
        fx.writes.append(.dequeue(machine: id, player: player))
        fx.queueMoved(from: index)
        emit(.left, &fx) { $0.set(player) }
        return .left
    }

    // MARK: Turn

    private mutating func accept(_ player: PlayerAddress, session: String, voucher: ChainVoucher?, _ fx: inout Effects) throws(WireError)
        -> RequestOutcome
    {
        try checkTurn(of: player, session: session)
        guard case .offered(let turn) = phase else { return .ignored("the game has already started") }
        guard fx.context.brokerConnected else {
            throw WireError(.gatewayUnavailable, "The gateway cannot reach \(machine.name) right now; accept again in a moment.")
        }
        try requireStorage(fx)
        // What the offer said, whatever a reload made the price since.
        if let price = turn.price, let ledger = fx.context.chainLedger {
            // The chain's ledger debits the game; it starts when the debit is answered.
            return try askDebit(turn, price: price, voucher: voucher, ledger, &fx)
        }
        var paid: Int64?
        if let price = turn.price, let balance = fx.balance(of: player) {
            // Spent meanwhile (another machine's game): no coin, and the turn passes on.
            guard balance >= price else {
                endTurn(.unpaid, &fx)
                throw insufficientCredits(balance: balance, price: price)
            }
            paid = price
        }
        return startGame(paid: paid, &fx)
    }

    /// The accepted turn's game starts: its coin (1001) goes out once the
    /// start (and its debit) is durable.
    mutating func startGame(paid: Int64?, balance: Int64? = nil, _ fx: inout Effects) -> RequestOutcome {
        guard case .offered(var turn) = phase else { return .ignored("the game has already started") }
        let serial = takeSerial()
        let now = fx.now
        let coin = boardSettings.coin(lostInARow: lostInARow)
        fx.list.append(
            .command(
                WireMessage(
                    .addCoins, data: String(settings.coinsPerGame), serial: serial, session: turn.session, player: turn.player.accid,
                    settings: coin),
                camera: false))
        turn.strong = coin.strong
        acks.insert(PendingAck(sentAt: now.uptime, command: .addCoins, session: turn.session), serial: serial)
        turn.startedAt = now.wall
        turn.deadline = now.uptime + settings.playTimeout
        turn.coinSerial = serial
        turn.paid = paid
        turn.debitAskedUntil = nil
        phase = .playing(turn)
        debit(turn, balance: balance, &fx)
        writeOpenGame(&fx)
        fx.snapshotChanged = true
        emit(.accepted, &fx) {
            $0.set(turn.player.address)
            $0.session = turn.session
            $0.serial = serial
        }
        reply(turn.player.address, WireMessage(.queuePosition, data: "0", length: waiting.count), .high, &fx)
        return .accepted(session: turn.session)
    }

    private mutating func decline(_ player: PlayerAddress, session: String, _ fx: inout Effects) throws(WireError) -> RequestOutcome {
        try checkTurn(of: player, session: session)
        guard case .offered = phase else {
            throw WireError(.notYourTurn, "Your game has started and can no longer be declined; leave the machine to end it.")
        }
        try requireStorage(fx)
        emit(.declined, &fx) {
            $0.set(player)
            $0.session = session
        }
        endTurn(.declined, &fx)
        return .declined
    }

    /// Throws the error that says why `player` does not hold the turn `session`.
    private func checkTurn(of player: PlayerAddress, session: String) throws(WireError) {
        guard online else { throw offlineError }
        guard let turn = phase.turn, turn.player.address == player else {
            if waiting.contains(where: { $0.address == player }) {
                throw WireError(.notYourTurn, "It is not your turn yet; wait until you are offered the machine.")
            }
            throw WireError(.notInQueue, "You are not in the queue of \(machine.name); join it first.")
        }
        guard turn.session == session else {
            throw WireError(.sessionMismatch, "Session \"\(session)\" is not the turn you were offered; use the id from command 11.")
        }
    }

    // MARK: Play

    private mutating func control(
        _ command: PlayerCommand, serial playerSerial: Int64, from player: PlayerAddress, _ fx: inout Effects
    ) throws(WireError) -> RequestOutcome {
        try checkControl(command, serial: playerSerial, from: player)
        let now = fx.now.uptime
        guard fx.context.brokerConnected else {
            throw WireError(.gatewayUnavailable, "The gateway cannot reach \(machine.name) right now; your command was dropped.")
        }
        let serial = takeSerial()
        let session = phase.turn?.session ?? ""
        let message: WireMessage
        switch command {
        case .move(let direction):
            message = WireMessage(.move, data: direction.rawValue, serial: serial, session: session, player: player.accid)
        case .camera(let camera):
            message = WireMessage(.camera, data: camera, serial: serial, session: session, player: player.accid)
        default:
            message = WireMessage(.grab, serial: serial, session: session, player: player.accid)
        }
        fx.list.append(.command(message, camera: command.code == .camera))
        let address = modifyTurn { turn in
            turn.serials.insert(playerSerial)
            turn.commands += 1
            return turn.player.address
        }
        acks.insert(PendingAck(sentAt: now, command: command.code, player: address, playerSerial: playerSerial), serial: serial)
        emit(.command, &fx) {
            $0.set(player)
            $0.session = session
            $0.command = command.code.description
            $0.data = message.data
            $0.serial = serial
            $0.playerSerial = playerSerial
        }
        if command == .grab {
            toAwaitingResult(&fx)
            emit(.grab, &fx) {
                $0.set(player)
                $0.session = session
                $0.serial = serial
            }
        }
        return .forwarded(serial: serial)
    }

    /// Throws the error that says why `player` may not send `command` now.
    /// Reads the turn without holding on to it, so that the caller can then
    /// change it in place.
    private func checkControl(_ command: PlayerCommand, serial: Int64, from player: PlayerAddress) throws(WireError) {
        guard online else { throw offlineError }
        guard let turn = phase.turn, turn.player.address == player else {
            let someone = phase.turn != nil ? "Someone else is playing \(machine.name)" : "Nobody is playing \(machine.name) now"
            throw WireError(.notYourTurn, "\(someone); join the queue to get a turn.")
        }
        switch (phase, command) {
        case (.offered, _):
            throw WireError(.notYourTurn, "Accept the turn offered to you before playing.")
        case (.awaitingResult, .move), (.awaitingResult, .grab):
            throw WireError(.notYourTurn, "The claw has dropped; wait for the result.")
        default:
            break
        }
        guard !turn.serials.contains(serial) else {
            throw WireError(.duplicateSerial, "Serial \(serial) was already used in this game; send each command with a new serial.")
        }
    }

    /// The gateway drops the claw itself: the play timer ran out or the player left.
    mutating func dropClaw(_ fx: inout Effects) {
        guard case .playing(let turn) = phase else { return }
        let serial = takeSerial()
        fx.list.append(
            .command(WireMessage(.grab, serial: serial, session: turn.session, player: turn.player.accid), camera: false))
        acks.insert(PendingAck(sentAt: fx.now.uptime, command: .grab), serial: serial)
        modifyTurn { $0.commands += 1 }
        toAwaitingResult(&fx)
        emit(.autoGrab, &fx) {
            $0.set(turn.player.address)
            $0.session = turn.session
            $0.serial = serial
        }
    }

    /// Playing → awaiting the result, with the result timer.
    private mutating func toAwaitingResult(_ fx: inout Effects) {
        guard case .playing(var turn) = phase else { return }
        phase = .idle
        turn.deadline = fx.now.uptime + settings.resultTimeout
        phase = .awaitingResult(turn)
        fx.snapshotChanged = true
        writeOpenGame(&fx)
    }

    private func requireStorage(_ fx: Effects) throws(WireError) {
        guard fx.context.storageWritable else {
            throw WireError(.gatewayUnavailable, "The gateway cannot save queue changes right now; try again in a minute.")
        }
    }

    var offlineError: WireError {
        WireError(.machineOffline, "\(machine.name) is offline; your request was dropped. Try again when it is back.")
    }
}
