import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// The queue, presence, the broker going away, restarts and operator actions.
@Suite struct MachineQueueTests {
    @Test func joinLeaveAndPositions() throws {
        let game = try GameHarness()
        game.join("alice")  // offered at once
        #expect(game.join("bob") == .queued(position: 1, length: 1))
        #expect(game.join("carol") == .queued(position: 2, length: 2))
        #expect(game.players.to("carol").last == WireMessage(.queuePosition, data: "2", length: 2))
        #expect(game.join("bob").rejectedCode == .alreadyQueued)
        #expect(game.join("alice").rejectedCode == .alreadyQueued, "the offered player holds the machine")
        #expect(game.send("bob", #"{"command":7}"#) == .left)
        #expect(game.players.to("carol").last == WireMessage(.queuePosition, data: "1", length: 1))
        #expect(game.send("bob", #"{"command":7,"serial":3}"#).rejectedCode == .notInQueue)
        #expect(game.players.to("bob").last?.serial == 3)
        #expect(game.snapshot.waiting == [WaitingPlayer(accid: "carol", nick: "Carol")])
    }

    @Test func aNicknameIsOptional() throws {
        let game = try GameHarness(online: false)
        game.send("u1", #"{"command":6}"#)
        game.send("u2", #"{"command":6,"data":"  Zoë  "}"#)
        #expect(game.snapshot.waiting.map(\.nick) == ["u1", "Zoë"])
    }

    @Test func aFullQueueRefusesJoins() throws {
        let game = try GameHarness(settings: GameSettings(maxQueue: 2), online: false)
        game.join("a")
        game.join("b")
        #expect(game.join("c").rejectedCode == .queueFull)
        #expect(game.snapshot.length == 2)
    }

    @Test func snapshotsAreRetainedWithIncreasingSeq() throws {
        let game = try GameHarness()
        game.join("alice")
        game.join("bob")
        let snapshots = game.published(on: .queue)
        #expect(snapshots.allSatisfy { $0.retain && $0.qos == .atLeastOnce })
        let seqs = snapshots.compactMap { try? JSONDecoder().decode(QueueSnapshot.self, from: Data($0.payload)).seq }
        #expect(seqs == Array(1...Int64(seqs.count)))
        #expect(game.lastSnapshot == game.snapshot)
        let events = game.events.map(\.seq)
        #expect(events == Array(1...Int64(events.count)))
    }

    @Test func goingOfflineEndsTheGameKeepsTheQueueAndResumes() throws {
        let game = try GameHarness()
        try game.play("alice")
        game.join("bob")
        game.presence(.offline)
        #expect(game.status == .offline)
        #expect(game.lastError(of: "alice") == "machine_offline")
        #expect(try game.games().first?.outcome == .machineOffline)
        #expect(game.send("alice", #"{"command":1,"data":"left","serial":9}"#).rejectedCode == .machineOffline)
        #expect(game.join("carol") == .queued(position: 2, length: 2), "players may still join")
        #expect(game.offer(to: "bob") == nil)
        game.presence(.online)
        #expect(game.offer(to: "bob") != nil)
        #expect(game.snapshot.waiting.map(\.accid) == ["carol"])
    }

    @Test func anOfferedPlayerKeepsTheHeadWhenTheMachineDrops() throws {
        let game = try GameHarness()
        game.join("alice")
        game.join("bob")
        game.presence(.offline)
        #expect(game.snapshot.waiting.map(\.accid) == ["alice", "bob"])
        game.presence(.online)
        #expect(game.snapshot.player?.accid == "alice")
        #expect(game.offer(to: "alice") == "s2")
    }

    @Test func offlineWinsOverTurnErrors() throws {
        let game = try GameHarness(online: false)
        #expect(game.send("nobody", #"{"command":2,"serial":1}"#).rejectedCode == .machineOffline)
        #expect(game.send("nobody", #"{"command":12,"data":"x"}"#).rejectedCode == .machineOffline)
    }

    @Test func whileTheBrokerIsAwayCommandsAreRefusedAtOnce() throws {
        let game = try GameHarness()
        try game.play("alice")
        game.publisher.isConnected = false
        #expect(game.send("alice", #"{"command":1,"data":"left","serial":1}"#).rejectedCode == .gatewayUnavailable)
        #expect(game.lastError(of: "alice") == "gateway_unavailable")
        game.publisher.isConnected = true
        #expect(game.send("alice", #"{"command":1,"data":"left","serial":1}"#).rejectedCode == nil, "the serial was not used up")
        #expect(game.commands.filter { $0.code == .move }.count == 1, "nothing was queued while away")
    }

    @Test func anAcceptWhileTheBrokerIsAwayCanBeRetried() throws {
        let game = try GameHarness()
        game.join("alice")
        game.publisher.isConnected = false
        #expect(game.send("alice", #"{"command":12,"data":"s1"}"#).rejectedCode == .gatewayUnavailable)
        #expect(game.status == .offered)
        game.publisher.isConnected = true
        #expect(game.send("alice", #"{"command":12,"data":"s1"}"#) == .accepted(session: "s1"))
    }

    @Test func leavingDuringTheGameDropsTheClawAndKeepsTheResult() throws {
        let game = try GameHarness()
        try game.play("alice")
        #expect(game.send("alice", #"{"command":7}"#) == .left)
        #expect(game.commands.last?.code == .grab)
        #expect(game.status == .awaitingResult)
        game.result(false)
        #expect(try game.games().first?.outcome == .lost)
    }

    @Test func leavingAnOfferPassesTheTurn() throws {
        let game = try GameHarness()
        game.join("alice")
        game.join("bob")
        #expect(game.send("alice", #"{"command":7}"#) == .left)
        #expect(game.snapshot.player?.accid == "bob")
        #expect(try game.games().first { $0.player == "alice" }?.outcome == .left)
    }

    @Test func pauseKeepsTheQueueAndOffersNoTurn() throws {
        let game = try GameHarness()
        #expect(game.machine.pause())
        game.join("alice")
        #expect(game.status == .idle)
        #expect(game.lastSnapshot?.paused == true)
        #expect(game.machine.resume())
        #expect(game.snapshot.player?.accid == "alice")
        #expect(game.events.map(\.type).contains(.paused))
    }

    @Test func skipAndRemove() throws {
        let game = try GameHarness()
        try game.play("alice")
        game.join("bob")
        game.join("carol")
        #expect(game.machine.remove(player: "carol"))
        #expect(game.machine.skip())
        #expect(try game.games().first { $0.player == "alice" }?.outcome == .skipped)
        #expect(game.snapshot.player?.accid == "bob")
        #expect(game.snapshot.waiting.isEmpty)
        #expect(!game.machine.remove(player: "zed"))
    }
}

/// What survives a restart of the gateway: a new machine on the same file.
@Suite struct MachineRestartTests {
    @Test func queueOrderAndSeqAreRestored() throws {
        let first = try GameHarness(online: false)
        for player in ["a", "b", "c", "d"] { first.join(player) }
        first.send("b", #"{"command":7}"#)
        let seq = first.snapshot.seq
        let second = try GameHarness(online: false, directory: first.directory)
        #expect(second.snapshot.waiting.map(\.accid) == ["a", "c", "d"])
        #expect(second.snapshot.seq == seq)
        second.join("e")
        #expect(second.snapshot.seq > seq)
        #expect(second.players.providers.withLock { $0["a"] } == "test")
    }

    @Test func anOpenOfferGoesBackToTheHeadAndAStartedGameIsClosed() throws {
        let first = try GameHarness()
        try first.play("alice")
        first.join("bob")
        first.join("carol")
        first.send("alice", #"{"command":7}"#)  // claw dropped, result pending
        first.result(true)  // alice done: won; bob offered
        let second = try GameHarness(online: false, directory: first.directory, sessions: "t")
        #expect(second.snapshot.waiting.map(\.accid) == ["bob", "carol"])
        let games = try second.games()
        #expect(games.first { $0.player == "alice" }?.outcome == .won)
        #expect(!games.contains { $0.player == "bob" }, "the undone offer leaves no record")

        second.presence(.online)
        let session = try #require(second.offer(to: "bob"))
        second.send("bob", #"{"command":12,"data":"\#(session)"}"#)
        let third = try GameHarness(online: false, directory: first.directory, sessions: "u")
        #expect(try third.games().first { $0.player == "bob" }?.outcome == .noResult)
        #expect(third.snapshot.waiting.map(\.accid) == ["carol"])
    }

    @Test func pauseSurvivesARestart() throws {
        let first = try GameHarness()
        first.machine.pause()
        let second = try GameHarness(directory: first.directory)
        #expect(second.snapshot.paused)
    }
}
