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

    /// The turn offer (11): with the price and the player's balance where games cost.
    func offer(_ session: String, to player: PlayerAddress, serial: Int64, timeout: Int, _ fx: Effects) -> WireMessage {
        let balance = price == nil ? nil : fx.balance(of: player)
        return WireMessage(
            .turnOffer, data: session, serial: serial, timeout: timeout, balance: balance, price: balance == nil ? nil : price)
    }

    /// The game's debit, with its start: `turn` has just started.
    mutating func debit(_ turn: Turn, _ fx: inout Effects) {
        guard let paid = turn.paid else { return }
        changeWallet(.debit, -paid, of: turn.player.address, session: turn.session, &fx)
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
    private mutating func changeWallet(
        _ kind: LedgerEntry.Kind, _ credits: Int64, of player: PlayerAddress, session: String, _ fx: inout Effects
    ) {
        fx.writes.append(
            .ledger(LedgerEntry(wallet: player, kind: kind, credits: credits, key: session, reason: nil, digest: nil, at: fx.now.wall)))
        let balance = fx.balance(of: player).map { $0 + credits }
        fx.walletChanges[player, default: 0] += credits
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
