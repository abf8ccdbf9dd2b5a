import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// What a reload does to the machines (SPEC §13), on the test clock: no
/// game ends because of it. The signal and the file: `ReloadEndToEndTests`.
@Suite struct ReloadTests {
    static let online = MQTTMessage(topic: "claw/m2/state", payload: Array("online".utf8), retain: true)

    /// Acks the last coin the PC was sent: the game is under way.
    static func ackCoin(_ game: GameHarness) async throws {
        let coin = try #require(game.commands.last { $0.code == .addCoins }?.serial)
        await game.ack(coin)
    }

    static func config(_ settings: GameSettings = GameSettings(), _ edit: (inout [MachineConfig]) -> Void = { _ in }) -> GatewayConfig {
        var config = GameHarness.config(settings: settings)
        edit(&config.machines)
        return config
    }

    static let m2 = MachineConfig(id: "m2", name: "Eevee", imAccount: "claw_m2", cameras: [CameraConfig(id: "1")])

    @Test func timersChangeFromTheNextTurnNamesAndCamerasAtOnce() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        try await Self.ackCoin(game)
        await game.join("bob")
        let deadline = try #require(game.snapshot.player?.deadline)

        let change = try game.arcade.reload(
            Self.config(GameSettings(playTimeout: .seconds(5))) { machines in
                machines[0].name = "Raichu"
                machines[0].cameras.append(CameraConfig(id: "3"))
            })
        #expect(change == Arcade.Change(changed: ["m1"]))
        #expect(game.snapshot.player?.deadline == deadline, "alice keeps the 30 s she was given")
        #expect(game.machine.config.name == "Raichu")
        let camera = await game.send("alice", #"{"command":3,"data":"3","serial":1}"#)
        #expect(camera.rejectedCode == nil, "camera 3 is the machine's at once: \(camera)")

        await game.advance(by: .seconds(29))
        #expect(game.status == .playing, "the old play timer still runs")
        await game.advance(by: .seconds(1))
        #expect(game.status == .awaitingResult)
        await game.result(false)

        let session = try #require(game.offer(to: "bob"))
        #expect(await game.send("bob", #"{"command":12,"data":"\#(session)"}"#) == .accepted(session: session))
        try await Self.ackCoin(game)
        await game.advance(by: .seconds(4))
        #expect(game.status == .playing)
        await game.advance(by: .seconds(1))
        #expect(game.status == .awaitingResult, "bob's turn has the new 5 s")
        #expect(try game.games().map(\.outcome).contains(.lost), "no game ended but by its result")
        await game.stop()
    }

    @Test func aRemovedMachineFinishesItsGameTellsItsQueueAndLeaves() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        try await Self.ackCoin(game)
        await game.join("bob")

        let change = try game.arcade.reload(Self.config { $0 = [Self.m2] })
        #expect(change == Arcade.Change(added: ["m2"], removed: ["m1"]))
        await game.settle()
        #expect(game.lastError(of: "bob") == ErrorCode.unknownMachine.rawValue, "the waiting are told at once")
        #expect(game.snapshot.waiting.isEmpty)
        #expect(try game.writer.store.queuedNow(machine: "m1").isEmpty, "and leave the stored queue")
        #expect(await game.join("carol").rejectedCode == .unknownMachine, "nobody joins")
        #expect(game.lastError(of: "carol") == ErrorCode.unknownMachine.rawValue)

        // Alice plays on to her result.
        let grab = await game.send("alice", #"{"command":2,"serial":1}"#)
        guard case .forwarded = grab else {
            Issue.record("alice's grab after the reload: \(grab)")
            return
        }
        #expect(game.arcade.machine("m1") === game.machine, "m1 stays while its game goes on")
        await game.result(true)
        #expect(try game.games().first { $0.player == "alice" }?.outcome == .won)
        #expect(game.players.to("alice").contains { $0.code == .result })

        // Then it is gone: out of the arcade, its retained snapshot cleared, no turn offered.
        #expect(game.arcade.machine("m1") == nil && game.arcade.machine("claw_m1") == nil)
        #expect(game.arcade.machines.map(\.id) == ["m2"])
        let last = try #require(game.published(on: .queue).last)
        #expect(last.payload.isEmpty && last.retain)
        var departures = game.arcade.departures.makeAsyncIterator()
        #expect(await departures.next()?.id == "m1")
        #expect(game.offer(to: "bob") == nil)
        #expect(try game.games().count == 1, "its games stay in storage")

        // The new machine plays.
        game.arcade.route(Self.online)
        #expect(await game.send("dave", #"{"command":6}"#, to: "claw_m2") == .offered(session: "s-m2-1"))
        await game.stop()
    }

    @Test func aFreeMachineLeavesAtOnceAndComesBackOnlyOnceGone() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        try await Self.ackCoin(game)

        #expect(try game.arcade.reload(Self.config { $0 = [] }) == Arcade.Change(removed: ["m1"]))
        #expect(
            try game.arcade.reload(Self.config()) == Arcade.Change(stillLeaving: ["m1"]),
            "put back while its last game goes on: it stays out")
        await game.send("alice", #"{"command":2,"serial":1}"#)
        await game.result(false)
        #expect(game.arcade.machine("m1") == nil)

        #expect(try game.arcade.reload(Self.config()) == Arcade.Change(added: ["m1"]))
        let back = try #require(game.arcade.machine("m1"))
        #expect(back !== game.machine && back.index == 1, "a new machine, in a new place")
        #expect(back.currentSnapshot().waiting.isEmpty)

        // An idle machine taken out is gone in the same breath.
        #expect(try game.arcade.reload(Self.config { $0 = [] }) == Arcade.Change(removed: ["m1"]))
        #expect(game.arcade.machines.isEmpty)
        await game.stop()
    }

    @Test func theSameFileChangesNothing() async throws {
        let game = try await GameHarness.online()
        try await game.play("alice")
        let before = game.published(on: .queue).count
        #expect(try game.arcade.reload(Self.config()).isEmpty)
        await game.settle()
        #expect(game.published(on: .queue).count == before)
        await game.stop()
    }

    /// The gateway killed while a removed machine finished its last game,
    /// then started without it: the game does not stay open for ever.
    @Test func aGameOpenOnAMachineNoLongerInTheConfigIsClosedAtStart() async throws {
        let directory = try TemporaryDirectory.make(prefix: "game")
        let store = try GameStore(path: GameHarness.databasePath(in: directory))
        let at = GameHarness.epoch
        try store.write([
            .game(GameRow(id: "old-1", machine: "m9", player: "zoe", nick: "Zoe", provider: "test", offeredAt: at, startedAt: at, endedAt: nil, outcome: nil, commands: 3)),
            .game(GameRow(id: "old-2", machine: "m9", player: "yan", nick: "Yan", provider: "test", offeredAt: at, startedAt: nil, endedAt: nil, outcome: nil, commands: 0)),
        ])
        let game = try GameHarness(directory: directory, startingAt: at.addingTimeInterval(60))
        await game.settle()
        if let last = game.writer.lastIssued { #expect(await game.writer.waitDurable(last, timeout: .seconds(30))) }
        let games = try store.gamesNow(machine: "m9", limit: 10, offset: 0)
        #expect(games.first { $0.id == "old-1" }?.outcome == .noResult, "started: no result")
        #expect(games.first { $0.id == "old-2" }?.outcome == .expired, "offered: expired")
        #expect(games.allSatisfy { $0.endedAt != nil })
        await game.stop()
    }
}
