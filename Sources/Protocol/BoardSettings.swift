/// What a claw machine's mainboard takes with every coin (SPEC §12): its
/// own play time, the claw's power at each stage, the lift height, and
/// whether this game gets the full-power grab. The coin (1001) carries it as
/// `settings`.
public struct BoardSettings: Sendable, Equatable, Codable {
    /// The claw's power (1–48, as the common boards take it) at the grab,
    /// at the top, while it moves, and its most.
    public struct Claw: Sendable, Equatable, Codable {
        public var grab: Int
        public var top: Int
        public var move: Int
        public var max: Int

        public init(grab: Int, top: Int, move: Int, max: Int) {
            self.grab = grab
            self.top = top
            self.move = move
            self.max = max
        }
    }

    /// The board's own play time, in whole seconds.
    public var gameTime: Int
    public var claw: Claw
    /// 0–10.
    public var liftHeight: Int
    /// The board's full-power grab, that wins: set on the coin of a game
    /// the machine's `guarantee_after` says is due one.
    public var strong: Bool

    public static let clawPowers = 1...48
    public static let liftHeights = 0...10
    /// Whole seconds the board may be given to play.
    public static let gameTimes = 5...300
    /// What a machine takes when neither `game.settings` nor its own say otherwise.
    public static let defaults = BoardSettings(gameTime: 30, claw: Claw(grab: 30, top: 20, move: 10, max: 48), liftHeight: 5)

    public init(gameTime: Int, claw: Claw, liftHeight: Int, strong: Bool = false) {
        self.gameTime = gameTime
        self.claw = claw
        self.liftHeight = liftHeight
        self.strong = strong
    }

    enum CodingKeys: String, CodingKey {
        case gameTime = "game_time"
        case claw
        case liftHeight = "lift_height"
        case strong
    }

    /// The coin's `settings` object, keys in a fixed order.
    func append(to out: inout [UInt8]) {
        out.append(contentsOf: #"{"game_time":"#.utf8)
        JSONText.appendInteger(Int64(gameTime), to: &out)
        out.append(contentsOf: #","claw":{"grab":"#.utf8)
        JSONText.appendInteger(Int64(claw.grab), to: &out)
        JSONText.appendField("top", integer: Int64(claw.top), to: &out)
        JSONText.appendField("move", integer: Int64(claw.move), to: &out)
        JSONText.appendField("max", integer: Int64(claw.max), to: &out)
        out.append(UInt8(ascii: "}"))
        JSONText.appendField("lift_height", integer: Int64(liftHeight), to: &out)
        out.append(contentsOf: (strong ? #","strong":true}"# : #","strong":false}"#).utf8)
    }
}
