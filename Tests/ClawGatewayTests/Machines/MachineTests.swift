import Foundation
import GRDB
import Protocol
import Testing

@testable import ClawGateway

/// A machine as the daemon runs it: transitions under its lock, effects
/// carried out after it in order, storage through the writer's thread into a
/// real SQLite file. The transitions themselves are tested in
/// MachineStateTests; here, how their effects reach the world.
@Suite struct MachineTests {
    @Test func whatAPlayerIsToldIsDurableBeforeTheyAreTold() async throws {
        let directory = try TemporaryDirectory.make(prefix: "game")
        // A second connection to the file, read at the moment each reply is handed over.
        let reader = try GameStore(path: GameHarness.databasePath(in: directory))
        let seen = Recorder<String>()
        let players = RecordingPlayers { reply in
            let games = (try? reader.gamesNow(machine: "m1", limit: 10, offset: 0)) ?? []
            let queued = (try? reader.queuedNow(machine: "m1")) ?? []
            switch reply.message.code {
            case .turnOffer:
                seen.append("offer \(reply.message.data ?? ""): record \(games.contains { $0.id == reply.message.data })")
            case .queuePosition where reply.message.data != "0":
                seen.append("position of \(reply.to.accid): queued \(queued.contains(reply.to.accid))")
            case .result:
                seen.append("result: recorded \(games.contains { $0.outcome != nil && $0.player == reply.to.accid })")
            default:
                break
            }
        }
        let game = try await GameHarness.online(directory: directory, players: players)
        #expect(await game.join("alice") == .offered(session: "s-m1-1"))
        #expect(await game.join("bob") == .queued(position: 1, length: 1))
        await game.send("alice", #"{"command":12,"data":"s-m1-1"}"#)
        await game.send("alice", #"{"command":2,"serial":1}"#)
        await game.result(true)
        #expect(seen.items == ["offer s-m1-1: record true", "position of bob: queued true", "result: recorded true", "offer s-m1-2: record true"])
        await game.stop()
    }

    @Test func tellingAndTheCoinWaitForTheDiskAndTheMovesAfterTheCoinWaitBehindIt() async throws {
        // The writer is not started: every write stays pending.
        let game = try GameHarness(settings: GameSettings(commandEvents: true), startWriter: false)
        game.arcade.route(MQTTMessage(topic: "claw/m1/state", payload: Array("online".utf8), retain: true))
        let join = game.arcade.handleNow(PlayerNotification(from: "alice", to: "m1", attach: Array(#"{"command":6}"#.utf8), provider: "test"))
        #expect(join.0 == .offered(session: "s-m1-1"))
        #expect(join.1 != nil)
        #expect(game.players.replies.items.isEmpty, "the offer waits for its write")
        #expect(game.published(on: .queue).isEmpty)
        let accept = game.arcade.handleNow(PlayerNotification(from: "alice", to: "m1", attach: Array(#"{"command":12,"data":"s-m1-1"}"#.utf8), provider: "test"))
        #expect(accept.0 == .accepted(session: "s-m1-1"))
        let move = game.arcade.handleNow(PlayerNotification(from: "alice", to: "m1", attach: Array(#"{"command":1,"data":"up","serial":1}"#.utf8), provider: "test"))
        guard case .forwarded = move.0 else {
            Issue.record("the move was not forwarded: \(move.0)")
            return
        }
        #expect(move.1 == nil, "a move writes nothing")
        #expect(game.commands.isEmpty, "the coin waits for the game's start to be durable, the move behind it")
        #expect(game.events.isEmpty, "events keep their order behind the pending writes")

        game.writer.start()
        await game.settle()
        #expect(game.commands.map(\.code) == [.addCoins], "the coin; the move waits for its ack")
        let coin = try #require(game.commands.first?.serial)
        game.arcade.route(MQTTMessage(topic: "claw/m1/ack", payload: Array(#"{"command":5,"serial":\#(coin)}"#.utf8), retain: false))
        await game.settle()
        #expect(game.commands.map(\.code) == [.addCoins, .move], "the coin, then the move")
        #expect(game.events.map(\.type) == [.online, .joined, .offered, .accepted, .command, .ack])
        #expect(game.events.map(\.seq) == Array(1...6))
        #expect(game.offer(to: "alice") == "s-m1-1")
        #expect(try game.games().first?.startedAt != nil)
        await game.stop()
    }

    /// The gateway stops its machines before the writer's last commit: what
    /// that commit makes durable is on disk, and told to no one.
    @Test func aStoppedMachinePublishesAndRepliesNothingWhateverTheWriterCommitsAfter() async throws {
        let game = try GameHarness(startWriter: false)
        game.arcade.route(MQTTMessage(topic: "claw/m1/state", payload: Array("online".utf8), retain: true))
        let join = game.arcade.handleNow(PlayerNotification(from: "alice", to: "m1", attach: Array(#"{"command":6}"#.utf8), provider: "test"))
        #expect(join.0 == .offered(session: "s-m1-1"))
        let ticket = try #require(join.1)
        #expect(game.publisher.publications.items.isEmpty && game.players.replies.items.isEmpty, "all of it waits for the disk")

        game.arcade.stop()
        game.writer.start()
        #expect(await game.writer.waitDurable(ticket, timeout: .seconds(30)))
        #expect(try game.games().map(\.id) == ["s-m1-1"], "the offer is on disk")
        // Whatever else reaches the stopped machine: a player, its PC, its deadlines.
        _ = game.arcade.handleNow(PlayerNotification(from: "bob", to: "m1", attach: Array(#"{"command":6}"#.utf8), provider: "test"))
        _ = game.arcade.handleNow(PlayerNotification(from: "bob", to: "m1", attach: Array("not json".utf8), provider: "test"))
        game.arcade.route(MQTTMessage(topic: "claw/m1/state", payload: Array("offline".utf8), retain: false))
        game.machine.republish(connection: 2)
        await game.clock.advance(by: .seconds(60))
        game.arcade.fireDueDeadlines()
        if let last = game.writer.lastIssued { #expect(await game.writer.waitDurable(last, timeout: .seconds(30))) }
        #expect(await !game.machine.waitTold(ticket, timeout: .seconds(30)), "a stopped machine tells nothing")
        await game.stop()
        #expect(game.publisher.publications.items.isEmpty, "nothing published after the stop")
        #expect(game.players.replies.items.isEmpty, "no one told after the stop")
    }

    @Test func snapshotsAreRetainedAtLeastOnceWithIncreasingSeqAndCommandsAreNot() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        await game.join("bob")
        let snapshots = game.published(on: .queue)
        #expect(snapshots.allSatisfy { $0.retain && $0.qos == .atLeastOnce })
        let seqs = snapshots.compactMap { try? JSONDecoder().decode(QueueSnapshot.self, from: Data($0.payload)).seq }
        #expect(seqs == Array(1...Int64(seqs.count)))
        #expect(game.lastSnapshot == game.snapshot)
        #expect(game.published(on: .control).allSatisfy { $0.qos == .atMostOnce && !$0.retain })
        #expect(game.published(on: .events).allSatisfy { $0.qos == .atMostOnce && !$0.retain })
        #expect(!game.events.contains { $0.type == .command }, "per-command events only with command_events")
        await game.stop()
    }

    @Test func deadlinesFireFromTheArcadesClock() async throws {
        let game = try await GameHarness.online()
        await game.join("alice")
        await game.join("bob")
        await game.advance(by: .seconds(9))
        #expect(game.snapshot.player?.accid == "alice")
        await game.advance(by: .seconds(1))
        #expect(game.snapshot.player?.accid == "bob")
        #expect(try game.games().first { $0.player == "alice" }?.outcome == .expired)
        #expect(game.offer(to: "bob") == "s-m1-2")
        await game.stop()
    }

    @Test func retainedAcksAndResultsAreNeverActedOn() async throws {
        let game = try await GameHarness.online(settings: GameSettings(commandEvents: true))
        try await game.play("alice")
        await game.send("alice", #"{"command":2,"serial":1}"#)
        await game.result(true, retained: true)
        #expect(game.status == .awaitingResult, "a retained result is old news")
        game.arcade.route(MQTTMessage(topic: "claw/m1/ack", payload: Array(#"{"command":5,"serial":1001}"#.utf8), retain: true))
        await game.settle()
        #expect(game.events(.ack).isEmpty)
        await game.result(true)
        #expect(game.status == .idle)
        #expect(try game.games().first?.outcome == .won)
        await game.stop()
    }

    @Test func aStaleResultIsAnEventAndTheCurrentGameGoesOn() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        await game.join("bob")
        await game.send("alice", #"{"command":2,"serial":1}"#)
        await game.advance(by: .seconds(20))
        let bob = try #require(game.offer(to: "bob"))
        await game.send("bob", #"{"command":12,"data":"\#(bob)"}"#)
        await game.result(true, session: "s-m1-1")
        #expect(game.events(.staleResult).first?.session == "s-m1-1")
        #expect(!game.players.to("bob").contains { $0.code == .result })
        #expect(game.snapshot.player?.accid == "bob")
        #expect(game.status == .playing)
        await game.stop()
    }
}

/// SPEC §5: a player is the pair (provider, account), through the whole
/// machine: queue, storage, replies, budget, the operator's removal.
@Suite struct PlayerIdentityTests {
    static let netease = PlayerAddress(accid: "alice", provider: "netease")
    static let generic = PlayerAddress(accid: "alice", provider: "generic")

    @Test func twoAlicesQueueSeparatelyAreRepliedSeparatelyAndSurviveARestart() async throws {
        let first = try await GameHarness.online(settings: GameSettings(maxCommandsPerSecond: 3))
        #expect(await first.send("alice", #"{"command":6}"#, provider: "netease") == .offered(session: "s-m1-1"))
        #expect(await first.send("alice", #"{"command":6}"#, provider: "generic") == .queued(position: 1, length: 1))
        #expect(first.lastSnapshot?.player.map { [$0.accid, $0.provider] } == ["alice", "netease"])
        #expect(first.lastSnapshot?.waiting.map { [$0.accid, $0.provider] } == [["alice", "generic"]])
        let offers = first.players.replies.items.filter { $0.message.code == .turnOffer }.map(\.reply.to)
        #expect(offers == [Self.netease], "the offer is the NetEase alice's alone")
        let positions = first.players.replies.items.filter { $0.message.code == .queuePosition }.map(\.reply.to)
        #expect(positions == [Self.generic])
        // Her own budget: the generic alice spends hers, the NetEase one still accepts.
        for serial in 1...3 { await first.send("alice", #"{"command":1,"data":"up","serial":\#(serial)}"#, provider: "generic") }
        #expect(await first.send("alice", #"{"command":1,"data":"up","serial":9}"#, provider: "generic").rejectedCode == .rateLimited)
        #expect(await first.send("alice", #"{"command":12,"data":"s-m1-1"}"#, provider: "netease") == .accepted(session: "s-m1-1"))
        #expect(first.events(.accepted).first?.provider == "netease")
        #expect(try first.games().first?.provider == "netease")
        await first.stop()

        let second = try GameHarness(directory: first.directory, sessions: "t-")
        #expect(second.snapshot.waiting.map { [$0.accid, $0.provider] } == [["alice", "generic"]], "the durable queue keeps the provider")
        await second.settle()
        #expect(second.snapshot.player.map { [$0.accid, $0.provider] } == ["alice", "netease"], "the game taken up is the NetEase alice's")
        await second.stop()
    }

    @Test func removingAnAccountThatBothProvidersHaveNeedsTheProvider() async throws {
        let game = try await GameHarness.online()
        await game.join("zoe")
        await game.send("alice", #"{"command":6}"#, provider: "netease")
        await game.send("alice", #"{"command":6}"#, provider: "generic")
        #expect(game.machine.remove(accid: "alice", provider: nil, .byTest(.remove)).0 == .ambiguous(["netease", "generic"]))
        #expect(game.machine.remove(accid: "alice", provider: "other", .byTest(.remove)).0 == .notFound)
        #expect(game.machine.remove(accid: "nobody", provider: nil, .byTest(.remove)).0 == .notFound)
        #expect(game.machine.remove(accid: "alice", provider: "generic", .byTest(.remove)).0 == .removed)
        await game.settle()
        #expect(game.snapshot.waiting.map(\.provider) == ["netease"])
        #expect(try game.writer.store.queuedNow(machine: "m1") == ["alice"])
        #expect(game.machine.remove(accid: "alice", provider: nil, .byTest(.remove)).0 == .removed, "one left: no provider needed")
        await game.stop()
    }
}

/// What survives a restart of the gateway: a new machine on the same file.
@Suite struct MachineRestartTests {
    @Test func queueOrderAndSeqAreRestored() async throws {
        let first = try GameHarness()
        for player in ["a", "b", "c", "d"] { await first.join(player) }
        await first.send("b", #"{"command":7}"#)
        let seq = first.snapshot.seq
        await first.stop()
        let second = try GameHarness(directory: first.directory)
        #expect(second.snapshot.waiting.map(\.accid) == ["a", "c", "d"])
        #expect(second.snapshot.seq == seq)
        await second.join("e")
        #expect(second.snapshot.seq > seq)
        await second.stop()
    }

    @Test func todaysGamesAndWinsCarryOnAcrossARestart() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        await first.send("alice", #"{"command":2,"serial":1}"#)
        await first.result(true)
        try await first.play("bob")
        await first.send("bob", #"{"command":2,"serial":1}"#)
        await first.result(false)
        await first.join("carol")
        await first.send("carol", #"{"command":13,"data":"\#(first.offer(to: "carol") ?? "")"}"#)  // declined: no game
        let before = first.machine.takeStats(at: first.gameClock.moment(), interval: .seconds(3))
        #expect(before.gamesToday == 2 && before.winsToday == 1)
        await first.stop()

        let second = try GameHarness(directory: first.directory, sessions: "t-")
        let after = second.machine.takeStats(at: second.gameClock.moment(), interval: .seconds(3))
        #expect(after.gamesToday == 2, "read back from storage")
        #expect(after.winsToday == 1)
        await second.stop()
    }

    /// Starts a gateway again on `first`'s file, `after` its stop on the wall clock.
    private func restart(_ first: GameHarness, after: Duration = .zero, settings: GameSettings = GameSettings()) throws -> GameHarness {
        try GameHarness(
            settings: settings, directory: first.directory, sessions: "t-", startingAt: first.wallNow.addingTimeInterval(after.seconds))
    }

    private func coin(_ game: GameHarness) throws -> Int64 {
        try #require(game.commands.last { $0.code == .addCoins }?.serial)
    }

    /// SPEC §13: an offer open when the gateway stopped is offered again at
    /// start, same session, with the time it has left; accepting it plays.
    @Test func anOfferOpenAtAStopIsOfferedAgainWithTheTimeLeft() async throws {
        let first = try await GameHarness.online()
        #expect(await first.join("alice") == .offered(session: "s-m1-1"))
        await first.join("bob")
        await first.advance(by: .seconds(4))
        await first.stop()

        let second = try restart(first, after: .seconds(1))
        await second.settle()
        let offer = try #require(second.players.to("alice").last { $0.code == .turnOffer })
        #expect(offer.data == "s-m1-1" && offer.timeout == 5, "10 s, less 4 before the stop and 1 away")
        #expect(second.events(.restored).map(\.data) == ["offered"])
        #expect(second.snapshot.player?.session == "s-m1-1" && second.snapshot.waiting.map(\.accid) == ["bob"])
        #expect(try second.games().first { $0.id == "s-m1-1" }?.endedAt == nil, "the record stays open")
        await second.presence(.online)
        #expect(await second.send("alice", #"{"command":12,"data":"s-m1-1"}"#) == .accepted(session: "s-m1-1"))
        #expect(second.commands.last?.code == .addCoins)
        await second.stop()
    }

    @Test func anOfferWhoseDeadlinePassedWhileAwayExpiresAtOnceAndTheNextIsOffered() async throws {
        let first = try await GameHarness.online()
        #expect(await first.join("alice") == .offered(session: "s-m1-1"))
        await first.join("bob")
        await first.stop()

        let second = try restart(first, after: .seconds(11))
        await second.settle()
        await second.advance(by: .zero)
        #expect(second.lastError(of: "alice") == "offer_expired", "told, though the machine is not online yet")
        #expect(second.offer(to: "alice") == nil, "not offered again")
        #expect(try second.games().first { $0.id == "s-m1-1" }?.outcome == .expired)
        await second.presence(.online)
        #expect(second.offer(to: "bob") == "t-m1-1")
        await second.stop()
    }

    /// SPEC §13: a game playing when the gateway stopped goes on once its
    /// PC says `online`, with the time it had left, and its result is the
    /// game's.
    @Test func aGamePlayingAtAStopGoesOnWithTheTimeItHadLeft() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        await first.ack(try coin(first))
        await first.send("alice", #"{"command":1,"data":"up","serial":1}"#)
        await first.join("bob")
        await first.advance(by: .seconds(10))
        await first.stop()

        let second = try restart(first, after: .seconds(5))
        await second.settle()
        #expect(second.events(.restored).map(\.data) == ["playing"])
        #expect(second.snapshot.player?.session == "s-m1-1")
        #expect(!second.players.to("alice").contains { $0.code == .error }, "nothing ends, nobody is told anything bad")
        await second.presence(.online)
        #expect(second.events(.reconnected).map(\.session) == ["s-m1-1"])
        #expect(await second.send("alice", #"{"command":1,"data":"left","serial":2}"#).rejectedCode == nil)
        #expect(second.commands.last?.code == .move, "its moves go out: the coin was acked before the stop")
        await second.advance(by: .seconds(15) - .milliseconds(1))
        #expect(second.snapshot.state == .playing, "30 s, less 10 played and 5 away")
        await second.advance(by: .milliseconds(1))
        #expect(second.events(.autoGrab).map(\.session) == ["s-m1-1"])
        await second.result(true, session: "s-m1-1")
        let record = try #require(try second.games().first { $0.id == "s-m1-1" })
        #expect(record.outcome == .won && record.commands == 3, "the move before the stop, the one after, the grab")
        #expect(second.players.to("alice").contains { $0.code == .result && $0.data == "true" })
        #expect(second.offer(to: "bob") == "t-m1-1")
        await second.stop()
    }

    /// SPEC §13: the result the PC published while the gateway was away
    /// comes from the broker's session when it is back: the game is won.
    @Test func aResultThatCameWhileAwayEndsTheGameTakenUp() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        await first.ack(try coin(first))
        await first.send("alice", #"{"command":2,"serial":1}"#)
        await first.join("bob")
        await first.stop()

        let second = try restart(first, after: .seconds(3))
        await second.settle()
        #expect(second.events(.restored).map(\.data) == ["awaiting_result"])
        await second.result(true, session: "s-m1-1")
        #expect(try second.games().first { $0.id == "s-m1-1" }?.outcome == .won)
        #expect(second.players.to("alice").contains { $0.code == .result })
        await second.presence(.online)
        #expect(second.offer(to: "bob") == "t-m1-1")
        await second.stop()
    }

    @Test func aResultTimerThatRanOutWhileAwayEndsNoResultOnceThePCIsBack() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        await first.ack(try coin(first))
        await first.send("alice", #"{"command":2,"serial":1}"#)
        await first.stop()

        let second = try restart(first, after: .seconds(30))
        await second.presence(.online)
        await second.advance(by: .zero)
        #expect(try second.games().first { $0.id == "s-m1-1" }?.outcome == .noResult)
        #expect(second.lastError(of: "alice") == "no_result")
        await second.stop()
    }

    /// A coin not acked at the stop waits for its ack again: the broker's
    /// session brings it, and the game's moves go out after it.
    @Test func aCoinUnackedAtAStopIsWaitedForAgain() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        let serial = try coin(first)
        await first.stop()

        let second = try restart(first)
        await second.presence(.online)
        #expect(await second.send("alice", #"{"command":1,"data":"up","serial":1}"#).rejectedCode == nil)
        #expect(!second.commands.contains { $0.code == .move }, "the move waits for the coin's ack")
        await second.ack(serial)
        #expect(second.commands.contains { $0.code == .move })
        #expect(second.snapshot.state == .playing)
        await second.stop()

        let third = try restart(second)
        await third.presence(.online)
        await third.advance(by: third.settings.ackTimeout)
        #expect(third.snapshot.state == .playing, "acked before this stop: not waited for again")
        await third.stop()
    }

    @Test func aCoinNeverAckedEndsTheGameTakenUpAfterAckTimeout() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        await first.stop()

        let second = try restart(first)
        await second.presence(.online)
        await second.advance(by: second.settings.ackTimeout)
        #expect(try second.games().first { $0.id == "s-m1-1" }?.outcome == .machineOffline)
        #expect(second.events(.gameEnded).last?.reason == "coin_not_acked")
        await second.stop()
    }

    /// A PC that does not come back after the restart: the game ends
    /// `machine_offline` once the grace has run out, as after any drop.
    @Test func aGameTakenUpWhosePCNeverSaysOnlineEndsMachineOffline() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        await first.ack(try coin(first))
        await first.stop()

        let second = try restart(first)
        await second.advance(by: second.settings.offlineGrace)
        #expect(try second.games().first { $0.id == "s-m1-1" }?.outcome == .machineOffline)
        #expect(second.lastError(of: "alice") == "machine_offline")
        await second.stop()
    }

    /// A crash: the file as the gateway left it while running, copied
    /// aside (the database and its WAL: what a `kill -9` leaves behind).
    @Test func aTurnOpenAtACrashIsTakenUpTheSameWay() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        await first.ack(try coin(first))
        await first.join("bob")
        let crashed = try TemporaryDirectory.make(prefix: "crashed")
        let from = GameHarness.databasePath(in: first.directory)
        let to = GameHarness.databasePath(in: crashed)
        for suffix in ["", "-wal"] where FileManager.default.fileExists(atPath: from + suffix) {
            try FileManager.default.copyItem(atPath: from + suffix, toPath: to + suffix)
        }

        let second = try GameHarness(directory: crashed, sessions: "t-", startingAt: first.wallNow)
        await second.presence(.online)
        #expect(second.events(.restored).map(\.session) == ["s-m1-1"])
        await second.result(false, session: "s-m1-1")
        #expect(try second.games().first { $0.id == "s-m1-1" }?.outcome == .lost)
        #expect(second.offer(to: "bob") == "t-m1-1")
        await second.stop()
        await first.stop()
    }

    /// A file of a gateway from before games were taken up: its open turns
    /// have no phase or deadline and are closed at start, as they were then.
    @Test func aTurnOpenInAnOlderFileIsClosedAndItsPlayerTold() async throws {
        let first = try await GameHarness.online()
        try await first.play("alice")
        await first.join("bob")
        await first.stop()
        let file = try DatabaseQueue(path: GameHarness.databasePath(in: first.directory))
        try await file.write { db in
            try db.execute(sql: "UPDATE games SET phase = NULL, deadline_at = NULL, coin_serial = NULL")
        }
        try file.close()

        let second = try restart(first)
        await second.settle()
        #expect(second.lastError(of: "alice") == "no_result")
        #expect(try second.games().first { $0.id == "s-m1-1" }?.outcome == .noResult)
        #expect(second.events(.restored).isEmpty)
        await second.presence(.online)
        #expect(second.offer(to: "bob") == "t-m1-1")
        await second.result(true, session: "s-m1-1")
        #expect(second.events(.staleResult).map(\.session) == ["s-m1-1"], "its late result is told to no one")
        await second.stop()
    }

    @Test func pauseSurvivesARestart() async throws {
        let first = try await GameHarness.online()
        _ = first.machine.pause(.byTest(.pause))
        await first.settle()
        await first.stop()
        let second = try GameHarness(directory: first.directory)
        #expect(second.snapshot.paused)
        await second.stop()
    }
}
