import Foundation
import Protocol
import Synchronization
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
        await game.reconnect()
        try endedByLostCoin(game, reason: "coin_connection_lost")
        #expect(game.offer(to: "bob") == "s-m1-2")
        #expect(game.lastSnapshot?.player?.accid == "bob", "the snapshot republished says so")
        // The ack that will never come does not time out a second time.
        await game.advance(by: game.settings.ackTimeout)
        #expect(game.events(.gameEnded).count == 1)
        await game.stop()
    }

    /// The PC's process killed as its coin went out, and back within
    /// `offline_grace` in no game (the long chaos run's finding): the game
    /// ends when the PC goes offline, and the moves that waited for the
    /// coin's ack never reach the PC.
    @Test func aPCGoingOfflineBeforeItAcksTheCoinEndsTheGameAndItsMovesNeverGoOut() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        await game.join("bob")
        guard case .forwarded = await game.send("alice", #"{"command":1,"data":"up","serial":1}"#) else {
            Issue.record("the move was not answered forwarded")
            return
        }
        await game.presence(.offline)
        try endedByLostCoin(game, reason: "coin_machine_offline")
        await game.presence(.online)
        #expect(!game.commands.contains { $0.code == .move }, "no move of the game reaches the PC")
        #expect(game.offer(to: "bob") == "s-m1-2")
        await game.stop()
    }

    /// With the coin acked, a PC that drops keeps the game for the grace.
    @Test func aPCGoingOfflineAfterItAckedTheCoinKeepsTheGameForTheGrace() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        await game.ack(try coinSerial(game))
        await game.presence(.offline)
        #expect(game.events(.gameEnded).isEmpty && game.snapshot.player?.accid == "alice")
        await game.presence(.online)
        guard case .forwarded = await game.send("alice", #"{"command":1,"data":"up","serial":1}"#) else {
            Issue.record("the move was not forwarded")
            return
        }
        #expect(game.commands.contains { $0.code == .move })
        await game.stop()
    }

    @Test func aReconnectWithTheCoinAckedKeepsTheGameGoing() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        await game.ack(try coinSerial(game))
        let snapshots = game.published(on: .queue).count
        await game.reconnect()
        #expect(game.published(on: .queue).count == snapshots + 1, "the snapshot is republished")
        #expect(game.lastSnapshot == game.snapshot)
        #expect(game.snapshot.state == .playing && game.events(.gameEnded).isEmpty)
        await game.stop()
    }

    /// A reconnect while the coin still waits for the disk: nothing of the
    /// game went out on the connection that is gone, so the coin goes out on
    /// the new one and the game goes on; its move follows the coin's ack.
    @Test func aReconnectWhileTheCoinWaitsForTheDiskLetsTheGameGoOn() async throws {
        let game = try GameHarness(startWriter: false)
        try acceptAndMove(game)
        // Not game.reconnect(): it settles, which waits for the disk this test holds back.
        game.publisher.reconnect()
        game.arcade.republish(connection: game.publisher.connection)
        game.writer.start()
        await game.settle()
        #expect(game.commands.map(\.code) == [.addCoins])
        #expect(game.events(.gameEnded).isEmpty && game.status == .playing)
        await game.ack(try coinSerial(game))
        #expect(game.commands.map(\.code) == [.addCoins, .move])
        await game.stop()
    }

    /// The reconnect's hook runs while a coin is on its way, taken out of
    /// the outbox but not yet published: it goes out on the new connection,
    /// and its game goes on. Before, the hook ended the game (its coin
    /// pending, as if lost with the old connection) and the coin reached the
    /// PC all the same: a PC playing a game the gateway had ended.
    @Test func aCoinOnItsWayWhenTheGatewayReconnectsGoesOutOnTheNewConnectionAndItsGameGoesOn() async throws {
        let game = try await GameHarness.online()
        // The reconnect's hook runs at the very moment the coin is on its way: in the publish, before it goes out.
        game.publisher.onPublish { [game] publication, before in
            guard before, publication.text.hasPrefix(#"{"command":1001"#) else { return }
            game.publisher.onPublish(nil)
            game.publisher.reconnect()
            game.arcade.republish(connection: game.publisher.connection)
        }
        try await game.play("alice")
        await game.settle()
        #expect(game.commands.filter { $0.code == .addCoins }.count == 1, "the coin went out, once")
        #expect(game.events(.gameEnded).isEmpty, "its game was not ended: \(game.events(.gameEnded))")
        #expect(game.status == .playing && game.lastError(of: "alice") == nil)
        await game.ack(try coinSerial(game))
        guard case .forwarded = await game.send("alice", #"{"command":1,"data":"up","serial":1}"#) else {
            Issue.record("the game does not take its player's moves")
            return
        }
        await game.stop()
    }

    /// The other order: the coin went out on the old connection, and the
    /// reconnect's hook ran before the machine heard so. The coin may have
    /// been lost with that connection: its game ends as at a reconnect.
    @Test func aCoinPublishedOnTheOldConnectionJustBeforeTheReconnectEndsItsGame() async throws {
        let game = try await GameHarness.online()
        game.publisher.onPublish { [game] publication, before in
            guard !before, publication.text.hasPrefix(#"{"command":1001"#) else { return }
            game.publisher.onPublish(nil)
            game.publisher.reconnect()
            game.arcade.republish(connection: game.publisher.connection)
        }
        await game.join("alice")
        let session = try #require(game.offer(to: "alice"))
        await game.send("alice", #"{"command":12,"data":"\#(session)"}"#)
        await game.settle()
        try endedByLostCoin(game, reason: "coin_connection_lost")
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
        await game.reconnect()
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
