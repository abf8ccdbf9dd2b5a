import Foundation
import Protocol

/// Paying for games (SPEC §11): a join needs the price, an accept pays it
/// with the game's start, a game its player got nothing fair of is paid
/// back with its end. The balances are the wallets' (``WalletBook``), which
/// the transition reads through its context; what it decides is a ledger
/// entry among its writes, which the machine applies to the book and
/// submits with the game's own writes, in one transaction.
extension MachineState {
    /// What a game costs here; nil: free (no `credits:`, or a price of 0).
    var price: Int64? {
        guard let price = machine.price, price > 0 else { return nil }
        return price
    }

    /// Refuses a player who cannot pay for a game here (a join).
    func requireCredits(_ player: PlayerAddress, _ fx: Effects) throws(WireError) {
        guard let price, let balance = fx.balance(of: player), balance < price else { return }
        throw insufficientCredits(balance: balance, price: price)
    }

    func insufficientCredits(balance: Int64, price: Int64) -> WireError {
        WireError(
            .insufficientCredits,
            "A game on \(machine.name) costs \(price) credit\(price == 1 ? "" : "s") and you have \(balance); top up to play.",
            balance: balance, price: price)
    }

    /// The turn offer (11): with the price where games cost (the turn's,
    /// ``Turn/price``), and the player's balance where the site holds it
    /// (not in a chain).
    func offer(_ turn: Turn, serial: Int64, timeout: Int, _ fx: Effects) -> WireMessage {
        let balance = turn.price == nil ? nil : fx.balance(of: turn.player.address)
        return WireMessage(
            .turnOffer, data: turn.session, serial: serial, timeout: timeout, balance: balance, price: turn.price,
            isContinue: turn.isContinue ? true : nil)
    }

    /// The game's debit, with its start: `turn` has just started. At a site
    /// it is written now, with the start; in a chain the chain's ledger has
    /// written it (its answer's `balance`) and it is only told.
    mutating func debit(_ turn: Turn, balance: Int64?, _ fx: inout Effects) {
        guard let paid = turn.paid else { return }
        if fx.context.chainLedger != nil {
            tellWallet(.debit, -paid, balance: balance, of: turn.player.address, session: turn.session, &fx)
        } else {
            changeWallet(.debit, -paid, of: turn.player.address, session: turn.session, &fx)
        }
    }

    // MARK: In a chain

    /// An accept where the chain's ledger debits the game (SPEC §11): the
    /// ask is written (so that a turn that ends without its game asks for
    /// it back, even after a crash) and goes out once durable; the game
    /// starts with the answer (``debitAnswered(_:_:)``), or the accept is
    /// refused `gateway_unavailable` after `chain.wallet_timeout` and the
    /// offer stands. An accept while the ask is out is the same accept.
    ///
    /// The ask carries the router's voucher for this accept (SPEC §9): the
    /// ledger debits nothing without it. An accept that came with none (sent
    /// straight to the site, not through a router) is refused at once.
    mutating func askDebit(_ turn: Turn, price: Int64, voucher: ChainVoucher?, _ ledger: ChainLedgerContext, _ fx: inout Effects)
        throws(WireError) -> RequestOutcome
    {
        guard turn.debitAskedUntil == nil else { return .ignored("the game's debit is asked of the chain's ledger") }
        guard ledger.reachable else {
            throw WireError(.gatewayUnavailable, "The arcade cannot reach the chain's wallets right now; accept again in a moment.")
        }
        guard let voucher else {
            throw WireError(
                .gatewayUnavailable,
                "A paid game in a chain is accepted through the chain's routers; accept again through the IM app.")
        }
        let ask = ChainWalletAsk(
            kind: .debit, session: turn.session, provider: turn.player.provider, account: turn.player.accid, credits: price,
            machine: id, voucher: voucher)
        // Asked again for one session (an accept after a timeout): the ledger debits it once.
        if turn.paid == nil { fx.writes.append(.chainWallet(ask)) }
        modifyTurn { turn in
            turn.paid = price
            turn.debitAskedUntil = fx.now.uptime + ledger.timeout
        }
        fx.list.append(.askDebit(ask))
        return .ignored("the game's debit is asked of the chain's ledger")
    }

    /// The chain's ledger answered a debit. The turn still offered with its
    /// ask out starts its game, or passes on when the balance was short. An
    /// answer that comes late (the accept given up on, the turn over) does
    /// nothing here: a turn that ends unstarted asks for its debit back.
    mutating func debitAnswered(_ answer: ChainWalletAnswer, _ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        guard case .offered(let turn) = phase, turn.session == answer.session, turn.debitAskedUntil != nil, let price = turn.paid
        else { return finish((), &fx) }
        modifyTurn { $0.debitAskedUntil = nil }
        switch answer.result {
        case .debited where online && context.brokerConnected:
            _ = startGame(paid: price, balance: answer.balance, &fx)
        case .debited:
            // Debited, but the coin cannot go out now: accept again (the
            // ledger debits once), or the turn's end pays it back.
            reply(
                turn.player.address,
                error: WireError(.gatewayUnavailable, "\(machine.name) cannot be reached right now; accept again in a moment.", endsTurn: true),
                &fx)
        case .insufficient:
            // Nothing was debited: nothing to ask back.
            modifyTurn { $0.paid = nil }
            endTurn(.unpaid, &fx)
            reply(turn.player.address, error: insufficientCredits(balance: answer.balance ?? 0, price: price), &fx)
        case .refused, .refunded, .nothingToRefund:
            endTurn(.unpaid, reason: "debit_refused", &fx)
            reply(
                turn.player.address,
                error: WireError(.gatewayUnavailable, "The chain's wallets refused this game; join again to play.", endsTurn: true), &fx)
        }
        return finish((), &fx)
    }

    /// The ask of the offered turn went unanswered for `chain.wallet_timeout`:
    /// the accept is refused, the offer stands until its own timer.
    mutating func debitUnanswered(_ fx: inout Effects) {
        guard case .offered(let turn) = phase, let until = turn.debitAskedUntil, until <= fx.now.uptime else { return }
        modifyTurn { $0.debitAskedUntil = nil }
        notice(
            turn.player.address,
            WireError(.gatewayUnavailable, "The chain's wallets did not answer in time; accept again while the offer stands."), &fx)
    }

    /// Pays a game back with its end when its player got no fair game: an
    /// outcome that says so, or a coin the PC never acknowledged, whatever
    /// the outcome (the machine may never have started it). Once: a game ends once.
    mutating func refundIfOwed(paid: Int64?, outcome: GameOutcome, coinAcked: Bool, of player: PlayerAddress, session: String, _ fx: inout Effects) {
        guard let paid, outcome.isRefunded || !coinAcked else { return }
        changeWallet(.refund, paid, of: player, session: session, &fx)
    }

    /// One entry a game causes: written with the game's writes, told to its
    /// player (14) once durable, and an event of the machine. A refund of a
    /// game paid for before `credits:` was taken out of the file is still
    /// written, untold: the ledger is the money, whatever the file says now.
    ///
    /// In a chain a refund is written to the site's outbox instead, with the
    /// game's end, and sent to the chain's ledger until it answers; the
    /// player is told the balance then.
    private mutating func changeWallet(
        _ kind: LedgerEntry.Kind, _ credits: Int64, of player: PlayerAddress, session: String, _ fx: inout Effects
    ) {
        if fx.context.chainLedger != nil {
            fx.writes.append(.refund(credits, to: player, session: session, machine: id, inChain: true, at: fx.now.wall))
            tellWallet(kind, credits, balance: nil, of: player, session: session, &fx)
            return
        }
        fx.writes.append(
            .ledger(LedgerEntry(wallet: player, kind: kind, credits: credits, key: session, reason: nil, digest: nil, at: fx.now.wall)))
        let balance = fx.balance(of: player).map { $0 + credits }
        fx.walletChanges[player, default: 0] += credits
        tellWallet(kind, credits, balance: balance, of: player, session: session, &fx)
    }

    /// Tells a change of a game to its player (14) when the balance after
    /// it is known, and makes it an event of the machine.
    private mutating func tellWallet(
        _ kind: LedgerEntry.Kind, _ credits: Int64, balance: Int64?, of player: PlayerAddress, session: String, _ fx: inout Effects
    ) {
        if let balance {
            reply(
                player, WireMessage(.creditsChanged, data: String(balance), session: session, change: credits, reason: kind.rawValue),
                .high, &fx)
        }
        emit(.credits, &fx) {
            $0.set(player)
            $0.session = session
            $0.data = kind.rawValue
            $0.change = credits
            $0.balance = balance
        }
    }
}

extension StoreChange {
    /// A game's refund as it is written with the game's end: an entry of
    /// the site's ledger, or in a chain an ask in the site's outbox, sent to
    /// the chain's ledger until it answers (SPEC §11).
    static func refund(_ credits: Int64, to player: PlayerAddress, session: String, machine: String, inChain: Bool, at: Date) -> StoreChange {
        guard inChain else {
            return .ledger(LedgerEntry(wallet: player, kind: .refund, credits: credits, key: session, reason: nil, digest: nil, at: at))
        }
        return .chainWallet(
            ChainWalletAsk(kind: .refund, session: session, provider: player.provider, account: player.accid, credits: credits, machine: machine))
    }
}
