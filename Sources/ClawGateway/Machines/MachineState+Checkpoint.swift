/// The open game's moves on disk without a write per move (SPEC §13).
///
/// A move writes nothing: it is the hot path, and a command never waits on
/// the disk. The open game's record is written at its phase changes, at a
/// clean stop, and, while moves come, at most every ``checkpointEvery`` by a
/// checkpoint of its own: its `commands` count and its duplicate-serial
/// window. A `kill -9` loses at most that last second of moves from the
/// count and the window, and `game.command_max_age` (2 s) drops an IM copy
/// older than that: a copy of a move delivered again after a restart is
/// forwarded twice only when the restart took less than that age, less the
/// moments since the checkpoint (docs/RELIABILITY.md).
extension MachineState {
    /// How long the open game's commands may go unwritten while moves come.
    static let checkpointEvery: Duration = .seconds(1)

    /// Writes the open game's record when commands came since it was last
    /// written and ``checkpointEvery`` has passed: one write a second at
    /// most, from the deadlines (``expire(_:)``), so that no player's
    /// command and no answer waits for it.
    mutating func checkpointIfDue(_ fx: inout Effects) {
        guard let due = phase.turn?.checkpointDue, due <= fx.now.uptime else { return }
        writeOpenGame(&fx)
    }
}

extension MachineState.Turn {
    /// When the commands sent since the record was last written are due on
    /// disk; nil when there are none.
    var checkpointDue: Duration? {
        commands == writtenCommands ? nil : writtenAt + MachineState.checkpointEvery
    }
}
