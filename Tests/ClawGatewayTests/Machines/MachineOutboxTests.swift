import Logging
import Protocol
import Testing

@testable import ClawGateway

extension MachineOutbox {
    /// With no coin awaiting its ack.
    fileprivate mutating func takeReady(isDurable: (StorageWriter.Ticket) -> Bool) -> Work {
        takeReady(isDurable: isDurable, awaitingCoin: nil, current: nil)
    }
}

/// The outbox's two lanes, with tickets of a writer that is never started:
/// which is durable is what each test says.
@Suite struct MachineOutboxTests {
    private let writer: StorageWriter

    init() throws {
        let directory = try TemporaryDirectory.make(prefix: "outbox")
        writer = StorageWriter(store: try GameStore(path: GameHarness.databasePath(in: directory)), logger: Logger(label: "test"))
    }

    private func ticket() -> StorageWriter.Ticket {
        writer.submit([.meta(machine: "m1", snapshotSeq: 1, paused: false)], machine: 0)
    }

    private func command(_ code: CommandCode, _ serial: Int64, session: String = "s1") -> MachineEffect {
        .command(WireMessage(code, data: code == .move ? "up" : "1", serial: serial, session: session, player: "alice"), camera: false)
    }

    private func event(_ seq: Int64) -> MachineEffect {
        .event(GameEvent(type: .accepted, seq: seq, ts: "t", machine: "m1"))
    }

    private func serials(_ work: MachineOutbox.Work) -> [Int64] { work.commands.compactMap(\.0.serial) }

    @Test func aCoinWaitsForItsTransitionsWritesAndTheMovesAfterItWaitBehindIt() {
        var outbox = MachineOutbox()
        let accept = ticket()
        outbox.append([command(.addCoins, 1), event(1)], ticket: accept)
        outbox.append([command(.move, 2), event(2)], ticket: nil)
        outbox.append([.command(WireMessage(.camera, data: "2", serial: 3, session: "s1", player: "alice"), camera: true)], ticket: nil)
        #expect(!outbox.hasReady { _ in false })
        #expect(outbox.takeReady { _ in false }.isEmpty, "no coin, and no move, before the game's start is durable")

        #expect(outbox.hasReady { $0 <= accept })
        let work = outbox.takeReady { $0 <= accept }
        #expect(serials(work) == [1, 2, 3], "the coin, then the commands in the order decided")
        #expect(work.commands.map(\.camera) == [false, false, true])
        #expect(work.tells.count == 2)
        #expect(outbox.isTold(through: accept))

        // Nothing waits any more: the next move goes out at once.
        outbox.append([command(.move, 4)], ticket: nil)
        #expect(serials(outbox.takeReady { _ in false }) == [4])
    }

    @Test func withoutACoinWaitingAMoveNeverWaitsOnTheDisk() {
        var outbox = MachineOutbox()
        let offer = ticket()
        outbox.append([event(1)], ticket: offer)
        outbox.append([command(.move, 1), event(2)], ticket: ticket())
        let work = outbox.takeReady { _ in false }
        #expect(serials(work) == [1], "the move goes out while what tells waits")
        #expect(work.tells.isEmpty)
        #expect(outbox.takeReady { _ in true }.tells.count == 2)
    }

    @Test func theCommandsOfAGameThatEndedBehindItsCoinAreForgotten() {
        var outbox = MachineOutbox()
        outbox.append([command(.addCoins, 1)], ticket: ticket())
        outbox.append([command(.move, 2)], ticket: nil)
        outbox.append([command(.move, 3, session: "s2")], ticket: nil)
        outbox.discardWaitingCommands(session: "s1")
        #expect(serials(outbox.takeReady { _ in true }) == [3])
        outbox.append([command(.move, 4, session: "s2")], ticket: nil)
        #expect(serials(outbox.takeReady { _ in false }) == [4], "no coin waits: moves go out at once again")
    }

    @Test func theGamesCommandsWaitForItsCoinsAckThenGoOutInOrder() {
        var outbox = MachineOutbox()
        outbox.append([command(.addCoins, 1)], ticket: ticket())
        outbox.append([command(.move, 2)], ticket: nil)
        outbox.append([command(.grab, 3)], ticket: nil)
        #expect(serials(outbox.takeReady(isDurable: { _ in true }, awaitingCoin: "s1", current: "s1")) == [1], "the coin alone")
        #expect(!outbox.hasReady { _ in true })
        outbox.append([command(.move, 4)], ticket: nil)
        #expect(outbox.takeReady(isDurable: { _ in true }, awaitingCoin: "s1", current: "s1").isEmpty, "still no ack")
        let acked = outbox.takeReady(isDurable: { _ in true }, awaitingCoin: nil, current: "s1")
        #expect(serials(acked) == [2, 3, 4])
        #expect(acked.dropped == 0)
        outbox.append([command(.move, 5)], ticket: nil)
        #expect(serials(outbox.takeReady(isDurable: { _ in true }, awaitingCoin: nil, current: "s1")) == [5], "at once again")
    }

    @Test func theCommandsOfAGameThatEndedWithoutItsCoinsAckAreDroppedAndCounted() {
        var outbox = MachineOutbox()
        outbox.append([command(.addCoins, 1)], ticket: ticket())
        outbox.append([command(.move, 2)], ticket: nil)
        #expect(serials(outbox.takeReady(isDurable: { _ in true }, awaitingCoin: "s1", current: "s1")) == [1])
        outbox.append([command(.grab, 3)], ticket: nil)
        // The ack timeout ended the game; the next one is offered.
        let ended = outbox.takeReady(isDurable: { _ in true }, awaitingCoin: nil, current: "s2")
        #expect(ended.commands.isEmpty)
        #expect(ended.dropped == 2)
        outbox.append([command(.move, 4, session: "s2")], ticket: nil)
        #expect(serials(outbox.takeReady(isDurable: { _ in true }, awaitingCoin: nil, current: "s2")) == [4])
    }
}
