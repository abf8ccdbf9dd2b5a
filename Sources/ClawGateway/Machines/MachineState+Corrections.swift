import Foundation
import Protocol

/// An operator's correction of an ended game's result (SPEC §16), as the
/// machine makes it: the record's correction, the prize a win makes or a
/// win taken back voids, the stock with it, the clips held, the player told.
/// A transition of the machine, so that a correction and a win or a restock
/// never cross over the stock.
struct ResultCorrection: Sendable {
    /// The game as the file holds it, with any correction before this one.
    var game: GameRecord
    var correction: GameCorrection
    /// The game's prize as the prize desk sees it (its decisions not yet on disk included); nil: none made.
    var prize: PrizeRow?
}

extension MachineState {
    /// What became of a correction.
    enum Corrected: Sendable, Equatable {
        /// Written with its prize (made, held again or voided), if any.
        case corrected(prize: PrizeRow?)
        /// The win's prize has left (shipped, exchanged): the win cannot be taken back.
        case prizeGone(PrizeState)
    }

    mutating func correct(_ change: ResultCorrection, _ context: TransitionContext) -> Step<Corrected> {
        var fx = Effects(context)
        let game = change.game
        let player = PlayerAddress(accid: game.player, provider: game.provider)
        let wasWon = game.countedOutcome == .won
        let nowWon = change.correction.outcome == .won
        let reason = change.correction.reason
        var prize = change.prize
        if wasWon, !nowWon, var taken = prize {
            // A win taken back voids its prize while it is still the player's to choose for.
            switch taken.state {
            case .held:
                fx.writes.append(.prizes([taken.id], .voided, parcel: nil, at: fx.now.wall))
                // An oversold prize took none from the stock: none goes back.
                if stock != nil, !taken.oversold, machine.prize != nil {
                    logStock(.corrected, change: 1, reason: reason, game: game.id, &fx)
                }
                taken.state = .voided
                reply(player, Self.prizeChanged(taken, state: .voided), .high, &fx)
                prize = taken
            case .voided:
                break
            case .toShip, .shipped, .delivered, .exchanged:
                return finish(.prizeGone(taken.state), &fx)
            }
        } else if !wasWon, nowWon {
            if var voided = prize, voided.state == .voided {
                fx.writes.append(.prizes([voided.id], .held, parcel: nil, at: fx.now.wall))
                if let level = stock, level.stock > 0, !voided.oversold, machine.prize != nil {
                    logStock(.corrected, change: -1, reason: reason, game: game.id, &fx)
                }
                voided.state = .held
                reply(player, Self.prizeChanged(voided, state: .held), .high, &fx)
                prize = voided
            } else if prize == nil {
                makePrize(game: game.id, player: player, correction: reason, &fx)
            }
        }
        fx.writes.append(.correction(game: game.id, change.correction))
        fx.writes.append(.holdClips(machine: id, game: game.id, reason: "result corrected: \(reason)"))
        // The player hears the result as it now stands (4, `corrected: true`).
        reply(player, WireMessage(.result, data: nowWon ? "true" : "false", session: game.id, corrected: true), .high, &fx)
        emit(.resultCorrected, &fx) {
            $0.set(player)
            $0.session = game.id
            $0.outcome = change.correction.outcome
            $0.reason = reason
        }
        return finish(.corrected(prize: prize), &fx)
    }
}
