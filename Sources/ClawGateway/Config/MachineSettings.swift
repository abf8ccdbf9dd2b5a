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

/// The JSON of the settings routes and of storage: `game_time` (whole
/// seconds), `claw` `{grab, top, move, max}`, `lift_height`, `guarantee_after`.
extension MachineSettings: Codable {
    private enum CodingKeys: String, CodingKey {
        case gameTime = "game_time"
        case claw
        case liftHeight = "lift_height"
        case guaranteeAfter = "guarantee_after"
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        board = BoardSettings(
            gameTime: try container.decode(Int.self, forKey: .gameTime), claw: try container.decode(BoardSettings.Claw.self, forKey: .claw),
            liftHeight: try container.decode(Int.self, forKey: .liftHeight))
        guaranteeAfter = try container.decode(Int.self, forKey: .guaranteeAfter)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(board.gameTime, forKey: .gameTime)
        try container.encode(board.claw, forKey: .claw)
        try container.encode(board.liftHeight, forKey: .liftHeight)
        try container.encode(guaranteeAfter, forKey: .guaranteeAfter)
    }

    /// A `PUT …/settings` body over `base`: each field given replaces its
    /// value, with the file's rules; every bad or unknown field is one
    /// problem naming it (`claw.grab`), and any problem changes nothing.
    static func update(_ base: MachineSettings, with body: [UInt8]) throws(Rejected) -> MachineSettings {
        var settings = base
        var problems: [ConfigProblem] = []
        func whole(_ value: JSONValue, _ path: String, in range: ClosedRange<Int>) -> Int? {
            guard case .number(let number) = value, let integer = number.int64.flatMap({ Int(exactly: $0) }) else {
                problems.append(ConfigProblem(path: path, message: "must be a whole number"))
                return nil
            }
            guard range.contains(integer) else {
                problems.append(ConfigProblem(path: path, message: "must be between \(range.lowerBound) and \(range.upperBound), not \(integer)"))
                return nil
            }
            return integer
        }
        func object(_ bytes: some Collection<UInt8>, _ path: String) -> [JSONField]? {
            do throws(JSONReadError) {
                return try JSONObjectReader.fields(in: bytes)
            } catch {
                problems.append(ConfigProblem(path: path, message: "must be a JSON object (\(error.summary))"))
                return nil
            }
        }
        guard let fields = object(body, "body") else { throw Rejected(problems: problems) }
        for field in fields {
            switch field.key {
            case "game_time":
                settings.board.gameTime = whole(field.value, "game_time", in: BoardSettings.gameTimes) ?? settings.board.gameTime
            case "lift_height":
                settings.board.liftHeight = whole(field.value, "lift_height", in: BoardSettings.liftHeights) ?? settings.board.liftHeight
            case "guarantee_after":
                settings.guaranteeAfter = whole(field.value, "guarantee_after", in: guarantees) ?? settings.guaranteeAfter
            case "claw":
                guard case .object(let range) = field.value else {
                    problems.append(ConfigProblem(path: "claw", message: "must be an object of grab, top, move, max"))
                    continue
                }
                guard let claw = object(body[range], "claw") else { continue }
                for power in claw {
                    let path = "claw.\(power.key)"
                    switch power.key {
                    case "grab": settings.board.claw.grab = whole(power.value, path, in: BoardSettings.clawPowers) ?? settings.board.claw.grab
                    case "top": settings.board.claw.top = whole(power.value, path, in: BoardSettings.clawPowers) ?? settings.board.claw.top
                    case "move": settings.board.claw.move = whole(power.value, path, in: BoardSettings.clawPowers) ?? settings.board.claw.move
                    case "max": settings.board.claw.max = whole(power.value, path, in: BoardSettings.clawPowers) ?? settings.board.claw.max
                    default: problems.append(ConfigProblem(path: path, message: "unknown field; the claw has grab, top, move, max"))
                    }
                }
            case "reason":
                // The operator's reason beside the settings (SPEC §16): the route reads it.
                continue
            default:
                problems.append(
                    ConfigProblem(path: field.key, message: "unknown field; settings are game_time, claw, lift_height, guarantee_after"))
            }
        }
        guard problems.isEmpty else { throw Rejected(problems: problems) }
        return settings
    }

    /// A settings body refused, with every problem in it.
    struct Rejected: Error {
        var problems: [ConfigProblem]
    }
}
