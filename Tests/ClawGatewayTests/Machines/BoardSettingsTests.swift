import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// What a machine's mainboard takes with every coin (SPEC §12): from the
/// file, in the coin, and the full-power grab after `guarantee_after` lost
/// games.
@Suite struct BoardSettingsTests {
    @Test func theCoinCarriesTheSettingsAsTheSpecWritesThem() throws {
        let coin = WireMessage(.addCoins, data: "1", serial: 7, session: "s1", settings: .defaults)
        #expect(
            coin.encodedString()
                == #"{"command":1001,"data":"1","serial":7,"session":"s1","settings":{"game_time":30,"claw":{"grab":30,"top":20,"move":10,"max":48},"lift_height":5,"strong":false}}"#)
        var strong = BoardSettings.defaults
        strong.strong = true
        struct Coin: Decodable { var settings: BoardSettings }
        let decoded = try JSONDecoder().decode(Coin.self, from: Data(WireMessage(.addCoins, settings: strong).encoded()))
        #expect(decoded.settings == strong, "the object is the Codable shape")
    }

    /// Lost, lost: the third coin is the full-power grab; a win starts the count again.
    @Test func afterGuaranteeAfterLostGamesTheNextCoinIsTheFullPowerGrab() throws {
        var machine = PureGame.machine
        machine.settings.guaranteeAfter = 2
        var game = PureGame(machine: machine)
        func coin() throws -> Bool {
            let session = try #require(game.join("alice").offer(to: "alice")?.data)
            let accept = game.send("alice", #"{"command":12,"data":"\#(session)"}"#)
            return try #require(accept.commands.first?.message.settings).strong
        }
        var strong: [Bool] = []
        for won in [false, false, false, true, false] {
            strong.append(try coin())
            game.ackCoin()
            game.result(won)
        }
        strong.append(try coin())
        #expect(strong == [false, false, true, true, false, false])
        #expect(game.state.lostInARow == 1)
    }

    @Test func theCountOutlivesARestart() throws {
        let directory = try TemporaryDirectory.make(prefix: "game")
        let store = try GameStore(path: GameHarness.databasePath(in: directory))
        func game(_ id: String, _ outcome: GameOutcome, at second: TimeInterval) -> StoreChange {
            let at = Date(timeIntervalSince1970: 1_795_000_000 + second)
            return .game(
                GameRow(
                    id: id, machine: "m1", player: "p", nick: "p", provider: "test", offeredAt: at, startedAt: at, endedAt: at,
                    outcome: outcome, commands: 1))
        }
        try store.write([
            game("a", .lost, at: 1), game("b", .won, at: 2), game("c", .lost, at: 3), game("d", .noResult, at: 4),
            game("e", .lost, at: 5),
        ])
        #expect(try store.restore(machine: "m1").lostInARow == 2, "lost since the last win; a game with no result is no loss")
        #expect(try store.restore(machine: "m2").lostInARow == 0)
    }
}
