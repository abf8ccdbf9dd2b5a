import Foundation
import Protocol

/// Prizes and stock (SPEC §15): a won game makes its prize and takes one
/// from the machine's stock in the transaction of its end; an operator's
/// restock is a transition of the same value, so a restock and a win never
/// cross. At 0 the machine is out of stock, a state like maintenance: the
/// game in progress finishes, no turn is offered, the queue is kept and may
/// be joined; a restock puts it back in play.
extension MachineState {
    /// The stock the snapshot and the read API show: the counted stock of a
    /// machine that has a prize; nil when it has none or was never set.
    var countedStock: Int64? {
        machine.prize == nil ? nil : stock?.stock
    }

    /// The machine has a prize, its stock is counted, and none is left.
    var outOfStock: Bool {
        countedStock == 0
    }

    /// The prize of the won game `turn`, with its end: the prize written
    /// `held` for its player, one taken from the stock when it is counted
    /// (none at 0: the prize is made all the same, oversold), the player
    /// told (15), and the stock's events.
    mutating func makePrize(_ turn: Turn, _ fx: inout Effects) {
        makePrize(game: turn.session, player: turn.player.address, &fx)
    }

    /// The prize of the won game `game` of `player`: at its end, or when an
    /// operator's correction makes the win (SPEC §16: `correction` their
    /// reason, the stock line a `corrected` one).
    mutating func makePrize(game: String, player: PlayerAddress, correction: String? = nil, _ fx: inout Effects) {
        guard let kind = machine.prize else { return }
        let id = PrizeRow.id(ofGame: game)
        var oversold = false
        if let level = stock {
            oversold = level.stock == 0
            let line: StockEntry.Kind = correction != nil ? .corrected : oversold ? .oversold : .won
            logStock(line, change: oversold ? 0 : -1, reason: correction, game: game, &fx)
        }
        let prize = PrizeRow(
            id: id, game: game, machine: self.id, player: player, prize: kind.id, name: kind.name, cost: kind.cost,
            exchange: kind.exchange, wonAt: fx.now.wall, oversold: oversold)
        fx.writes.append(.prize(prize))
        let left = stock?.stock
        emit(.prizeWon, &fx) {
            $0.set(player)
            $0.session = game
            $0.data = id
            $0.reason = kind.id
            $0.stock = left
            $0.oversold = oversold ? true : nil
        }
        reply(player, Self.prizeChanged(prize, state: .held), .high, &fx)
        guard let left, !oversold else { return }
        if left == kind.lowAt { emit(.lowStock, &fx) { $0.stock = left } }
        if left == 0 { emit(.outOfStock, &fx) { $0.stock = 0 } }
    }

    /// Command 15: a prize of the player's changed (SPEC §15).
    static func prizeChanged(_ prize: PrizeRow, state: PrizeState, tracking: String? = nil) -> WireMessage {
        WireMessage(.prizeChanged, data: prize.id, state: state.rawValue, prize: prize.name, tracking: tracking)
    }

    /// What became of an operator's restock.
    enum Restock: Sendable, Equatable {
        /// The stock is now this.
        case stock(Int64)
        /// The machine has no prize: there is no stock to keep.
        case noPrize
        /// An `add` to a stock never set: set it first.
        case notCounted
        /// It would take the stock below 0, or above ``PrizeSettings/maxStock``: nothing changed.
        case outOfRange(stock: Int64?)
    }

    /// An operator sets the machine's stock or adds to it (negative: takes
    /// away), with their reason: a line of the stock log. Back above 0, the
    /// machine is in play again and the head of the queue is offered the
    /// turn; down to 0, it is out of stock once its game in progress ends.
    /// An operator's change never raises `low_stock`.
    mutating func restock(_ change: StockChange, reason: String, _ context: TransitionContext) -> Step<Restock> {
        var fx = Effects(context)
        guard machine.prize != nil else { return finish(.noPrize, &fx) }
        let before = stock?.stock
        let after: Int64
        switch change {
        case .set(let value):
            after = value
        case .add(let value):
            guard let before else { return finish(.notCounted, &fx) }
            after = before + value
        }
        guard (0...PrizeSettings.maxStock).contains(after) else { return finish(.outOfRange(stock: before), &fx) }
        let kind: StockEntry.Kind
        switch change {
        case .set: kind = .set
        case .add: kind = .add
        }
        logStock(kind, change: after - (before ?? 0), setTo: after, reason: reason, game: nil, &fx)
        emit(.restocked, &fx) {
            $0.data = kind.rawValue
            $0.change = after - (before ?? 0)
            $0.stock = after
            $0.reason = reason
        }
        if after == 0, before != 0 { emit(.outOfStock, &fx) { $0.stock = 0 } }
        return finish(.stock(after), &fx)
    }

    /// Appends a line to the stock log and moves the stock by `change` (or
    /// to `setTo`): written in this transition, shown in the snapshot.
    mutating func logStock(
        _ kind: StockEntry.Kind, change: Int64, setTo: Int64? = nil, reason: String?, game: String?, _ fx: inout Effects
    ) {
        let number = (stock?.changes ?? 0) + 1
        let after = setTo ?? ((stock?.stock ?? 0) + change)
        stock = StockLevel(stock: after, changes: number)
        fx.writes.append(
            .stock(StockEntry(machine: id, number: number, kind: kind, change: change, stock: after, reason: reason, game: game, at: fx.now.wall)))
        fx.snapshotChanged = true
    }
}
