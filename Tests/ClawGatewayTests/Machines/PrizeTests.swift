import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// Prizes and stock (SPEC §15) as transitions of the game: a win makes its
/// prize and takes one from the stock in its end's writes; at 0 the machine
/// is out of stock (a state like maintenance); a restock puts it back. The
/// clock is moved by hand.
@Suite struct PrizeTests {
    static let prize = MachinePrize(id: "pikachu-30cm", name: "Pikachu 30 cm", cost: 12, exchange: 8, lowAt: 2)
    static let machine: MachineConfig = {
        var machine = PureGame.machine
        machine.prize = prize
        return machine
    }()

    /// A game on a machine with a prize, its stock set to `stock`.
    static func game(stock: Int64?) -> PureGame {
        var game = PureGame(machine: machine)
        if let stock { #expect(game.state.restock(.set(stock), reason: "delivery", game.context).outcome == .stock(stock)) }
        return game
    }

    /// Alice plays and wins: the step of the result.
    static func win(_ game: inout PureGame, _ player: String = "alice") throws -> Step<Void> {
        let session = try game.play(player)
        game.ackCoin()
        return game.result(true, session: session)
    }

    @Test func aWinMakesItsPrizeAndTakesOneFromTheStockWithTheGamesEnd() throws {
        var game = Self.game(stock: 5)
        let session = try game.play("alice")
        game.ackCoin()
        let won = game.result(true, session: session)

        let prize = try #require(won.prizes.first)
        #expect(won.prizes.count == 1)
        #expect(prize.id == "p-\(session)" && prize.game == session && prize.machine == "m1")
        #expect(prize.player == PlayerAddress(accid: "alice", provider: "app"))
        #expect(prize.prize == "pikachu-30cm" && prize.name == "Pikachu 30 cm" && prize.cost == 12 && prize.exchange == 8)
        #expect(prize.state == .held && !prize.oversold && prize.wonAt == game.now.wall)
        let line = try #require(won.stockLines.first)
        #expect(line == StockEntry(machine: "m1", number: 2, kind: .won, change: -1, stock: 4, reason: nil, game: session, at: game.now.wall))
        // In the same writes as the game's end, after it.
        let kinds = won.writes.map { write -> String in
            switch write {
            case .game(let row) where row.outcome == .won: "end"
            case .stock: "stock"
            case .prize: "prize"
            default: "other"
            }
        }
        #expect(kinds.filter { $0 != "other" } == ["end", "stock", "prize"], "\(kinds)")
        // The player is told (15), high priority: never held back.
        let told = try #require(won.replies.first { $0.message.code == .prizeChanged })
        #expect(told.to.accid == "alice" && told.priority == .high)
        #expect(told.message.encodedString() == #"{"command":15,"data":"p-\#(session)","state":"held","prize":"Pikachu 30 cm"}"#)
        let event = try #require(won.events(.prizeWon).first)
        #expect(event.data == "p-\(session)" && event.reason == "pikachu-30cm" && event.stock == 4 && event.oversold == nil)
        #expect(won.snapshots.last?.stock == 4)
        #expect(game.status == .idle)
    }

    @Test func aLostGameMakesNoPrize() throws {
        var game = Self.game(stock: 5)
        let session = try game.play("alice")
        game.ackCoin()
        let lost = game.result(false, session: session)
        #expect(lost.prizes.isEmpty && lost.stockLines.isEmpty)
        #expect(game.snapshot.stock == 5)
    }

    @Test func aWinTakingTheStockToLowAtRaisesLowStockAndToZeroOutOfStock() throws {
        // low_at is 2 here.
        var game = Self.game(stock: 3)
        let first = try Self.win(&game)
        #expect(first.events(.lowStock).first?.stock == 2, "3 to 2: low")
        let second = try Self.win(&game)
        #expect(!second.eventTypes.contains(.lowStock), "only the win that takes it to low_at raises it")
        let third = try Self.win(&game)
        #expect(third.events(.outOfStock).first?.stock == 0 && !third.eventTypes.contains(.lowStock))
        #expect(third.snapshots.last?.state == .outOfStock)
        #expect(Self.game(stock: 3).state.countedStock == 3)
    }

    /// Out of stock: the game in progress finishes, no turn is offered, the
    /// queue is kept and may be joined and left, whatever time passes; a
    /// restock offers the head of the queue its turn.
    @Test func outOfStockOffersNoTurnKeepsTheQueueAndARestockPutsItBack() throws {
        var game = Self.game(stock: 1)
        let session = try game.play("alice")
        game.ackCoin()
        game.join("bob")
        let won = game.result(true, session: session)
        #expect(won.offer(to: "bob") == nil, "no turn offered out of stock")
        #expect(game.status == .outOfStock)
        let snapshot = try #require(won.snapshots.last)
        #expect(snapshot.state == .outOfStock && snapshot.stock == 0 && snapshot.waiting.map(\.accid) == ["bob"])
        #expect(snapshot.encoded().count > 0 && String(decoding: snapshot.encoded(), as: UTF8.self).contains(#""state":"out_of_stock""#))

        // Joinable and leavable; no turn however long it waits.
        #expect(game.join("carol").outcome == .queued(position: 2, length: 2))
        #expect(game.send("carol", #"{"command":7}"#).outcome == .left)
        #expect(game.advance(by: .seconds(3600)).offer(to: "bob") == nil)
        #expect(game.state.phase.turn == nil)
        // Nor when the PC comes back online afresh.
        #expect(game.presence(.online).offer(to: "bob") == nil)

        // An add back above 0: in play, bob offered his turn.
        let restocked = game.state.restock(.add(10), reason: "delivery 2026-11-25", game.context)
        #expect(restocked.outcome == .stock(10))
        #expect(restocked.offer(to: "bob") != nil)
        let event = try #require(restocked.events(.restocked).first)
        #expect(event.data == "add" && event.change == 10 && event.stock == 10 && event.reason == "delivery 2026-11-25")
        #expect(restocked.stockLines == [
            StockEntry(machine: "m1", number: 3, kind: .add, change: 10, stock: 10, reason: "delivery 2026-11-25", game: nil, at: game.now.wall)
        ])
        #expect(game.status == .offered)
    }

    /// An operator sets the stock to 0 while alice plays: her game plays to
    /// its end, and her win is a prize all the same, oversold; the stock stays 0.
    @Test func aStockSetToZeroDuringAGameLetsItFinishAndItsWinIsOversold() throws {
        var game = Self.game(stock: 4)
        let session = try game.play("alice")
        game.ackCoin()
        game.join("bob")
        let emptied = game.state.restock(.set(0), reason: "claw jammed the last ones", game.context)
        #expect(emptied.outcome == .stock(0))
        #expect(emptied.eventTypes.contains(.outOfStock))
        #expect(!emptied.eventTypes.contains(.lowStock), "an operator's change never raises low_stock")
        #expect(emptied.events(.gameEnded).isEmpty, "the game in progress goes on")
        #expect(game.status == .playing)
        #expect(game.move("alice", serial: 1).rejectedCode == nil, "alice still steers")

        let won = game.result(true, session: session)
        let prize = try #require(won.prizes.first)
        #expect(prize.oversold)
        #expect(won.stockLines.first?.kind == .oversold && won.stockLines.first?.stock == 0 && won.stockLines.first?.change == 0)
        #expect(won.events(.prizeWon).first?.oversold == true)
        #expect(!won.eventTypes.contains(.outOfStock) && !won.eventTypes.contains(.lowStock))
        #expect(game.snapshot.stock == 0 && game.status == .outOfStock)
        #expect(won.offer(to: "bob") == nil)
    }

    /// A machine whose stock was never set: not counted. Its wins make
    /// prizes; no stock, no stock event, always in play.
    @Test func anUncountedStockMakesPrizesAndTakesNothing() throws {
        var game = Self.game(stock: nil)
        let won = try Self.win(&game)
        #expect(won.prizes.count == 1 && won.prizes.first?.oversold == false)
        #expect(won.stockLines.isEmpty)
        #expect(won.events(.prizeWon).first?.stock == nil)
        #expect(game.snapshot.stock == nil && game.status == .idle)
        #expect(game.state.restock(.add(1), reason: "x", game.context).outcome == .notCounted, "set it first")
    }

    /// A machine without a prize: no prize, no stock to keep.
    @Test func aMachineWithoutAPrizeMakesNone() throws {
        var game = PureGame()
        let won = try Self.win(&game)
        #expect(won.prizes.isEmpty && !won.replies.contains { $0.message.code == .prizeChanged })
        let refused = game.state.restock(.set(3), reason: "x", game.context)
        #expect(refused.outcome == .noPrize && refused.writes.isEmpty)
    }

    /// Below 0 or above the most: refused, nothing written, nothing changed.
    @Test func aRestockOutOfRangeChangesNothing() {
        var game = Self.game(stock: 2)
        for change in [StockChange.add(-3), .set(PrizeSettings.maxStock + 1), .add(PrizeSettings.maxStock)] {
            let refused = game.state.restock(change, reason: "x", game.context)
            #expect(refused.outcome == .outOfRange(stock: 2), "\(change)")
            #expect(refused.writes.isEmpty && refused.events.isEmpty)
        }
        #expect(game.snapshot.stock == 2)
        #expect(game.state.restock(.add(-2), reason: "broken", game.context).outcome == .stock(0))
        #expect(game.status == .outOfStock)
    }

    /// Out of stock is shown like maintenance: over the game's own state
    /// once the machine is free, and maintenance first.
    @Test func maintenanceIsShownOverOutOfStock() {
        var game = Self.game(stock: 0)
        #expect(game.status == .outOfStock)
        _ = game.state.maintain(on: true, reason: "glass cleaning", game.context)
        #expect(game.status == .maintenance)
    }

    /// The stock is durable state: it comes back with the machine, and a
    /// machine restored out of stock offers no turn.
    @Test func theStockIsRestoredWithTheMachine() {
        let restored = RestoredMachine(
            queue: [QueueEntry(accid: "bob", nick: "Bob", provider: "app")], snapshotSeq: 7, paused: false,
            stock: StockLevel(stock: 0, changes: 12))
        var game = PureGame(machine: Self.machine, restored: restored)
        #expect(game.status == .outOfStock)
        #expect(game.advance(by: .seconds(5)).offer(to: "bob") == nil)
        let back = game.state.restock(.set(6), reason: "delivery", game.context)
        #expect(back.stockLines.first?.number == 13)
        #expect(back.offer(to: "bob") != nil)
        #expect(game.state.durableImage(at: game.now).stock == StockLevel(stock: 6, changes: 13))
    }

    /// The demo's room list shows an out-of-stock machine as out of play.
    @Test func theRoomListShowsOutOfStockAsOutOfPlay() {
        var machine = Self.machine
        machine.chatroomID = 3001
        let game = Self.game(stock: 0)
        let room = RoomInfo(machine, game.snapshot, onlineUserCount: 0)
        #expect(!room.roomStatus && room.liveStatus == 2)
        let inPlay = RoomInfo(machine, Self.game(stock: 1).snapshot, onlineUserCount: 0)
        #expect(inPlay.roomStatus && inPlay.liveStatus == 1)
    }
}

extension Step {
    var prizes: [PrizeRow] {
        writes.compactMap { if case .prize(let prize) = $0 { prize } else { nil } }
    }

    var stockLines: [StockEntry] {
        writes.compactMap { if case .stock(let entry) = $0 { entry } else { nil } }
    }
}
