/// The command numbers of the wire protocol (SPEC §2).
///
/// 1–5 are NetEase YunXin's claw-machine solution, kept byte-compatible;
/// 11–13 and 1001 are the numbers that solution used for the invite flow and
/// for coins; 6–9, 14, 15 and 1002 are this gateway's extension.
public enum CommandCode: Int, Sendable, CaseIterable, CustomStringConvertible {
    case move = 1
    case grab = 2
    case camera = 3
    case result = 4
    case ack = 5
    case join = 6
    case leave = 7
    case queuePosition = 8
    case error = 9
    case turnOffer = 11
    case acceptTurn = 12
    case declineTurn = 13
    /// Gateway → player: their balance changed (SPEC §11).
    case creditsChanged = 14
    /// Gateway → player: one of their prizes changed (SPEC §15).
    case prizeChanged = 15
    case addCoins = 1001
    /// Gateway → PC: reset the board and send the gantry home (SPEC §12).
    case reset = 1002

    /// The name used in events, logs and docs.
    public var description: String {
        switch self {
        case .move: "move"
        case .grab: "grab"
        case .camera: "camera"
        case .result: "result"
        case .ack: "ack"
        case .join: "join"
        case .leave: "leave"
        case .queuePosition: "queue_position"
        case .error: "error"
        case .turnOffer: "turn_offer"
        case .acceptTurn: "accept"
        case .declineTurn: "decline"
        case .creditsChanged: "credits_changed"
        case .prizeChanged: "prize_changed"
        case .addCoins: "add_coins"
        case .reset: "reset"
        }
    }
}
