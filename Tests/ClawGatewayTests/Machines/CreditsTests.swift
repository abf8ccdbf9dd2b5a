import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// Paying for games (SPEC §11) as transitions of the game, with the clock
/// moved by hand: games on m1 cost 2 credits.
@Suite struct CreditsTests {
    static func player(_ accid: String) -> PlayerAddress { PlayerAddress(accid: accid, provider: "app") }

    static func game(_ balances: [String: Int64], settings: GameSettings = GameSettings(), id: String = "m1") -> PureGame {
        var machine = PureGame.machine
        machine.id = id
        machine.price = 2
        var game = PureGame(settings: settings, machine: machine)
        game.wallets = WalletBook(balances: Dictionary(uniqueKeysWithValues: balances.map { (player($0.key), $0.value) }))
        return game
    }

    static func balance(_ game: PureGame, _ accid: String) -> Int64? { game.wallets?.balance(of: player(accid)) }

    @Test func aJoinUnderThePriceIsRefusedWithBalanceAndPrice() throws {
        var game = Self.game(["alice": 1])
        let join = game.join("alice")
        #expect(join.rejectedCode == .insufficientCredits)
        let refusal = try #require(join.replies(to: "alice").last)
        #expect(refusal.data == "insufficient_credits" && refusal.balance == 1 && refusal.price == 2)
        #expect(refusal.encodedString().contains(#""balance":1,"price":2"#))
        #expect(join.writes.isEmpty, "nothing written, nobody queued")
        #expect(game.snapshot.waiting.isEmpty && game.state.phase.turn == nil)
    }

    @Test func theOfferCarriesThePriceAndTheAcceptDebitsItWithTheStart() throws {
        var game = Self.game(["alice": 5])
        let offer = try #require(game.join("alice").offer(to: "alice"))
        #expect(offer.price == 2 && offer.balance == 5)
        let session = try #require(offer.data)
        let accept = game.send("alice", #"{"command":12,"data":"\#(session)"}"#)
        #expect(accept.outcome == .accepted(session: session))
        // The debit is in the same step as the game's start: one transaction.
        #expect(accept.ledger.map(\.kind) == [.debit] && accept.ledger.first?.credits == -2 && accept.ledger.first?.key == session)
        #expect(accept.games.last?.startedAt != nil)
        #expect(accept.commands.map(\.message.code) == [.addCoins])
        let told = try #require(accept.replies(to: "alice").first { $0.code == .creditsChanged })
        #expect(told.encodedString() == #"{"command":14,"data":"3","session":"\#(session)","change":-2,"reason":"debit"}"#)
        let event = try #require(accept.events(.credits).first)
        #expect(event.data == "debit" && event.change == -2 && event.balance == 3 && event.session == session)
        #expect(Self.balance(game, "alice") == 3)
        // Accepting again (an IM copy twice) debits nothing.
        let again = game.send("alice", #"{"command":12,"data":"\#(session)"}"#)
        #expect(again.ledger.isEmpty && Self.balance(game, "alice") == 3)
    }

    /// Credit for one game, offered on two machines: the first accept pays,
    /// the second is refused and recorded `unpaid`, its turn passing on.
    @Test func creditForOneGameBuysOneGameAcrossMachines() throws {
        let book = WalletBook(balances: [Self.player("alice"): 2, Self.player("bob"): 2])
        var m1 = Self.game([:])
        var m2 = Self.game([:], id: "m2")
        m1.wallets = book
        m2.wallets = book
        let first = try #require(m1.join("alice").offer(to: "alice")?.data)
        let second = try #require(m2.join("alice").offer(to: "alice")?.data)
        m2.join("bob")
        #expect(m1.send("alice", #"{"command":12,"data":"\#(first)"}"#).outcome == .accepted(session: first))
        let refused = m2.send("alice", #"{"command":12,"data":"\#(second)"}"#)
        #expect(refused.rejectedCode == .insufficientCredits)
        #expect(refused.replies(to: "alice").last?.balance == 0)
        #expect(refused.ledger.isEmpty && refused.commands.isEmpty, "no coin without a debit")
        #expect(refused.games.first?.outcome == .unpaid)
        #expect(refused.offer(to: "bob") != nil, "the turn passes on")
        #expect(book.balance(of: Self.player("alice")) == 0)
        // SPEC §2: it ends her turn, so it is always told, never held back
        // as a second refusal within a second would be.
        #expect(refused.replies.contains { $0.to.accid == "alice" && $0.message.data == "insufficient_credits" && $0.priority == .high })
    }

    /// SPEC §11: a reload that changes the price meanwhile changes nothing
    /// for a turn already offered: the offer's price is what is debited.
    @Test func theOffersPriceIsWhatTheAcceptDebits() throws {
        var game = Self.game(["alice": 5])
        let offer = try #require(game.join("alice").offer(to: "alice"))
        #expect(offer.price == 2)
        var dearer = game.state.machine
        dearer.price = 4
        _ = game.state.reconfigure(dearer, settings: game.state.settings, game.context)
        let accept = game.send("alice", #"{"command":12,"data":"\#(offer.data ?? "")"}"#)
        #expect(accept.ledger.first?.credits == -2, "the offer said 2")
        #expect(Self.balance(game, "alice") == 3)
    }

    @Test func aWonOrLostGameWithItsCoinAckedIsNotPaidBack() throws {
        var game = Self.game(["alice": 4])
        let session = try game.play("alice")
        game.ackCoin()
        let lost = game.result(false, session: session)
        #expect(lost.games.last?.outcome == .lost && lost.ledger.isEmpty)
        #expect(Self.balance(game, "alice") == 2)
    }

    @Test func noResultIsPaidBackOnce() throws {
        var game = Self.game(["alice": 4])
        let session = try game.play("alice")
        game.ackCoin()
        game.advance(by: .seconds(30))  // the play timer drops the claw
        let ended = game.advance(by: .seconds(20))
        #expect(ended.games.last?.outcome == .noResult)
        #expect(ended.ledger.map(\.kind) == [.refund] && ended.ledger.first?.credits == 2 && ended.ledger.first?.key == session)
        #expect(ended.replies(to: "alice").contains { $0.code == .creditsChanged && $0.reason == "refund" && $0.data == "4" })
        #expect(Self.balance(game, "alice") == 4)
        // The result that comes after is stale: nothing more.
        #expect(game.result(true, session: session).ledger.isEmpty)
        #expect(Self.balance(game, "alice") == 4)
    }

    @Test func aMachineGoneOfflineOrFaultedPaysTheGameBack() throws {
        var offline = Self.game(["alice": 2], settings: GameSettings(offlineGrace: .zero))
        _ = try offline.play("alice")
        offline.ackCoin()
        let gone = offline.presence(.offline)
        #expect(gone.games.last?.outcome == .machineOffline && gone.ledger.map(\.kind) == [.refund])
        #expect(Self.balance(offline, "alice") == 2)

        var faulted = Self.game(["bob": 2])
        _ = try faulted.play("bob")
        faulted.ackCoin()
        let fault = faulted.paid(faulted.state.fault(MaintenanceTests.claw, faulted.context))
        #expect(fault.games.last?.outcome == .machineFault && fault.ledger.map(\.kind) == [.refund])
        #expect(Self.balance(faulted, "bob") == 2)
    }

    /// A game whose coin the PC never acknowledged is paid back whatever its outcome.
    @Test func aCoinNeverAckedIsPaidBackEvenForAResult() throws {
        var game = Self.game(["alice": 2])
        let session = try game.play("alice")
        let won = game.result(true, session: session)
        #expect(won.games.last?.outcome == .won && won.ledger.map(\.kind) == [.refund])
        #expect(Self.balance(game, "alice") == 2)

        // Skipped by an operator before the coin's ack: paid back too.
        var skipped = Self.game(["bob": 2])
        _ = try skipped.play("bob")
        let skip = skipped.paid(skipped.state.skip(skipped.context))
        #expect(skip.games.last?.outcome == .skipped && skip.ledger.map(\.kind) == [.refund])
        #expect(Self.balance(skipped, "bob") == 2)
    }

    /// A game taken up after a restart keeps what it paid: a started one
    /// that cannot be taken up ends no_result and is paid back.
    @Test func aGameCutShortByARestartIsPaidBack() throws {
        let row = GameRow(
            id: "old-1", machine: "m1", player: "alice", nick: "Alice", provider: "app", offeredAt: Date(timeIntervalSince1970: 1_794_999_000),
            startedAt: Date(timeIntervalSince1970: 1_794_999_005), endedAt: nil, outcome: nil, commands: 3, paid: 2)
        var game = Self.game(["alice": 0])
        let closed = game.paid(game.state.takeUpInterrupted([row], game.context))
        #expect(closed.games.first?.outcome == .noResult)
        #expect(closed.ledger.map(\.kind) == [.refund] && closed.ledger.first?.key == "old-1")
        #expect(Self.balance(game, "alice") == 2)
    }

    @Test func aFreeMachineOrNoWalletsCostsNothing() throws {
        var free = PureGame()
        free.wallets = WalletBook()
        _ = try free.play("alice")
        #expect(free.state.phase.turn?.paid == nil)
        var zero = Self.game([:])
        zero.state.machine.price = 0
        let offer = try #require(zero.join("bob").offer(to: "bob"))
        #expect(offer.price == nil && offer.balance == nil)
    }

    /// The worked example of docs/CREDITS.md, as a payment service signs it with openssl.
    @Test func theDocumentedTopUpSignatureIsTheGatewaysAndIsTaken() throws {
        let body = Array(#"{"provider":"netease","account":"tourist_3f9a2c41d07b5e68","credits":100,"order":"pay-20261127-0042"}"#.utf8)
        let signature = Signatures.topupSignature(secret: "example-topup-secret-2026", timestamp: "1795000000", body: body)
        #expect(signature == "6c03432816f3c2eb0d922ac264f3c43ceeb549302ac4df13300c932685303df3")
        #expect(signature != Signatures.genericSignature(secret: "example-topup-secret-2026", timestamp: "1795000000", body: body))
        let headers = [GenericEnvelope.timestampHeader: "1795000000", GenericEnvelope.signatureHeader: signature]
        let entry = try TopUp.read(
            body: body, header: { headers[$0] }, settings: CreditsSettings(topupSecret: "example-topup-secret-2026", maxTopup: 1000),
            providers: ["netease"], now: Date(timeIntervalSince1970: 1_795_000_100))
        #expect(entry.kind == .topup && entry.credits == 100 && entry.key == "pay-20261127-0042")
        #expect(entry.wallet == PlayerAddress(accid: "tourist_3f9a2c41d07b5e68", provider: "netease"))
    }
}
