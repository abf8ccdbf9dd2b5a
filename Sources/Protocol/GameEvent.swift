/// What can happen on a machine, as published on `claw/<m>/events` (SPEC §4).
public enum EventType: String, Sendable, Codable, CaseIterable {
    case joined, left, offered, accepted, declined, expired
    case command, ack
    case ackTimeout = "ack_timeout"
    case grab
    case autoGrab = "auto_grab"
    case result
    /// A result for a game that is no longer the current one (it came too
    /// late, or names another session): ignored.
    case staleResult = "stale_result"
    case noResult = "no_result"
    case dropped, online, offline
    /// The PC dropped mid-game; the game is kept for `game.offline_grace`.
    case reconnecting
    /// The PC came back within the grace; the game goes on.
    case reconnected
    /// A turn open when the gateway stopped was taken up at its start
    /// (SPEC §13); `data` is its phase (`offered`, `playing`, `awaiting_result`).
    case restored
    /// The machine's board settings were set at runtime (`data` `runtime`)
    /// or back to the file's (`data` `file`): from its next coin (SPEC §12).
    case settingsChanged = "settings_changed"
    /// A game record was closed; carries the outcome.
    case gameEnded = "game_ended"
    /// Operator actions.
    case paused, resumed, skipped, removed
    /// The PC missed `game.suspect_after` acks in a row; no new turn is offered.
    case suspect
    /// An ack or a fresh `online` from the PC cleared `suspect`.
    case suspectCleared = "suspect_cleared"
    /// The PC reported a fault of its board on `claw/<m>/fault` (SPEC §12):
    /// `data` its code, `reason` its text; the machine is in maintenance.
    case fault
    /// A reset (1002) went out to the PC (`data` `sent`; `serial` its
    /// gateway serial), or was not acked in time (`data` `not_acked`).
    case reset
    /// The machine went into maintenance (`data` `on`: by an operator, or
    /// after its game in progress) or came back into play (`data` `off`;
    /// `reason` `reset` when its PC came back from a reset, `operator` when
    /// an operator put it back).
    case maintenance
    /// A game changed its player's wallet (SPEC §11): `data` `debit` or
    /// `refund`, `change` (signed) and the `balance` after it.
    case credits
    /// A won game made its prize (SPEC §15): `data` the prize's own id,
    /// `reason` the machine's prize, `stock` what is left (when counted),
    /// `oversold` when the stock was already 0.
    case prizeWon = "prize_won"
    /// A win took the stock down to `prizes.low_at`: `stock` what is left.
    case lowStock = "low_stock"
    /// The stock is 0: no turn is offered until a restock.
    case outOfStock = "out_of_stock"
    /// An operator set or added to the stock: `data` `set` or `add`,
    /// `change` what was added (signed), `stock` the new stock, `reason` theirs.
    case restocked
    /// An operator corrected an ended game's result (SPEC §16): `session`
    /// the game, `outcome` the corrected one, `reason` theirs.
    case resultCorrected = "result_corrected"
}

/// How a game (an offered turn) ended, as recorded (SPEC §3).
public enum GameOutcome: String, Sendable, Codable, CaseIterable {
    case won, lost
    case noResult = "no_result"
    case declined, expired, left
    case machineOffline = "machine_offline"
    /// The machine's board reported a fault during the game (SPEC §12).
    case machineFault = "machine_fault"
    /// Ended by an operator (admin skip).
    case skipped
    /// Accepted with a balance under the price: no coin, the turn passed on (SPEC §11).
    case unpaid
}

extension GameOutcome {
    /// Whether a game that ended so is paid back (SPEC §11): its player got
    /// no fair game. A game whose coin the PC never acknowledged is paid
    /// back too, whatever its outcome.
    public var isRefunded: Bool {
        switch self {
        case .machineOffline, .machineFault, .noResult: true
        default: false
        }
    }
}

/// One event on `claw/<m>/events`: `type`, `seq`, `ts`, the machine, and the
/// fields that apply to that type.
public struct GameEvent: Sendable, Equatable, Codable {
    public var type: EventType
    /// Increases with every event of the machine within one run of the gateway.
    public var seq: Int64
    /// ISO 8601 UTC with milliseconds.
    public var ts: String
    public var machine: String
    public var player: String?
    /// The IM provider of `player` (`netease`, `generic`): a player is the
    /// pair, so `alice` of one is not `alice` of the other.
    public var provider: String?
    public var nick: String?
    public var session: String?
    /// `joined`: the new position; `command`/`ack`: the command name.
    public var position: Int?
    public var command: String?
    public var data: String?
    /// The gateway serial of the message on MQTT.
    public var serial: Int64?
    /// The serial the player gave the command.
    public var playerSerial: Int64?
    /// `dropped`: the error code the player was answered with.
    public var reason: String?
    public var outcome: GameOutcome?
    /// `ack`: milliseconds from publish to ack.
    public var latencyMs: Double?
    /// `game_ended`: how many commands the player's game sent.
    public var commands: Int?
    /// `credits`: the change to the player's wallet (signed) and the balance after it.
    public var change: Int64?
    public var balance: Int64?
    /// `prize_won`, `low_stock`, `out_of_stock`, `restocked`: the machine's stock after it (SPEC §15).
    public var stock: Int64?
    /// `prize_won`: the win found the stock at 0 (an operator set it so during the game).
    public var oversold: Bool?

    public init(
        type: EventType, seq: Int64, ts: String, machine: String, player: String? = nil, provider: String? = nil,
        nick: String? = nil, session: String? = nil, position: Int? = nil, command: String? = nil,
        data: String? = nil, serial: Int64? = nil, playerSerial: Int64? = nil, reason: String? = nil,
        outcome: GameOutcome? = nil, latencyMs: Double? = nil, commands: Int? = nil, change: Int64? = nil, balance: Int64? = nil,
        stock: Int64? = nil, oversold: Bool? = nil
    ) {
        self.type = type
        self.seq = seq
        self.ts = ts
        self.machine = machine
        self.player = player
        self.provider = provider
        self.nick = nick
        self.session = session
        self.position = position
        self.command = command
        self.data = data
        self.serial = serial
        self.playerSerial = playerSerial
        self.reason = reason
        self.outcome = outcome
        self.latencyMs = latencyMs
        self.commands = commands
        self.change = change
        self.balance = balance
        self.stock = stock
        self.oversold = oversold
    }

    private enum CodingKeys: String, CodingKey {
        case type, seq, ts, machine, player, provider, nick, session, position, command, data, serial
        case playerSerial = "player_serial"
        case reason, outcome
        case latencyMs = "latency_ms"
        case commands, change, balance, stock, oversold
    }
}

extension GameEvent {
    /// The event as JSON: `type`, `seq`, `ts`, `machine`, then the fields that
    /// are set, in declaration order. Written by hand because events go out
    /// with every command and an encoder per event was a tenth of the gateway's
    /// CPU in the benchmark.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(192)
        out.append(contentsOf: #"{"type":"#.utf8)
        JSONText.appendString(type.rawValue, to: &out)
        JSONText.appendField("seq", integer: seq, to: &out)
        JSONText.appendField("ts", string: ts, to: &out)
        JSONText.appendField("machine", string: machine, to: &out)
        if let player { JSONText.appendField("player", string: player, to: &out) }
        if let provider { JSONText.appendField("provider", string: provider, to: &out) }
        if let nick { JSONText.appendField("nick", string: nick, to: &out) }
        if let session { JSONText.appendField("session", string: session, to: &out) }
        if let position { JSONText.appendField("position", integer: Int64(position), to: &out) }
        if let command { JSONText.appendField("command", string: command, to: &out) }
        if let data { JSONText.appendField("data", string: data, to: &out) }
        if let serial { JSONText.appendField("serial", integer: serial, to: &out) }
        if let playerSerial { JSONText.appendField("player_serial", integer: playerSerial, to: &out) }
        if let reason { JSONText.appendField("reason", string: reason, to: &out) }
        if let outcome { JSONText.appendField("outcome", string: outcome.rawValue, to: &out) }
        if let latencyMs, latencyMs.isFinite { JSONText.appendField("latency_ms", number: latencyMs, to: &out) }
        if let commands { JSONText.appendField("commands", integer: Int64(commands), to: &out) }
        if let change { JSONText.appendField("change", integer: change, to: &out) }
        if let balance { JSONText.appendField("balance", integer: balance, to: &out) }
        if let stock { JSONText.appendField("stock", integer: stock, to: &out) }
        if let oversold { JSONText.appendField("oversold", bool: oversold, to: &out) }
        out.append(UInt8(ascii: "}"))
        return out
    }
}
