import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// Paying for games at a site of a chain (SPEC §11): the chain's ledger
/// debits each game, asked over the link, with the clock moved by hand.
/// Games on m1 cost 2 credits; `chain.wallet_timeout` is 2 s.
@Suite struct ChainCreditsTests {
    static func game() -> PureGame {
        var machine = PureGame.machine
        machine.price = 2
        var game = PureGame(machine: machine)
        game.chainLedger = ChainLedgerContext(timeout: .seconds(2), reachable: true)
        return game
    }

    @discardableResult
    static func answer(_ game: inout PureGame, _ session: String, _ result: ChainWalletAnswer.Result, balance: Int64?) -> Step<Void> {
        game.state.debitAnswered(ChainWalletAnswer(kind: .debit, session: session, result: result, balance: balance), game.context)
    }

    /// Joins alice and accepts: the debit is asked. Returns the session.
    static func ask(_ game: inout PureGame) throws -> String {
        let offer = try #require(game.join("alice").offer(to: "alice"))
        #expect(offer.price == 2 && offer.balance == nil, "the site does not hold the chain's balances")
        let session = try #require(offer.data)
        let accept = game.send("alice", #"{"command":12,"data":"\#(session)"}"#)
        #expect(accept.commands.isEmpty, "no coin before the ledger's debit")
        #expect(
            accept.chainWallet == [
                ChainWalletAsk(
                    kind: .debit, session: session, provider: "app", account: "alice", credits: 2, machine: "m1", voucher: PureGame.routersVoucher)
            ], "the ask carries the router's voucher, as it came")
        #expect(accept.asks.map(\.session) == [session])
        return session
    }

    @Test func theGameStartsWhenTheLedgerDebitsIt() throws {
        var game = Self.game()
        let session = try Self.ask(&game)
        let again = game.send("alice", #"{"command":12,"data":"\#(session)"}"#)
        #expect(again.asks.isEmpty && again.writes.isEmpty, "an accept while the ask is out is the same accept")
        let started = Self.answer(&game, session, .debited, balance: 7)
        #expect(started.commands.map(\.message.code) == [.addCoins])
        #expect(started.games.last?.startedAt != nil && started.ledger.isEmpty, "the chain's ledger wrote the debit, not the site")
        let told = try #require(started.replies(to: "alice").first { $0.code == .creditsChanged })
        #expect(told.data == "7" && told.change == -2 && told.reason == "debit")
        #expect(game.state.phase.turn?.paid == 2)
    }

    @Test func noAnswerRefusesTheAcceptAndTheOfferStands() throws {
        var game = Self.game()
        let session = try Self.ask(&game)
        let waited = game.advance(by: .seconds(2))
        #expect(waited.error(to: "alice") == "gateway_unavailable")
        #expect(game.status == .offered, "the offer stands until its own timer")
        let retry = game.send("alice", #"{"command":12,"data":"\#(session)"}"#)
        #expect(retry.asks.map(\.session) == [session], "asked again: the ledger debits a session once")
        #expect(retry.chainWallet.isEmpty, "the ask is written once")
        #expect(Self.answer(&game, session, .debited, balance: 3).commands.map(\.message.code) == [.addCoins])
    }

    /// An accept just before the offer runs out: the offer waits for the
    /// ledger's answer (up to the ask's timeout) rather than expire under it.
    @Test func anOfferAcceptedInTimeWaitsForTheLedgersAnswer() throws {
        var game = Self.game()
        let offer = try #require(game.join("alice").offer(to: "alice")?.data)
        game.advance(by: .seconds(9))
        #expect(game.send("alice", #"{"command":12,"data":"\#(offer)"}"#).asks.map(\.session) == [offer])
        let waiting = game.advance(by: .milliseconds(1500))
        #expect(game.status == .offered && waiting.games.isEmpty, "the offer's 10 s passed, its accept's answer not yet")
        #expect(Self.answer(&game, offer, .debited, balance: 4).commands.map(\.message.code) == [.addCoins])
        // No answer: the accept is refused and the offer, past its time, expires with it.
        var other = Self.game()
        let late = try #require(other.join("bob").offer(to: "bob")?.data)
        other.advance(by: .seconds(9))
        other.send("bob", #"{"command":12,"data":"\#(late)"}"#)
        #expect(other.state.nextDeadline() == other.now.uptime + .seconds(2), "the ask's timeout is the next deadline")
        let ended = other.advance(by: .seconds(2))
        #expect(ended.error(to: "bob") == "offer_expired" && ended.replies(to: "bob").contains { $0.data == "gateway_unavailable" })
        #expect(ended.games.last?.outcome == .expired && ended.chainWallet.map(\.kind) == [.refund])
    }

    @Test func aShortBalanceEndsTheTurnUnpaid() throws {
        var game = Self.game()
        let session = try Self.ask(&game)
        game.join("bob")
        let refused = Self.answer(&game, session, .insufficient, balance: 1)
        #expect(refused.games.first?.outcome == .unpaid && refused.commands.isEmpty)
        let error = try #require(refused.replies(to: "alice").last { $0.code == .error })
        #expect(error.data == "insufficient_credits" && error.balance == 1 && error.price == 2)
        #expect(refused.chainWallet.isEmpty, "nothing was debited: nothing to ask back")
        #expect(refused.offer(to: "bob") != nil, "the turn passes on")
    }

    /// The offer runs out while the debit is out: the turn owes its refund,
    /// which the ledger pays only if it debited; its late answer starts nothing.
    @Test func aTurnThatEndsUnstartedAsksForItsDebitBack() throws {
        var game = Self.game()
        let session = try Self.ask(&game)
        game.advance(by: .seconds(2))
        let expired = game.advance(by: .seconds(8))
        #expect(expired.games.last?.outcome == .expired)
        #expect(expired.chainWallet == [ChainWalletAsk(kind: .refund, session: session, provider: "app", account: "alice", credits: 2, machine: "m1")])
        let late = Self.answer(&game, session, .debited, balance: 5)
        #expect(late.commands.isEmpty && late.writes.isEmpty && game.status == .idle)
    }

    @Test func aFailedGameIsPaidBackThroughTheOutboxAndAWonOneIsNot() throws {
        var game = Self.game()
        var session = try Self.ask(&game)
        Self.answer(&game, session, .debited, balance: 8)
        game.ackCoin()
        game.advance(by: .seconds(30))  // the play timer drops the claw
        let noResult = game.advance(by: .seconds(20))
        #expect(noResult.games.last?.outcome == .noResult)
        #expect(noResult.chainWallet.map(\.kind) == [.refund] && noResult.chainWallet.first?.session == session)
        #expect(noResult.replies(to: "alice").allSatisfy { $0.code != .creditsChanged }, "told once the ledger answers, with its balance")
        #expect(noResult.events(.credits).first?.change == 2 && noResult.events(.credits).first?.balance == nil)
        session = try Self.ask(&game)
        Self.answer(&game, session, .debited, balance: 6)
        game.ackCoin()
        let won = game.result(true, session: session)
        #expect(won.games.last?.outcome == .won && won.chainWallet.isEmpty)
    }

    /// SPEC §9: an accept that came with no router's voucher (sent to the
    /// site straight, not through a router) asks no debit: the chain's
    /// ledger would refuse it, and the player is told at once.
    @Test func anAcceptWithoutTheRoutersVoucherAsksNoDebit() throws {
        var game = Self.game()
        game.voucher = nil
        let session = try #require(game.join("alice").offer(to: "alice")?.data)
        let accept = game.send("alice", #"{"command":12,"data":"\#(session)"}"#)
        #expect(accept.rejectedCode == .gatewayUnavailable)
        #expect(accept.asks.isEmpty && accept.writes.isEmpty && game.status == .offered, "the offer stands")
    }

    /// SPEC §2: an answer that ends the player's own turn is always sent,
    /// even within a second of another refusal of the same code.
    @Test func aPaidGameTheChainRefusedIsAlwaysTold() throws {
        var game = Self.game()
        let session = try Self.ask(&game)
        let refused = Self.answer(&game, session, .refused, balance: nil)
        let told = refused.replies(to: "alice").filter { $0.code == .error }
        #expect(told.map(\.data) == ["gateway_unavailable"])
        #expect(
            refused.replies.contains { $0.priority == .high && $0.message.code == .error }, "high priority: never held back as a repeated refusal")
    }

    @Test func anUnreachableChainRefusesTheAcceptAtOnce() throws {
        var game = Self.game()
        game.chainLedger?.reachable = false
        let session = try #require(game.join("alice").offer(to: "alice")?.data)
        let accept = game.send("alice", #"{"command":12,"data":"\#(session)"}"#)
        #expect(accept.rejectedCode == .gatewayUnavailable)
        #expect(accept.asks.isEmpty && accept.writes.isEmpty && game.status == .offered)
    }

    /// A restart finds a turn whose debit was asked (its row read back as
    /// `paid`) in a file of before games were taken up: it is closed, and
    /// asks for its debit back.
    @Test func aRestartClosesAnAskedTurnWithItsRefund() throws {
        let row = GameRow(
            id: "old-1", machine: "m1", player: "alice", nick: "Alice", provider: "app", offeredAt: Date(timeIntervalSince1970: 1_794_999_000),
            startedAt: nil, endedAt: nil, outcome: nil, commands: 0, paid: 2)
        var game = Self.game()
        let closed = game.state.takeUpInterrupted([row], game.context)
        #expect(closed.games.first?.outcome == .expired)
        #expect(closed.chainWallet.map(\.kind) == [.refund] && closed.chainWallet.first?.session == "old-1")
    }
}
