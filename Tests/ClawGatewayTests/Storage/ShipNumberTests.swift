import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// The numbers a site's games are shipped under (SPEC §10): given in the
/// transaction that ends a game, once, without gaps, and only by a site of a chain.
@Suite struct ShipNumberTests {
    static func game(_ id: String, ended: Bool, at offset: TimeInterval = 0) -> GameRow {
        let offered = Date(timeIntervalSince1970: 1_764_000_000 + offset)
        return GameRow(
            id: id, machine: "m1", player: "p-\(id)", nick: "P", provider: "netease", offeredAt: offered,
            startedAt: offered.addingTimeInterval(1), endedAt: ended ? offered.addingTimeInterval(20) : nil,
            outcome: ended ? .won : nil, commands: 3)
    }

    @Test func endedGamesAreNumberedOnceInOrderAndOpenOnesNot() async throws {
        let directory = try TemporaryDirectory.make(prefix: "ship")
        let store = try GameStore(path: directory.appendingPathComponent("g.sqlite").path, shipsRecords: true)
        try store.write([.game(Self.game("a", ended: false))])
        #expect(try await store.records(after: 0, limit: 10).isEmpty, "a game still running is not shipped")
        try store.write([.game(Self.game("a", ended: true)), .game(Self.game("b", ended: true, at: 5))])
        // Written again (a retried batch): it keeps its number.
        try store.write([.game(Self.game("a", ended: true))])
        var strong = Self.game("c", ended: true, at: 9)
        strong.strong = true
        try store.write([.game(strong)])
        let records = try await store.records(after: 0, limit: 10)
        #expect(records.map(\.game.strong) == [false, false, true], "the full-power grab travels for the chain's fairness figures")
        #expect(records.map(\.seq) == [1, 2, 3])
        #expect(records.map(\.game.id) == ["a", "b", "c"])
        #expect(records[0].game.outcome == .won && records[0].game.commands == 3)
        #expect(try await store.records(after: 2, limit: 10).map(\.game.id) == ["c"])
        #expect(try await store.records(after: 0, limit: 2).count == 2)
        #expect(try await store.lastRecordNumber() == 3)
    }

    /// SPEC §16: a site's audit entries travel in the games' numbering, one
    /// number each, in the order written; a site that joins a chain ships
    /// the entries it kept before, after its games.
    @Test func auditEntriesAreNumberedWithTheGames() async throws {
        let directory = try TemporaryDirectory.make(prefix: "ship")
        let path = directory.appendingPathComponent("g.sqlite").path
        let alone = try GameStore(path: path)
        let pause = AuditDraft.byTest(.pause).entry(before: .null, after: .null, at: Date())
        try alone.write([.game(Self.game("before", ended: true)), .audit(pause)])
        #expect(try await alone.shipments(of: alone.epoch, after: 0, limit: 10).isEmpty)
        try alone.close()

        let store = try GameStore(path: path, shipsRecords: true)
        let correct = AuditDraft.byTest(.correct, target: "game/m1/a").entry(before: .null, after: .null, at: Date())
        try store.write([.game(Self.game("a", ended: true, at: 5)), .audit(correct)])
        try store.write([.audit(pause), .game(Self.game("b", ended: true, at: 9))])
        let shipped = try await store.shipments(of: store.epoch, after: 0, limit: 10)
        #expect(shipped.map(\.seq) == [1, 2, 3, 4, 5, 6])
        let kinds = shipped.map { record -> String in
            switch record.record {
            case .game(let game): game.id
            case .audit(let entry): entry.action.rawValue
            }
        }
        #expect(kinds == ["before", "pause", "a", "correct", "pause", "b"], "old games, then old entries, then in the order written")
        #expect(try await store.lastRecordNumber() == 6)
        #expect(try await store.shipments(of: store.epoch, after: 4, limit: 1).map(\.seq) == [5])
        // Numbered once: the trail refuses any other change.
        #expect(throws: (any Error).self) { try store.pool.write { db in try db.execute(sql: "UPDATE audit SET ship_seq = 99") } }
    }

    @Test func aSiteWithoutAChainNumbersNothingAndJoiningOneNumbersWhatEndedBefore() async throws {
        let directory = try TemporaryDirectory.make(prefix: "ship")
        let path = directory.appendingPathComponent("g.sqlite").path
        let alone = try GameStore(path: path)
        try alone.write([.game(Self.game("late", ended: true, at: 50)), .game(Self.game("early", ended: true, at: 10))])
        try alone.write([.game(Self.game("open", ended: false, at: 60))])
        #expect(try await alone.records(after: 0, limit: 10).isEmpty)
        try alone.close()

        let joined = try GameStore(path: path, shipsRecords: true)
        #expect(try await joined.records(after: 0, limit: 10).map(\.game.id) == ["early", "late"], "in the order they ended")
        try joined.write([.game(Self.game("open", ended: true, at: 60))])
        #expect(try await joined.records(after: 2, limit: 10).map(\.seq) == [3])
    }

    /// SPEC §14: a chain's record carries its clips' metadata, so a started
    /// game of a machine whose clips are kept is numbered when they are
    /// written; a turn that never started has none to wait for.
    @Test func aGameWhoseClipsAreKeptIsNumberedWithThem() async throws {
        let directory = try TemporaryDirectory.make(prefix: "ship")
        let path = directory.appendingPathComponent("g.sqlite").path
        let store = try GameStore(path: path, shipsRecords: true, clipsFirst: ["m1"])
        var unstarted = Self.game("declined", ended: true)
        unstarted.startedAt = nil
        try store.write([.game(Self.game("played", ended: true, at: 1)), .game(unstarted)])
        #expect(try await store.records(after: 0, limit: 10).map(\.game.id) == ["declined"], "the played game waits for its clips")

        let ended = try #require(Self.game("played", ended: true, at: 1).endedAt)
        try await store.keep([
            EvidenceRow(game: "played", machine: "m1", camera: "1", path: "/e/m1/played-1.mp4", durationSeconds: 23.5, bytes: 10, endedAt: ended),
            EvidenceRow(game: "played", machine: "m1", camera: "2", missing: "the recording was down", endedAt: ended),
        ])
        let records = try await store.records(after: 0, limit: 10)
        #expect(records.map(\.seq) == [1, 2])
        #expect(records[1].game.evidence == [EvidenceClip(camera: "1", path: "/e/m1/played-1.mp4", durationSeconds: 23.5)])
        #expect(records[1].game.evidenceMissing == [EvidenceGap(camera: "2", reason: "the recording was down")])
        #expect(records[0].game.evidence == nil, "a turn that never started has no clips")
        // Written again (a keeper that cut twice): the number stays.
        try await store.keep([EvidenceRow(game: "played", machine: "m1", camera: "1", path: "/e/m1/played-1.mp4", durationSeconds: 23.5, endedAt: ended)])
        #expect(try await store.lastRecordNumber() == 2)

        // A gateway stopped before a game's clips: opened again, the game still
        // waits for them, and the keeper finds it; without evidence it ships at once.
        try store.write([.game(Self.game("stopped", ended: true, at: 30))])
        try store.close()
        let reopened = try GameStore(path: path, shipsRecords: true, clipsFirst: ["m1"])
        #expect(try await reopened.lastRecordNumber() == 2)
        let stoppedEnd = try #require(Self.game("stopped", ended: true, at: 30).endedAt)
        let found = try await reopened.awaitingClips(machines: ["m1"], endedSince: stoppedEnd.addingTimeInterval(-60))
        #expect(found.map(\.game) == ["stopped"] && found.map(\.recent) == [true])
        let later = try await reopened.awaitingClips(machines: ["m1"], endedSince: stoppedEnd.addingTimeInterval(60))
        #expect(later.map(\.game) == ["stopped"] && later.map(\.recent) == [false], "past the ring: shipped without clips")
        try reopened.close()
        let withoutEvidence = try GameStore(path: path, shipsRecords: true)
        #expect(try await withoutEvidence.records(after: 2, limit: 10).map(\.game.id) == ["stopped"])
    }
}
