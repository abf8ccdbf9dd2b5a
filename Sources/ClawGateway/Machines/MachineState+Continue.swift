import Protocol

/// Continue (SPEC §3): the player whose game just ended `won` or `lost` is
/// offered the machine again first, for `game.continue`, before the head of
/// the queue (and when nobody waits), at most `game.max_continues` times in
/// a row, and only when their wallet can pay and the machine would offer a
/// turn at all. The offer is a turn like any other (11, a new session; the
/// accept starts the paid game, a decline, no answer or leaving passes the
/// turn to the queue), with `"continue":true`; the waiting players keep
/// their places: the continuing player never joins the queue.
extension MachineState {
    /// Offers the player who may continue (``mayContinue``) the machine
    /// again, or lets the chance go; run by every transition's settling,
    /// before the queue's head is offered.
    mutating func offerContinue(_ fx: inout Effects) {
        guard let candidate = mayContinue else { return }
        mayContinue = nil
        guard case .idle = phase, offersTurns, settings.continueTimeout > .zero, candidate.continues < settings.maxContinues else { return }
        // At a site the balance is known: a player who cannot pay is not offered.
        // In a chain it is the chain's, and the accept's debit decides.
        if let price, let balance = fx.balance(of: candidate.player.address), balance < price { return }
        let session = newSession()
        let deadline = fx.now.uptime + settings.continueTimeout
        var turn = Turn(player: candidate.player, session: session, deadline: deadline, offeredAt: fx.now.wall)
        turn.price = price
        turn.continues = candidate.continues + 1
        phase = .offered(turn)
        writeOpenGame(&fx)
        fx.snapshotChanged = true
        emit(.offered, &fx) {
            $0.set(candidate.player.address)
            $0.nick = candidate.player.nick
            $0.session = session
            $0.data = "continue"
        }
        let timeout = Int(settings.continueTimeout.seconds.rounded(.up))
        reply(candidate.player.address, offer(turn, serial: takeSerial(), timeout: timeout, fx), .high, &fx, expires: deadline)
    }

    /// How long the offered turn had to be accepted: the continue timer for
    /// a continue, the accept timer otherwise.
    func acceptWindow(_ turn: Turn) -> Duration {
        turn.isContinue ? settings.continueTimeout : settings.acceptTimeout
    }
}
