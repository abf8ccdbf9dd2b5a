import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// Continue (SPEC §3) as transitions of the game, with the clock moved by
/// hand: the player whose game ended `won` or `lost` is offered the machine
/// again first, for `game.continue` (here 5 s), at most `max_continues` in
/// a row (here 2).
@Suite struct ContinueTests {
    static func settings(continue seconds: Int = 5, max: Int = 2) -> GameSettings {
        var settings = GameSettings()
        settings.continueTimeout = .seconds(seconds)
        settings.maxContinues = max
        return settings
    }

    /// Alice plays and her game ends with `won`; bob waits.
    static func afterAGame(_ settings: GameSettings = settings(), won: Bool = true) throws -> (PureGame, Step<Void>) {
        var game = PureGame(settings: settings)
        try game.play("alice")
        game.join("bob")
        game.ackCoin()
        game.send("alice", #"{"command":2,"serial":1}"#)
        let ended = game.result(won)
        return (game, ended)
    }

    @Test func aWonOrLostGameIsOfferedAgainFirstAndTheQueueKeepsItsPlaces() throws {
        for won in [true, false] {
            let (game, ended) = try Self.afterAGame(won: won)
            let offer = try #require(ended.offer(to: "alice"), "won \(won)")
            #expect(offer.encodedString().contains(#""timeout":5"#) && offer.encodedString().contains(#""continue":true"#))
            #expect(offer.data == game.snapshot.player?.session && offer.data != ended.games.first { $0.outcome != nil }?.id, "a new session")
            #expect(ended.offer(to: "bob") == nil, "bob is not offered")
            #expect(ended.replies(to: "bob").isEmpty, "his place did not move")
            #expect(game.snapshot.player?.isContinue == true && game.snapshot.waiting.map(\.accid) == ["bob"])
            #expect(String(decoding: game.snapshot.encoded(), as: UTF8.self).contains(#""continue":true"#))
            #expect(ended.events(.offered).first?.data == "continue")
        }
    }

    @Test func acceptingAContinueStartsAGameAndTheRowIsLimited() throws {
        var (game, _) = try Self.afterAGame()
        for round in 1...2 {
            let session = try #require(game.snapshot.player?.session)
            #expect(game.send("alice", #"{"command":12,"data":"\#(session)"}"#).outcome == .accepted(session: session), "round \(round)")
            #expect(game.state.phase.turn?.continues == round)
            game.ackCoin()
            game.send("alice", #"{"command":2,"serial":\#(round + 1)}"#)
            let ended = game.result(false)
            if round < 2 {
                #expect(ended.offer(to: "alice")?.isContinue == true)
            } else {
                // Two continues in a row (max_continues 2): three games, then the queue.
                #expect(ended.offer(to: "alice") == nil)
                #expect(ended.offer(to: "bob") != nil && ended.offer(to: "bob")?.isContinue == nil)
            }
        }
    }

    @Test func declineSilenceOrLeavingPassTheTurnToTheQueue() throws {
        var (declined, _) = try Self.afterAGame()
        let session = try #require(declined.snapshot.player?.session)
        let decline = declined.send("alice", #"{"command":13,"data":"\#(session)"}"#)
        #expect(decline.offer(to: "bob") != nil && decline.offer(to: "alice") == nil)
        #expect(decline.games.first { $0.outcome != nil }?.outcome == .declined)

        var (silent, _) = try Self.afterAGame()
        #expect(silent.advance(by: .seconds(4)).offer(to: "bob") == nil, "the continue has 5 s, not the accept's 10")
        let expired = silent.advance(by: .seconds(1))
        #expect(expired.offer(to: "bob") != nil)
        let told = try #require(expired.replies(to: "alice").last)
        #expect(told.data == "offer_expired" && told.message?.contains("continue") == true && told.message?.contains("5 s") == true)

        var (left, _) = try Self.afterAGame()
        let leave = left.send("alice", #"{"command":7}"#)
        #expect(leave.outcome == .left && leave.offer(to: "bob") != nil && leave.games.first { $0.outcome != nil }?.outcome == .left)
    }

    /// A continue is no place in the queue: a fault or the machine going
    /// away during the offer ends it, told, and nobody waiting moves.
    @Test func aFaultOrTheMachineGoneDuringTheOfferEndsTheContinueWithoutQueueingIt() throws {
        var (faulted, _) = try Self.afterAGame()
        let fault = faulted.state.fault(MachineFaultReport(code: "claw_rise_timeout", text: ""), faulted.context)
        #expect(fault.replies(to: "alice").last?.data == "machine_fault")
        #expect(faulted.snapshot.waiting.map(\.accid) == ["bob"] && fault.replies(to: "bob").isEmpty)

        var (gone, _) = try Self.afterAGame()
        let offline = gone.presence(.offline)
        #expect(offline.replies(to: "alice").last?.data == "machine_offline")
        #expect(gone.snapshot.waiting.map(\.accid) == ["bob"] && offline.replies(to: "bob").isEmpty)
    }

    @Test func aGameThatEndedByAFaultNoResultOrTheMachineGoingAwayGivesNoContinue() throws {
        var noResult = PureGame(settings: Self.settings())
        try noResult.play("alice")
        noResult.join("bob")
        noResult.ackCoin()
        noResult.advance(by: .seconds(30))
        let timedOut = noResult.advance(by: .seconds(20))
        #expect(timedOut.games.first { $0.outcome != nil }?.outcome == .noResult && timedOut.offer(to: "alice") == nil && timedOut.offer(to: "bob") != nil)

        var faulted = PureGame(settings: Self.settings())
        try faulted.play("alice")
        faulted.ackCoin()
        let fault = faulted.state.fault(MachineFaultReport(code: "claw_rise_timeout", text: ""), faulted.context)
        #expect(fault.offer(to: "alice") == nil)

        var gone = PureGame(settings: Self.settings(), online: true)
        try gone.play("alice")
        gone.ackCoin()
        gone.presence(.offline)
        let grace = gone.advance(by: .seconds(10))
        #expect(grace.games.first { $0.outcome != nil }?.outcome == .machineOffline && grace.offer(to: "alice") == nil)
    }

    @Test func aMachineThatWouldOfferNoTurnOrAPlayerWhoCannotPayGetsNoContinue() throws {
        var game = PureGame(settings: Self.settings())
        try game.play("alice")
        game.join("bob")
        game.ackCoin()
        _ = game.state.pause(game.context)
        game.send("alice", #"{"command":2,"serial":1}"#)
        let ended = game.result(true)
        #expect(ended.offer(to: "alice") == nil && ended.offer(to: "bob") == nil, "paused: no turn at all")

        var priced = PureGame.machine
        priced.price = 2
        var poor = PureGame(settings: Self.settings(), machine: priced)
        poor.wallets = WalletBook(balances: [PlayerAddress(accid: "alice", provider: "app"): 2, PlayerAddress(accid: "bob", provider: "app"): 2])
        try poor.play("alice")
        poor.join("bob")
        poor.ackCoin()
        poor.send("alice", #"{"command":2,"serial":1}"#)
        let spent = poor.result(false)
        #expect(spent.offer(to: "alice") == nil && spent.offer(to: "bob") != nil, "alice's 2 credits paid her game: none left")

        // A win that takes the last prize (SPEC §15): out of stock, no continue, and the queue waits.
        var stocked = PureGame.machine
        stocked.prize = MachinePrize(id: "duck", name: "Duck", cost: 1, exchange: 0, lowAt: 0)
        var last = PureGame(settings: Self.settings(), machine: stocked)
        _ = last.state.restock(.set(1), reason: "one left", last.context)
        try last.play("alice")
        last.join("bob")
        last.ackCoin()
        last.send("alice", #"{"command":2,"serial":1}"#)
        let emptied = last.result(true)
        #expect(emptied.offer(to: "alice") == nil && emptied.offer(to: "bob") == nil, "out of stock: no turn at all")
        #expect(last.snapshot.state == .outOfStock && last.snapshot.waiting.map(\.accid) == ["bob"])
    }

    @Test func offByDefaultAndAReloadTurningItOffAppliesFromTheNextTurn() throws {
        let (_, ended) = try Self.afterAGame(GameSettings())
        #expect(ended.offer(to: "alice") == nil && ended.offer(to: "bob") != nil)

        var game = PureGame(settings: Self.settings())
        try game.play("alice")
        game.join("bob")
        game.ackCoin()
        _ = game.state.reconfigure(game.state.machine, settings: GameSettings(), game.context)
        game.send("alice", #"{"command":2,"serial":1}"#)
        let afterReload = game.result(true)
        #expect(afterReload.offer(to: "alice") == nil && afterReload.offer(to: "bob") != nil)
    }

    /// SPEC §13: an open continue survives a restart as a continue.
    @Test func anOpenContinueIsTakenUpAsAContinue() throws {
        let (game, _) = try Self.afterAGame()
        let row = try #require(game.state.openRecord(at: game.now))
        #expect(row.open?.continues == 1)
        var restarted = PureGame(
            settings: Self.settings(), online: false,
            restored: RestoredMachine(queue: [QueueEntry(accid: "bob", nick: "Bob", provider: "app")], snapshotSeq: 9, paused: false, openGames: [row]))
        let takenUp = restarted.state.takeUpInterrupted([row], restarted.context)
        let again = try #require(takenUp.offer(to: "alice"))
        #expect(again.isContinue == true && again.data == row.id)
        #expect(restarted.state.phase.turn?.continues == 1 && restarted.snapshot.waiting.map(\.accid) == ["bob"])
    }
}
