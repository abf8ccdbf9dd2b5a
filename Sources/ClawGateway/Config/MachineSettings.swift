import Protocol

/// A machine's `settings:` (SPEC §12), its defaults under `game.settings`:
/// what its mainboard takes with every coin, and after how many lost games
/// the next coin carries the full-power grab.
struct MachineSettings: Sendable, Equatable {
    /// Sent with every coin; `strong` is decided per game.
    var board = BoardSettings.defaults
    /// After this many lost games in a row on the machine, the next coin
    /// carries `"strong":true`; 0 never.
    var guaranteeAfter = 0

    static let keys = ["game_time", "claw", "lift_height", "guarantee_after"]
    static let clawKeys = ["grab", "top", "move", "max"]
    static let guarantees = 0...1000

    /// Reads a `settings:` mapping over `defaults`: each key given replaces
    /// its default, each bad one is a problem naming it.
    static func read(_ section: ConfigReader.Section?, over defaults: MachineSettings) -> MachineSettings {
        var settings = defaults
        guard let section else { return settings }
        if section.has("game_time") {
            let time = section.duration("game_time", default: .seconds(defaults.board.gameTime))
            let (seconds, rest) = time.components
            if rest != 0 || !BoardSettings.gameTimes.contains(Int(seconds)) {
                section.reader.report(
                    section.path("game_time"),
                    "must be whole seconds from \(BoardSettings.gameTimes.lowerBound)s to \(BoardSettings.gameTimes.upperBound)s (the board counts seconds)")
            } else {
                settings.board.gameTime = Int(seconds)
            }
        }
        if let claw = section.section("claw", keys: clawKeys) {
            let powers = BoardSettings.clawPowers
            settings.board.claw.grab = claw.int("grab", default: defaults.board.claw.grab, in: powers)
            settings.board.claw.top = claw.int("top", default: defaults.board.claw.top, in: powers)
            settings.board.claw.move = claw.int("move", default: defaults.board.claw.move, in: powers)
            settings.board.claw.max = claw.int("max", default: defaults.board.claw.max, in: powers)
        }
        settings.board.liftHeight = section.int("lift_height", default: defaults.board.liftHeight, in: BoardSettings.liftHeights)
        settings.guaranteeAfter = section.int("guarantee_after", default: defaults.guaranteeAfter, in: guarantees)
        return settings
    }

    /// The coin's settings for a game, `games` lost in a row since the last win.
    func coin(lostInARow games: Int) -> BoardSettings {
        var board = board
        board.strong = guaranteeAfter > 0 && games >= guaranteeAfter
        return board
    }
}
