import Clocks
import Foundation
import Synchronization
import Testing

@testable import ClawGateway

/// The arcade's one owner of time, on a test clock: what is due fires, an
/// earlier deadline wakes the loop, and nothing fires once it has stopped.
@Suite struct DeadlinesTests {
    @Test func dueEntriesAreTakenEarliestFirstAndOncePerMachine() {
        let deadlines = Deadlines()
        deadlines.schedule(2, at: .seconds(30))
        deadlines.schedule(1, at: .seconds(10))
        deadlines.schedule(1, at: .seconds(20))
        deadlines.schedule(0, at: .seconds(40))
        #expect(deadlines.next == .seconds(10))
        #expect(deadlines.takeDue(now: .seconds(5)).isEmpty)
        #expect(deadlines.takeDue(now: .seconds(30)) == [1, 2])
        #expect(deadlines.next == .seconds(40))
    }

    @Test func theLoopFiresAtTheDeadlineAndWakesForAnEarlierOne() async throws {
        let clock = TestClock<Duration>()
        let gameClock = GameClock.following(clock, from: Date(timeIntervalSince1970: 0))
        let deadlines = Deadlines()
        let fired = Recorder<Int>()
        let loop = Task { await deadlines.run(clock: gameClock) { fired.append($0) } }
        deadlines.schedule(1, at: .seconds(10))
        await clock.advance(by: .seconds(9))
        #expect(fired.items.isEmpty)
        await clock.advance(by: .seconds(1))
        try await eventually("machine 1 to fire") { fired.items == [1] }

        // The loop sleeps until 60 s; a deadline at 15 s must wake it.
        deadlines.schedule(2, at: .seconds(60))
        deadlines.schedule(3, at: .seconds(15))
        await clock.advance(by: .seconds(5))
        try await eventually("machine 3 to fire") { fired.items == [1, 3] }
        loop.cancel()
        await loop.value

        // Stopped: nothing fires any more, whatever the clock says.
        await clock.advance(by: .seconds(100))
        #expect(fired.items == [1, 3])
    }

    @Test func aLoopWithNothingScheduledWaitsForTheFirstDeadline() async throws {
        let clock = TestClock<Duration>()
        let deadlines = Deadlines()
        let fired = Recorder<Int>()
        let loop = Task { await deadlines.run(clock: .following(clock, from: Date())) { fired.append($0) } }
        deadlines.schedule(7, at: .zero)
        try await eventually("a deadline already due to fire") { fired.items == [7] }
        loop.cancel()
        await loop.value
    }
}
