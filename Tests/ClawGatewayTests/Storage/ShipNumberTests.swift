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
        try store.write([.game(Self.game("c", ended: true, at: 9))])
        let records = try await store.records(after: 0, limit: 10)
        #expect(records.map(\.seq) == [1, 2, 3])
        #expect(records.map(\.game.id) == ["a", "b", "c"])
        #expect(records[0].game.outcome == .won && records[0].game.commands == 3)
        #expect(try await store.records(after: 2, limit: 10).map(\.game.id) == ["c"])
        #expect(try await store.records(after: 0, limit: 2).count == 2)
        #expect(try await store.lastRecordNumber() == 3)
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
}
