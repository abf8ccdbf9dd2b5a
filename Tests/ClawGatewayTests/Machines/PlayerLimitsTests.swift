import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// Each player's budget across the gateway, and refusals at most once a second (SPEC §2).
@Suite struct PlayerLimitsTests {
    static let alice = PlayerAddress(accid: "alice", provider: "netease")
    static let bob = PlayerAddress(accid: "bob", provider: "netease")

    /// A player is the pair (SPEC §5): the same account on another provider has its own budget.
    @Test func theSameAccountOnAnotherProviderHasItsOwnBudgetAndRefusals() {
        let limits = PlayerLimits(perSecond: 2)
        let now = Duration.seconds(7)
        let otherAlice = PlayerAddress(accid: "alice", provider: "generic")
        #expect(limits.admit(Self.alice, now: now) && limits.admit(Self.alice, now: now))
        #expect(!limits.admit(Self.alice, now: now))
        #expect(limits.admit(otherAlice, now: now), "not the NetEase alice's budget")
        #expect(limits.mayRefuse(Self.alice, code: .rateLimited, now: now))
        #expect(limits.mayRefuse(otherAlice, code: .rateLimited, now: now), "nor her refusals")
    }

    @Test func aPlayerHasRateNotificationsASecondAndTheRestIsRefusedUntilItRefills() {
        let limits = PlayerLimits(perSecond: 3)
        let now = Duration.seconds(100)
        #expect((0..<3).allSatisfy { _ in limits.admit(Self.alice, now: now) })
        #expect(!limits.admit(Self.alice, now: now))
        #expect(limits.admit(Self.bob, now: now), "one player's flood is not another's")
        #expect(limits.admit(Self.alice, now: now + .milliseconds(340)))
        #expect(!limits.admit(Self.alice, now: now + .milliseconds(340)))
    }

    @Test func aRefusalOfEachCodeAtMostOnceASecond() {
        let limits = PlayerLimits(perSecond: 10)
        let now = Duration.seconds(5)
        #expect(limits.mayRefuse(Self.alice, code: .notYourTurn, now: now))
        #expect(!limits.mayRefuse(Self.alice, code: .notYourTurn, now: now + .milliseconds(999)))
        #expect(limits.mayRefuse(Self.alice, code: .rateLimited, now: now), "another code")
        #expect(limits.mayRefuse(Self.bob, code: .notYourTurn, now: now), "another player")
        #expect(limits.mayRefuse(Self.alice, code: .notYourTurn, now: now + .seconds(1)))
    }

    @Test func memoryIsBoundedWhateverTheNumberOfPlayers() {
        let limits = PlayerLimits(perSecond: 10, capacity: 1_000, stripes: 4)
        for index in 0..<100_000 { _ = limits.admit(PlayerAddress(accid: "p\(index)", provider: "netease"), now: .seconds(1)) }
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
