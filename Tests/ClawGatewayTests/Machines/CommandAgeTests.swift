import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// SPEC §13, "Nothing arrives late": a move, grab or camera switch that
/// took longer than `game.command_max_age` from the IM service's stamp is
/// dropped with `gateway_unavailable`; the other commands are not timed.
@Suite struct CommandAgeTests {
    private func playing() async throws -> GameHarness {
        let game = try await GameHarness.online()
        try await game.play("alice")
        let coin = try #require(game.commands.last { $0.code == .addCoins }?.serial)
        await game.ack(coin)
        return game
    }

    @Test func aCommandOlderThanTheMaxAgeIsDroppedAndThePlayerTold() async throws {
        let game = try await playing()
        let maxAge = game.settings.commandMaxAge
        for (serial, json) in [(1, #"{"command":1,"data":"up","serial":1}"#), (2, #"{"command":3,"data":"1","serial":2}"#), (3, #"{"command":2,"serial":3}"#)] {
            let outcome = await game.send("alice", json, age: maxAge + .milliseconds(1))
            #expect(outcome.rejectedCode == .gatewayUnavailable, "\(json)")
            let told = game.players.to("alice").last { $0.code == .error }
            #expect(told?.data == "gateway_unavailable" && told?.serial == Int64(serial))
            #expect(told?.message?.contains("dropped, not played late") == true)
            // A refusal of the same code within a second is held back.
            await game.advance(by: .seconds(1))
        }
        #expect(!game.commands.contains { $0.code == .move || $0.code == .grab || $0.code == .camera }, "nothing late reaches the PC")
        #expect(game.snapshot.state == .playing, "the game goes on")
        await game.stop()
    }

    @Test func aCommandJustWithinTheMaxAgeIsPlayed() async throws {
        let game = try await playing()
        let outcome = await game.send("alice", #"{"command":1,"data":"up","serial":1}"#, age: game.settings.commandMaxAge)
        #expect(outcome.rejectedCode == nil)
        #expect(game.commands.contains { $0.code == .move })
        // A stamp ahead of the gateway's clock is not late.
        #expect(await game.send("alice", #"{"command":1,"data":"down","serial":2}"#, age: .seconds(-30)).rejectedCode == nil)
        await game.stop()
    }

    @Test func queueCommandsAreNotTimed() async throws {
        let game = try await GameHarness.online()
        let old: Duration = .seconds(60)
        #expect(await game.send("alice", #"{"command":6}"#, age: old).rejectedCode == nil)
        let session = try #require(game.offer(to: "alice"))
        #expect(await game.send("alice", #"{"command":12,"data":"\#(session)"}"#, age: old) == .accepted(session: session))
        await game.stop()
    }
}
