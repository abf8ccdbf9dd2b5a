import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// SPEC §4, `claw/<m>/result/ack`: a PC that numbers its results repeats
/// each until the gateway confirms it, once what it changed is durable; a
/// repeat is taken once and confirmed again; a PC that does not number them
/// is served as before. The transitions as plain functions.
@Suite struct ResultConfirmationTests {
    /// Alice plays on m1 and has dropped the claw; bob waits.
    static func awaiting() throws -> (PureGame, String) {
        var game = PureGame()
        let session = try game.play("alice")
        game.ackCoin()
        game.join("bob")
        game.send("alice", #"{"command":2,"serial":1}"#)
        return (game, session)
    }

    @Test func aNumberedResultEndsTheGameAndIsConfirmedWithItsWrite() throws {
        var (game, session) = try Self.awaiting()
        let step = game.result(true, session: session, serial: 7)
        #expect(step.confirmed == [7])
        let end = try #require(step.games.first { $0.id == session })
        #expect(end.outcome == .won && end.resultSerial == 7, "the serial is written with the end: a restart knows it")
        #expect(game.state.lastResult == TakenResult(serial: 7, session: session))
        #expect(!step.writes.isEmpty, "the confirmation waits for these: it is a telling effect of the same step")
    }

    @Test func aRepeatIsTakenOnceAndConfirmedAgain() throws {
        var (game, session) = try Self.awaiting()
        game.result(true, session: session, serial: 7)
        let bob = try #require(game.state.phase.turn?.session)
        #expect(game.send("bob", #"{"command":12,"data":"\#(bob)"}"#).outcome == .accepted(session: bob))
        game.ackCoin()

        // The same result again, as the PC repeats it: nothing changes, it is confirmed.
        let again = game.result(true, session: session, serial: 7)
        #expect(again.confirmed == [7] && again.writes.isEmpty && again.events.isEmpty && again.replies.isEmpty)
        // Without its session (a PC that echoes none): still known by its serial; bob's game goes on.
        let bare = game.result(false, serial: 7)
        #expect(bare.confirmed == [7] && bare.writes.isEmpty && bare.events.isEmpty)
        #expect(game.status == .playing && game.state.phase.turn?.session == bob)
        // A new serial is bob's result.
        game.send("bob", #"{"command":2,"serial":1}"#)
        let next = game.result(false, serial: 8)
        #expect(next.confirmed == [8] && next.games.first { $0.id == bob }?.outcome == .lost)
        #expect(game.state.lastResult == TakenResult(serial: 8, session: bob))
    }

    @Test func aSerialReusedForAnotherGameIsThatGamesResult() throws {
        var (game, session) = try Self.awaiting()
        game.result(true, session: session, serial: 7)
        let bob = try #require(game.state.phase.turn?.session)
        game.send("bob", #"{"command":12,"data":"\#(bob)"}"#)
        game.ackCoin()
        // Serial 7 again, but naming bob's game: not a repeat of alice's result.
        let reused = game.result(true, session: bob, serial: 7)
        #expect(reused.games.first { $0.id == bob }?.outcome == .won && reused.confirmed == [7])
    }

    @Test func aNumberedResultForAGameThatIsOverIsStaleAndStillConfirmed() throws {
        var (game, _) = try Self.awaiting()
        let stale = game.result(true, session: "s-gone", serial: 9)
        #expect(stale.eventTypes == [.staleResult] && stale.confirmed == [9] && stale.writes.isEmpty)
        #expect(game.status == .awaitingResult, "alice's game still waits for its own result")
        // With nobody playing, a numbered result is recorded for operators and confirmed.
        var idle = PureGame()
        let nobody = idle.result(true, serial: 3)
        #expect(nobody.eventTypes == [.result] && nobody.confirmed == [3] && idle.state.lastResult == nil)
    }

    @Test func aResultWithoutSerialIsTakenAsItComesOnceAndConfirmedToNoOne() throws {
        var (game, session) = try Self.awaiting()
        let first = game.result(true, session: session)
        #expect(first.confirmed.isEmpty && first.games.first { $0.id == session }?.outcome == .won)
        #expect(first.games.first { $0.id == session }?.resultSerial == nil && game.state.lastResult == nil)
        // Again (a PC that sends it twice): stale, as before, and no confirmation.
        let twice = game.result(true, session: session)
        #expect(twice.eventTypes == [.staleResult] && twice.confirmed.isEmpty)
    }

    @Test func theLastNumberedResultIsReadBackAtStart() throws {
        var restored = RestoredMachine(queue: [], snapshotSeq: 0, paused: false)
        restored.lastResult = TakenResult(serial: 7, session: "s-old")
        var game = PureGame(restored: restored)
        let session = try game.play("alice")
        game.ackCoin()
        // The PC's repeat, queued at the broker across the restart, without its session.
        let repeated = game.result(true, serial: 7)
        #expect(repeated.confirmed == [7] && repeated.writes.isEmpty)
        #expect(game.status == .playing && game.state.phase.turn?.session == session, "alice's game is not ended by it")
    }
}

/// The same on a real machine, storage writer and SQLite file with the clock
/// moved by hand: the confirmation goes out only once the end is durable,
/// and a restart still knows the last numbered result.
@Suite struct ResultConfirmationMachineTests {
    @Test func theConfirmationGoesOutOnlyOnceTheEndIsOnDisk() async throws {
        // The writer not started: nothing becomes durable until the test starts it.
        let game = try GameHarness(startWriter: false)
        game.arcade.route(MQTTMessage(topic: "claw/m1/state", payload: Array("online".utf8), retain: true))
        for note in [#"{"command":6}"#, #"{"command":12,"data":"s-m1-1"}"#] {
            let outcome = game.arcade.handleNow(PlayerNotification(from: "alice", to: "m1", attach: Array(note.utf8), provider: "test")).0
            #expect(outcome.rejectedCode == nil, "\(note): \(outcome)")
        }
        let result = WireMessage(.result, data: "true", serial: 41, session: "s-m1-1").encoded()
        game.arcade.route(MQTTMessage(topic: "claw/m1/result", payload: result, retain: false))
        game.machine.drain()
        #expect(game.snapshot.state == .idle, "the result is taken")
        #expect(game.published(on: .resultAck).isEmpty, "but not confirmed before it is on disk")
        #expect(try game.games().first { $0.id == "s-m1-1" }?.outcome == nil)
        // A repeat meanwhile waits behind it too.
        game.arcade.route(MQTTMessage(topic: "claw/m1/result", payload: result, retain: false))
        game.machine.drain()
        #expect(game.published(on: .resultAck).isEmpty)

        game.writer.start()
        await game.settle()
        #expect(try game.games().first { $0.id == "s-m1-1" }?.outcome == .won)
        #expect(game.published(on: .resultAck).map(\.text) == [#"{"serial":41}"#, #"{"serial":41}"#], "the result, then its repeat")
        // A retained result is never acted on, nor confirmed.
        game.arcade.route(MQTTMessage(topic: "claw/m1/result", payload: result, retain: true))
        await game.settle()
        #expect(game.published(on: .resultAck).count == 2)
        await game.stop()
    }

    @Test func aRepeatAfterARestartIsConfirmedAndEndsNoOtherGame() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        await first.ack(try #require(first.commands.last { $0.code == .addCoins }?.serial))
        await first.send("alice", #"{"command":2,"serial":1}"#)
        await first.result(true, session: "s-m1-1", serial: 41)
        let confirmations = first.published(on: .resultAck)
        #expect(confirmations.map(\.text) == [#"{"serial":41}"#] && confirmations.allSatisfy { $0.qos == .atLeastOnce && !$0.retain })
        #expect(try first.games().first { $0.id == "s-m1-1" }?.outcome == .won)
        await first.stop()

        let second = try GameHarness(directory: first.directory, sessions: "t-", startingAt: first.wallNow)
        await second.presence(.online)
        try await second.play("bob")
        await second.ack(try #require(second.commands.last { $0.code == .addCoins }?.serial))
        // The PC's repeat of 41 without its session: confirmed again, bob plays on.
        await second.result(true, serial: 41)
        #expect(second.published(on: .resultAck).map(\.text) == [#"{"serial":41}"#])
        #expect(second.snapshot.state == .playing && second.snapshot.player?.accid == "bob")
        #expect(try second.games().first { $0.player == "bob" }?.outcome == nil)
        await second.stop()
    }
}
