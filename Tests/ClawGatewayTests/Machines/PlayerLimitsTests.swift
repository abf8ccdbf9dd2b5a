import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// Each player's budget across the gateway, and refusals at most once a second (SPEC §2).
@Suite struct PlayerLimitsTests {
    @Test func aPlayerHasRateNotificationsASecondAndTheRestIsRefusedUntilItRefills() {
        let limits = PlayerLimits(perSecond: 3)
        let now = Duration.seconds(100)
        #expect((0..<3).allSatisfy { _ in limits.admit("alice", now: now) })
        #expect(!limits.admit("alice", now: now))
        #expect(limits.admit("bob", now: now), "one player's flood is not another's")
        #expect(limits.admit("alice", now: now + .milliseconds(340)))
        #expect(!limits.admit("alice", now: now + .milliseconds(340)))
    }

    @Test func aRefusalOfEachCodeAtMostOnceASecond() {
        let limits = PlayerLimits(perSecond: 10)
        let now = Duration.seconds(5)
        #expect(limits.mayRefuse("alice", code: .notYourTurn, now: now))
        #expect(!limits.mayRefuse("alice", code: .notYourTurn, now: now + .milliseconds(999)))
        #expect(limits.mayRefuse("alice", code: .rateLimited, now: now), "another code")
        #expect(limits.mayRefuse("bob", code: .notYourTurn, now: now), "another player")
        #expect(limits.mayRefuse("alice", code: .notYourTurn, now: now + .seconds(1)))
    }

    @Test func memoryIsBoundedWhateverTheNumberOfPlayers() {
        let limits = PlayerLimits(perSecond: 10, capacity: 1_000, stripes: 4)
        for index in 0..<100_000 { _ = limits.admit("p\(index)", now: .seconds(1)) }
        #expect(limits.count <= 1_000)
    }
}

/// The budget at the ingress: before any machine, whatever is sent.
@Suite struct PlayerBudgetTests {
    @Test func aFloodFromOnePlayerIsRefusedBeforeTheMachineAndToldOnceASecond() async throws {
        let game = try await GameHarness.online(settings: GameSettings(maxCommandsPerSecond: 10))
        try await game.play("alice")
        var outcomes: [ErrorCode?] = []
        for serial in 1...30 {
            outcomes.append(await game.send("mallory", #"{"command":1,"data":"left","serial":\#(serial)}"#).rejectedCode)
        }
        #expect(outcomes.prefix(10).allSatisfy { $0 == .notYourTurn })
        #expect(outcomes.dropFirst(10).allSatisfy { $0 == .rateLimited })
        let refusals = game.players.to("mallory").filter { $0.code == .error }.map(\.data)
        #expect(refusals == ["not_your_turn", "rate_limited"], "one refusal of each code in the second")
        #expect(game.events(.dropped).count == 10, "the excess never reached the machine")
        // Bad payloads count against the budget too.
        #expect(await game.send("mallory", "not json").rejectedCode == .rateLimited)
        // Alice plays on.
        #expect(await game.send("alice", #"{"command":1,"data":"up","serial":1}"#).rejectedCode == nil)
        await game.stop()
    }
}
