import Protocol
import Testing

@testable import ClawGateway

/// The coin's (1001) ack is the PC's word that the game started: a game
/// whose coin the PC cannot be known to have got ends `machine_offline`
/// rather than take its player's commands (docs/PROTOCOL.md).
@Suite struct CoinAckTests {
    private func coinSerial(_ game: GameHarness) throws -> Int64 {
        try #require(game.commands.last { $0.code == .addCoins }?.serial)
    }

    private func endedByLostCoin(_ game: GameHarness, reason: String) throws {
        #expect(try game.games().first { $0.id == "s-m1-1" }?.outcome == .machineOffline)
        #expect(game.lastError(of: "alice") == "machine_offline", "the player is told")
        let ended = game.events(.gameEnded).last
        #expect(ended?.session == "s-m1-1" && ended?.outcome == .machineOffline && ended?.reason == reason)
    }

    @Test func aCoinUnackedPastAckTimeoutEndsTheGameAndTheNextIsOffered() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        await game.join("bob")
        await game.advance(by: game.settings.ackTimeout - .milliseconds(1))
        #expect(game.snapshot.player?.accid == "alice", "within ack_timeout the game goes on")
        await game.advance(by: .milliseconds(1))
        try endedByLostCoin(game, reason: "coin_not_acked")
        #expect(game.events(.ackTimeout).last?.command == CommandCode.addCoins.description)
        #expect(game.offer(to: "bob") == "s-m1-2")
        #expect(await game.send("alice", #"{"command":1,"data":"up","serial":1}"#).rejectedCode == .notYourTurn)
        #expect(!game.commands.contains { $0.code == .move }, "no move of the ended game reaches the PC")
        #expect(!game.snapshot.suspect, "one ack timeout counts towards suspect as any other")
        await game.stop()
    }

    @Test func aCoinAckedInTimeKeepsTheGameGoing() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        await game.ack(try coinSerial(game))
        await game.advance(by: game.settings.ackTimeout * 2)
        #expect(game.snapshot.state == .playing && game.snapshot.player?.accid == "alice")
        guard case .forwarded = await game.send("alice", #"{"command":1,"data":"up","serial":1}"#) else {
            Issue.record("the move was not forwarded")
            return
        }
        #expect(game.events(.gameEnded).isEmpty)
        await game.stop()
    }

    @Test func aReconnectWithTheCoinUnackedEndsTheGameAtOnce() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        await game.join("bob")
        game.arcade.republish()
        await game.settle()
        try endedByLostCoin(game, reason: "coin_connection_lost")
        #expect(game.offer(to: "bob") == "s-m1-2")
        #expect(game.lastSnapshot?.player?.accid == "bob", "the snapshot republished says so")
        // The ack that will never come does not time out a second time.
        await game.advance(by: game.settings.ackTimeout)
        #expect(game.events(.gameEnded).count == 1)
        await game.stop()
    }

    @Test func aReconnectWithTheCoinAckedKeepsTheGameGoing() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        await game.ack(try coinSerial(game))
        let snapshots = game.published(on: .queue).count
        game.arcade.republish()
        await game.settle()
        #expect(game.published(on: .queue).count == snapshots + 1, "the snapshot is republished")
        #expect(game.lastSnapshot == game.snapshot)
        #expect(game.snapshot.state == .playing && game.events(.gameEnded).isEmpty)
        await game.stop()
    }

    /// A reconnect while the coin still waits for the disk: neither the coin
    /// nor the moves behind it ever reach the PC.
    @Test func aReconnectEndsTheGameBeforeAnyOfItsWaitingCommandsGoOut() async throws {
        let game = try GameHarness(startWriter: false)
        try acceptAndMove(game)
        game.arcade.republish()
        game.writer.start()
        await game.settle()
        await game.settle()
        #expect(game.commands.isEmpty)
        try endedByLostCoin(game, reason: "coin_connection_lost")
        #expect(try game.games().first?.startedAt != nil, "the accept is on record")
        await game.stop()
    }

    @Test func aCoinThatCannotBePublishedEndsItsGameAndNothingMoreOfItGoesOut() async throws {
        let game = try GameHarness(startWriter: false)
        try acceptAndMove(game)
        game.publisher.isConnected = false
        game.writer.start()
        await game.settle()
        // The coin's failure ended the game in a transition of its own: wait for it too.
        await game.settle()
        #expect(game.commands.isEmpty)
        #expect(try game.games().first { $0.id == "s-m1-1" }?.outcome == .machineOffline)
        #expect(game.lastError(of: "alice") == "machine_offline", "the player is told")
        #expect(game.status == .idle)
        // Back on the broker: nothing of that game follows.
        game.publisher.isConnected = true
        game.arcade.republish()
        await game.settle()
        #expect(game.commands.isEmpty)
        #expect(game.lastSnapshot?.player == nil)
        await game.stop()
    }

    /// Alice accepts and moves while every write is pending: coin and move wait.
    private func acceptAndMove(_ game: GameHarness) throws {
        game.arcade.route(MQTTMessage(topic: "claw/m1/state", payload: Array("online".utf8), retain: true))
        let notes = [#"{"command":6}"#, #"{"command":12,"data":"s-m1-1"}"#, #"{"command":1,"data":"up","serial":1}"#]
        for note in notes {
            let outcome = game.arcade.handleNow(PlayerNotification(from: "alice", to: "m1", attach: Array(note.utf8), provider: "test")).0
            #expect(outcome.rejectedCode == nil, "\(note): \(outcome)")
        }
        #expect(game.commands.isEmpty)
    }
}
