/// The error codes a player can receive as the `data` of command 9 (SPEC §2).
///
/// When several apply, the one earliest in ``precedence`` wins.
public enum ErrorCode: String, Sendable, CaseIterable, Codable {
    case invalidPayload = "invalid_payload"
    case unknownCommand = "unknown_command"
    case unknownMachine = "unknown_machine"
    case machineOffline = "machine_offline"
    case notYourTurn = "not_your_turn"
    case notInQueue = "not_in_queue"
    case alreadyQueued = "already_queued"
    case queueFull = "queue_full"
    case duplicateSerial = "duplicate_serial"
    case rateLimited = "rate_limited"
    case sessionMismatch = "session_mismatch"
    case gatewayUnavailable = "gateway_unavailable"
    /// A join or an accept with a balance under the machine's price (SPEC §11).
    case insufficientCredits = "insufficient_credits"
    /// Answers no request: the player's turn offer ran out before they accepted it.
    case offerExpired = "offer_expired"
    /// Answers no request: the machine reported no result for the player's game in time.
    case noResult = "no_result"
    /// Answers no request: the machine's board reported a fault; the game
    /// in progress has ended, or the offer was taken back (SPEC §12).
    case machineFault = "machine_fault"
}

/// A rejected player notification: a stable code and a sentence saying what to do.
public struct WireError: Error, Sendable, Equatable, CustomStringConvertible {
    public var code: ErrorCode
    public var message: String
    /// `insufficient_credits`: the player's balance and the machine's price,
    /// carried by the command 9 that answers (SPEC §11).
    public var balance: Int64?
    public var price: Int64?
    /// This refusal ends the player's own turn (a paid game the chain's
    /// wallets refused): told whatever else the player was refused lately.
    public var endsTurn: Bool

    public init(_ code: ErrorCode, _ message: String, balance: Int64? = nil, price: Int64? = nil, endsTurn: Bool = false) {
        self.code = code
        self.message = message
        self.balance = balance
        self.price = price
        self.endsTurn = endsTurn
    }

    /// Whether the player is always told this (SPEC §2): it ends, refuses or
    /// changes their own turn, game or wallet, and their client waits on
    /// it; never held back as a refusal repeated within a second is.
    public var isAlwaysTold: Bool {
        endsTurn || Self.alwaysTold.contains(code)
    }

    /// The codes that say what became of the player's own turn or money.
    public static let alwaysTold: Set<ErrorCode> = [.insufficientCredits, .offerExpired, .noResult, .machineFault]

    public var description: String { "\(code.rawValue): \(message)" }
}
