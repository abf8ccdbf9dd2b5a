import Testing

@testable import ClawGateway

@Suite struct RecentIDsTests {
    @Test func anIdSeenAgainWithinTheWindowIsADuplicateAndAnOlderOneIsNot() {
        let recent = RecentIDs(capacity: 3)
        #expect(recent.insert("a"))
        #expect(!recent.insert("a"))
        #expect(recent.insert("b"))
        #expect(recent.insert("c"))
        #expect(!recent.insert("b"))
        // "d" pushes "a" out of the window of three.
        #expect(recent.insert("d"))
        #expect(recent.insert("a"))
        #expect(!recent.insert("c"))
        #expect(!recent.insert("d"))
    }

    @Test func manyDistinctIdsAreNeverTakenForEachOther() {
        let recent = RecentIDs()
        let fresh = (0..<50_000).filter { recent.insert("3f2b5c1e-\($0)-4a7d-9e10-\($0 * 7919)") }.count
        #expect(fresh == 50_000)
        #expect(!recent.insert("3f2b5c1e-49999-4a7d-9e10-\(49_999 * 7919)"))
    }

    @Test func aDigestDependsOnEveryByteOfTheId() {
        #expect(RecentIDs.Digest("abc") == RecentIDs.Digest("abc"))
        #expect(RecentIDs.Digest("abc") != RecentIDs.Digest("abd"))
        #expect(RecentIDs.Digest("") != RecentIDs.Digest("a"))
    }
}
