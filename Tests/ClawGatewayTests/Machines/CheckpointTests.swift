import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// SPEC §13 after a `kill -9`: the open game's `commands` count and its
/// duplicate-serial window are on disk within a second of its moves, with
/// no write per move (the moves are the hot path): at most one a second,
/// from the deadlines.
@Suite struct CheckpointTests {
    @Test func movesWriteNothingAndTheCountIsCheckpointedOnceASecond() throws {
        var game = PureGame()
        try game.play("alice")
        game.ackCoin()
        var checkpoints: [GameRow] = []
        for serial in Int64(1)...30 {
            let move = game.move("alice", serial: serial)
            #expect(move.writes.isEmpty, "a move writes nothing")
            #expect(move.commands.count == 1)
            checkpoints += game.advance(by: .milliseconds(100)).games
        }
        // Three seconds of moves, ten a second: three writes, each with the count and window of its moment.
        #expect(checkpoints.map(\.commands) == [10, 20, 30])
        #expect(checkpoints.map { $0.open?.serials.last } == [10, 20, 30])
        #expect(checkpoints.allSatisfy { $0.open?.phase == .playing && $0.endedAt == nil })
        #expect(checkpoints.last?.open?.serials == Array(Int64(1)...30))
        // Nothing new: no checkpoint is due, and none comes.
        #expect(game.state.phase.turn?.checkpointDue == nil)
        #expect(game.advance(by: .seconds(5)).games.isEmpty)
    }

    @Test func aCheckpointIsDueASecondAfterTheLastWriteOfTheOpenGame() throws {
        var game = PureGame()
        try game.play("alice")
        game.ackCoin()
        let started = game.now.uptime
        game.advance(by: .seconds(3))
        game.move("alice", serial: 1)
        // The accept wrote the open game 3 s ago: the move is due on disk at once.
        #expect(game.state.phase.turn?.checkpointDue == started + .seconds(1))
        #expect(game.state.nextDeadline() == started + .seconds(1), "the deadlines wake the machine for it")
        let written = game.advance(by: .zero).games
        #expect(written.map(\.commands) == [1])
        game.move("alice", serial: 2)
        #expect(game.state.nextDeadline() == game.now.uptime + .seconds(1))
        #expect(game.advance(by: .milliseconds(999)).games.isEmpty)
        #expect(game.advance(by: .milliseconds(1)).games.map(\.commands) == [2])
        // A phase change writes the count itself: no checkpoint after it.
        game.send("alice", #"{"command":2,"serial":3}"#)
        #expect(game.state.phase.turn?.checkpointDue == nil)
    }

    @Test func theWindowIsReadBackWithTheGameAndKeepsItsNewest() throws {
        var window = SerialWindow()
        for serial in Int64(1)...300 { window.insert(serial) }
        #expect(window.inOrder == Array(Int64(45)...300), "the newest 256, oldest first")
        let restored = SerialWindow(window.inOrder)
        #expect(restored.inOrder == window.inOrder && restored.contains(45) && !restored.contains(44))
        #expect(SerialWindow([3, 3, 7]).inOrder == [3, 7])
        #expect(GameStore.serials(GameStore.serialsText([5, -2, 9_007_199_254_740_993])) == [5, -2, 9_007_199_254_740_993])
        #expect(GameStore.serials("1,x,,3") == [1, 3] && GameStore.serials(nil).isEmpty)
    }
}

/// The same across a crash, on a real machine and SQLite file: the file as
/// the gateway left it while running (the database and its WAL, copied
/// aside: what `kill -9` leaves), taken up by a new machine.
@Suite struct CheckpointRestartTests {
    /// Copies `first`'s file as it is now, as a crash would leave it, and starts a gateway on it.
    private func crash(_ first: GameHarness) throws -> GameHarness {
        let crashed = try TemporaryDirectory.make(prefix: "crashed")
        let from = GameHarness.databasePath(in: first.directory)
        let to = GameHarness.databasePath(in: crashed)
        for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: from + suffix) {
            try FileManager.default.copyItem(atPath: from + suffix, toPath: to + suffix)
        }
        return try GameHarness(directory: crashed, sessions: "t-", startingAt: first.wallNow)
    }

    @Test func aKilledGatewayKeepsTheCountAndTheSerialsOfTheMovesUpToItsLastSecond() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        await first.ack(try #require(first.commands.last { $0.code == .addCoins }?.serial))
        for serial in 1...5 {
            #expect(await first.send("alice", #"{"command":1,"data":"left","serial":\#(serial)}"#).rejectedCode == nil)
            await first.advance(by: .milliseconds(300))
        }
        // 1.5 s of moves: the first four are on disk (the checkpoint at 1.2 s), the fifth not yet.
        #expect(try first.games().first?.commands == 4)
        await first.advance(by: .milliseconds(700))
        #expect(try first.games().first?.commands == 5, "within a second of the last move")
        #expect(await first.send("alice", #"{"command":1,"data":"up","serial":6}"#).rejectedCode == nil)

        let second = try crash(first)
        await second.presence(.online)
        #expect(second.events(.restored).map(\.session) == ["s-m1-1"])
        // Copies of the checkpointed moves, delivered again after the restart, are dropped.
        for serial in 1...5 {
            #expect(await second.send("alice", #"{"command":1,"data":"left","serial":\#(serial)}"#).rejectedCode == .duplicateSerial)
        }
        #expect(!second.commands.contains { $0.code == .move })
        // The move of the last moment before the crash is the bound: not in the window (docs/RELIABILITY.md).
        #expect(await second.send("alice", #"{"command":1,"data":"up","serial":6}"#).rejectedCode == nil)
        await second.send("alice", #"{"command":2,"serial":7}"#)
        await second.result(true, session: "s-m1-1")
        let record = try #require(try second.games().first { $0.id == "s-m1-1" })
        #expect(record.outcome == .won && record.commands == 7, "five before the crash, the sixth again, the grab")
        await second.stop()
        await first.stop()
    }
}
