import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// A machine's game, turn by turn, on a test clock (SPEC §3).
@Suite struct MachineGameTests {
    @Test func joiningAFreeMachineOffersTheTurn() throws {
        let game = try GameHarness()
        #expect(game.join("alice") == .offered(session: "s1"))
        let offer = try #require(game.players.to("alice").last)
        #expect(offer.code == .turnOffer)
        #expect(offer.data == "s1")
        #expect(offer.timeout == 10)
        #expect(offer.serial != nil)
        #expect(game.status == .offered)
        let snapshot = try #require(game.lastSnapshot)
        #expect(snapshot.player?.accid == "alice")
        #expect(snapshot.player?.nick == "Alice")
        #expect(snapshot.player?.deadline == Timestamp.string(GameHarness.epoch.addingTimeInterval(10)))
        #expect(game.events.map(\.type) == [.online, .joined, .offered])
    }

    @Test func acceptingStartsTheGameWithCoins() throws {
        let game = try GameHarness(settings: GameSettings(coinsPerGame: 2))
        game.join("alice")
        #expect(game.send("alice", #"{"command":12,"data":"s1","serial":1}"#) == .accepted(session: "s1"))
        let coins = try #require(game.commands.last)
        #expect(coins.code == .addCoins)
        #expect(coins.data == "2")
        #expect(coins.session == "s1")
        #expect(coins.player == "alice")
        #expect(game.published(on: .control).allSatisfy { $0.qos == .atMostOnce && !$0.retain })
        #expect(game.players.to("alice").last == WireMessage(.queuePosition, data: "0", length: 0))
        #expect(game.status == .playing)
        // A second copy of the accept changes nothing.
        #expect(game.send("alice", #"{"command":12,"data":"s1","serial":1}"#) == .ignored("the game has already started"))
        #expect(try game.games().first?.startedAt != nil)
    }

    @Test func movesOfThePlayerAreForwardedInTheWireFormat() throws {
        let game = try GameHarness()
        try game.play("alice")
        guard case .forwarded(let serial) = game.send("alice", #"{"command":1,"data":"left","serial":7}"#) else {
            Issue.record("not forwarded")
            return
        }
        let published = try #require(game.published(on: .control).last)
        #expect(published.text == #"{"command":1,"data":"left","serial":\#(serial),"session":"s1","player":"alice"}"#)
        #expect(game.send("alice", #"{"command":3,"data":2,"serial":8}"#) == .forwarded(serial: serial + 1))
        #expect(game.published(on: .camera).last?.text == #"{"command":3,"data":"2","serial":\#(serial + 1),"session":"s1","player":"alice"}"#)
        let command = try #require(game.events(.command).first)
        #expect(command.playerSerial == 7)
        #expect(command.serial == serial)
        #expect(command.data == "left")
    }

    @Test func onlyTheCurrentPlayerSteers() throws {
        let game = try GameHarness()
        try game.play("alice")
        game.join("bob")
        #expect(game.send("bob", #"{"command":1,"data":"left","serial":3}"#).rejectedCode == .notYourTurn)
        #expect(game.players.to("bob").last?.serial == 3)
        #expect(game.send("carol", #"{"command":2,"serial":1}"#).rejectedCode == .notYourTurn)
        #expect(game.commands.count == 1, "only the coins went out")
        #expect(game.events(.dropped).map(\.reason) == ["not_your_turn", "not_your_turn"])
    }

    @Test func aRepeatedSerialIsDropped() throws {
        let game = try GameHarness()
        try game.play("alice")
        game.send("alice", #"{"command":1,"data":"up","serial":5}"#)
        #expect(game.send("alice", #"{"command":1,"data":"up","serial":5}"#).rejectedCode == .duplicateSerial)
        #expect(game.lastError(of: "alice") == "duplicate_serial")
        #expect(game.commands.filter { $0.code == .move }.count == 1)
    }

    @Test func commandsBeyondTheRateAreRefusedUntilTheBucketRefills() async throws {
        let game = try GameHarness(settings: GameSettings(maxCommandsPerSecond: 3))
        try game.play("alice")
        for serial in 1...3 {
            #expect(game.send("alice", #"{"command":1,"data":"left","serial":\#(serial)}"#).rejectedCode == nil)
        }
        #expect(game.send("alice", #"{"command":1,"data":"left","serial":4}"#).rejectedCode == .rateLimited)
        await game.advance(by: .milliseconds(340))
        #expect(game.send("alice", #"{"command":1,"data":"left","serial":5}"#).rejectedCode == nil)
        #expect(game.send("alice", #"{"command":1,"data":"left","serial":6}"#).rejectedCode == .rateLimited)
    }

    @Test func grabThenResultEndsTheGameAndOffersTheNextTurn() throws {
        let game = try GameHarness()
        try game.play("alice")
        game.join("bob")
        game.send("alice", #"{"command":1,"data":"left","serial":1}"#)
        game.send("alice", #"{"command":2,"serial":2}"#)
        #expect(game.status == .awaitingResult)
        #expect(game.send("alice", #"{"command":1,"data":"left","serial":3}"#).rejectedCode == .notYourTurn)
        #expect(game.send("alice", #"{"command":3,"data":"1","serial":4}"#).rejectedCode == nil, "the camera may still switch")
        game.result(true)
        #expect(game.players.to("alice").contains(WireMessage(.result, data: "true")))
        #expect(game.offer(to: "bob") == "s2")
        let record = try #require(try game.games().first { $0.player == "alice" })
        #expect(record.outcome == .won)
        #expect(record.commands == 3)
        #expect(record.endedAt != nil)
        #expect(game.events(.gameEnded).last?.outcome == .won)
    }

    @Test func anOfferNotAcceptedExpiresAndTheTurnPassesOn() async throws {
        let game = try GameHarness()
        game.join("alice")
        game.join("bob")
        await game.advance(by: .seconds(9))
        #expect(game.snapshot.player?.accid == "alice")
        await game.advance(by: .seconds(1))
        #expect(game.snapshot.player?.accid == "bob")
        #expect(game.events(.expired).map(\.player) == ["alice"])
        #expect(try game.games().first { $0.player == "alice" }?.outcome == .expired)
        #expect(game.snapshot.waiting.isEmpty, "an expired player leaves the queue")
    }

    @Test func declineAndSessionMismatch() throws {
        let game = try GameHarness()
        game.join("alice")
        game.join("bob")
        #expect(game.send("alice", #"{"command":12,"data":"nope","serial":9}"#).rejectedCode == .sessionMismatch)
        #expect(game.send("bob", #"{"command":12,"data":"s1"}"#).rejectedCode == .notYourTurn)
        #expect(game.send("carol", #"{"command":12,"data":"s1"}"#).rejectedCode == .notInQueue)
        #expect(game.send("alice", #"{"command":13,"data":"s1"}"#) == .declined)
        #expect(game.offer(to: "bob") == "s2")
        #expect(try game.games().first { $0.player == "alice" }?.outcome == .declined)
    }

    @Test func thePlayTimerDropsTheClawAndTheResultTimerEndsTheGame() async throws {
        let game = try GameHarness()
        try game.play("alice")
        await game.advance(by: .seconds(29))
        #expect(game.status == .playing)
        await game.advance(by: .seconds(1))
        #expect(game.status == .awaitingResult)
        #expect(game.commands.last?.code == .grab)
        #expect(game.events(.autoGrab).count == 1)
        await game.advance(by: .seconds(20))
        #expect(game.status == .idle)
        #expect(game.events(.noResult).count == 1)
        #expect(try game.games().first?.outcome == .noResult)
    }

    @Test func acksAreMatchedToThePlayerSerialAndRelayed() async throws {
        let game = try GameHarness(settings: GameSettings(relayAcks: true))
        try game.play("alice")
        let coins = try #require(game.commands.last?.serial)
        game.ack(coins)
        guard case .forwarded(let serial) = game.send("alice", #"{"command":1,"data":"right","serial":41}"#) else {
            Issue.record("not forwarded")
            return
        }
        await game.advance(by: .milliseconds(25))
        game.ack(serial, data: "moved")
        #expect(game.players.to("alice").last == WireMessage(.ack, data: "moved", serial: 41))
        let ack = try #require(game.events(.ack).last)
        #expect(ack.playerSerial == 41)
        #expect(ack.latencyMs == 25)
        #expect(ack.command == "move")
        game.ack(serial)
        #expect(game.events(.ack).count == 2, "a repeated ack is not counted twice")
    }

    @Test func acksNotRelayedByDefault() throws {
        let game = try GameHarness()
        try game.play("alice")
        game.send("alice", #"{"command":1,"data":"right","serial":41}"#)
        game.ack(try #require(game.commands.last?.serial))
        #expect(!game.players.to("alice").contains { $0.code == .ack })
    }

    @Test func aMissingAckIsReportedAfterTheTimeout() async throws {
        let game = try GameHarness()
        try game.play("alice")
        game.ack(try #require(game.commands.last?.serial))
        game.send("alice", #"{"command":1,"data":"up","serial":1}"#)
        await game.advance(by: .seconds(2))
        #expect(game.events(.ackTimeout).isEmpty)
        await game.advance(by: .seconds(1))
        let timeout = try #require(game.events(.ackTimeout).first)
        #expect(timeout.playerSerial == 1)
        #expect(timeout.command == "move")
        #expect(game.status == .playing, "the game goes on")
    }

    @Test func resultWithNoGameIsAnEventNotAReply() throws {
        let game = try GameHarness()
        game.result(false)
        #expect(game.events(.result).first?.data == "false")
        #expect(game.players.replies.items.isEmpty)
    }
}

extension RequestOutcome {
    var rejectedCode: ErrorCode? {
        if case .rejected(let error) = self { return error.code }
        return nil
    }
}
