import Protocol

/// What changes a machine's config while it runs: a reload of
/// `gateway.yaml` (SPEC §13), which ends no game, and the operator's board
/// settings (SPEC §12).
extension MachineState {
    /// The machine's config or the game's settings changed. The name, the
    /// cameras and the IM account apply at once; the settings (timers, queue
    /// length, coins) from the next turn, so an open turn keeps the deadlines
    /// it was given.
    mutating func reconfigure(_ machine: MachineConfig, settings: GameSettings, _ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        self.machine = machine
        if settings != self.settings { nextSettings = settings } else { nextSettings = nil }
        return finish((), &fx)
    }

    /// The machine was taken out of the config. Its waiting players leave
    /// the queue and are told `unknown_machine`; the game in progress plays
    /// to its end; no turn is offered and nobody joins. Once the machine is
    /// free it says ``MachineEffect/gone`` (in this transition when it is
    /// free already). Its games stay in storage.
    mutating func retire(_ context: TransitionContext) -> Step<Void> {
        var fx = Effects(context)
        guard !retiring else { return finish((), &fx) }
        retiring = true
        let told = waiting
        waiting.removeAll()
        for entry in told {
            fx.writes.append(.dequeue(machine: id, player: entry.address))
            notice(entry.address, Self.removed(machine), &fx)
            emit(.left, &fx) {
                $0.set(entry.address)
                $0.reason = ErrorCode.unknownMachine.rawValue
            }
        }
        if !told.isEmpty { fx.snapshotChanged = true }
        return finish((), &fx)
    }

    /// The refusal of a machine a reload took out: to its waiting players,
    /// and to anyone who tries to join it while its last game finishes.
    static func removed(_ machine: MachineConfig) -> WireError {
        WireError(.unknownMachine, "\(machine.name) has been taken off the floor; choose another machine.")
    }

    /// An operator set the machine's board settings (`PUT …/settings`), or
    /// took them back to the file's (nil, `DELETE`): durable, and carried
    /// from the next coin, never by the game in progress (SPEC §12).
    /// Returns whether anything changed.
    mutating func setSettings(_ settings: MachineSettings?, _ context: TransitionContext) -> Step<Bool> {
        var fx = Effects(context)
        guard settings != settingsOverride else { return finish(false, &fx) }
        settingsOverride = settings
        fx.writes.append(.settings(machine: id, settings))
        emit(.settingsChanged, &fx) { $0.data = settings == nil ? "file" : "runtime" }
        return finish(true, &fx)
    }
}
