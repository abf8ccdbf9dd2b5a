/// What a player asks of the gateway or of a machine, validated.
public enum PlayerCommand: Sendable, Equatable {
    case move(Direction)
    case grab
    case camera(String)
    case join(nick: String?)
    case leave
    case accept(session: String)
    case decline(session: String)

    /// The wire command number.
    public var code: CommandCode {
        switch self {
        case .move: .move
        case .grab: .grab
        case .camera: .camera
        case .join: .join
        case .leave: .leave
        case .accept: .acceptTurn
        case .decline: .declineTurn
        }
    }

    /// Whether the command steers the machine and so is forwarded over MQTT.
    public var isControl: Bool {
        switch self {
        case .move, .grab, .camera: true
        case .join, .leave, .accept, .decline: false
        }
    }
}

/// A player's notification, decoded and checked for everything that does not
/// depend on a machine (SPEC §2).
public struct PlayerRequest: Sendable, Equatable {
    public var command: PlayerCommand
    /// The player's serial, echoed in replies that answer this request.
    public var serial: Int64?

    /// The longest nickname a player may give when joining, in UTF-8 bytes
    /// (32 CJK characters): it goes into every snapshot and record, so it is
    /// bounded in bytes, not characters (one character can carry thousands
    /// of combining marks).
    public static let maxNickBytes = 96

    public init(command: PlayerCommand, serial: Int64?) {
        self.command = command
        self.serial = serial
    }

    /// Checks a decoded wire message from a player.
    ///
    /// Throws ``ErrorCode/unknownCommand`` for a command a player may not send,
    /// and ``ErrorCode/invalidPayload`` for a bad direction, a missing serial or
    /// session, or an unusable nickname. The camera id is checked against the
    /// machine later, by ``validate(cameras:)``.
    public init(_ message: WireMessage) throws(WireError) {
        guard let code = message.code else {
            throw WireError(.unknownCommand, "Command \(message.command) is not part of the protocol; players send 1, 2, 3, 6, 7, 12 or 13.")
        }
        let data = message.data
        switch code {
        case .move:
            guard let data, let direction = Direction(rawValue: data) else {
                throw WireError(.invalidPayload, "A move needs data up, down, left, right or stop.")
            }
            command = .move(direction)
        case .grab:
            command = .grab
        case .camera:
            guard let data, !data.isEmpty else {
                throw WireError(.invalidPayload, "A camera switch needs the camera id in data.")
            }
            command = .camera(data)
        case .join:
            command = .join(nick: try Self.nickname(data))
        case .leave:
            command = .leave
        case .acceptTurn, .declineTurn:
            guard let data, !data.isEmpty else {
                throw WireError(.invalidPayload, "Send the session id of the turn offer (command 11) in data.")
            }
            command = code == .acceptTurn ? .accept(session: data) : .decline(session: data)
        case .result, .ack, .queuePosition, .error, .turnOffer, .creditsChanged, .prizeChanged, .addCoins, .reset:
            throw WireError(.unknownCommand, "Command \(code.rawValue) (\(code)) is not sent by players; players send 1, 2, 3, 6, 7, 12 or 13.")
        }
        if command.isControl, message.serial == nil {
            throw WireError(.invalidPayload, "Command \(code.rawValue) (\(code)) needs a serial.")
        }
        serial = message.serial
    }

    /// Checks the request against the machine it is for.
    public func validate(cameras: some Collection<String>) throws(WireError) {
        guard case .camera(let id) = command, !cameras.contains(id) else { return }
        let known = cameras.isEmpty ? "this machine has no cameras" : "its cameras are " + cameras.joined(separator: ", ")
        throw WireError(.invalidPayload, "Camera \"\(id)\" does not exist on this machine; \(known).")
    }

    private static func nickname(_ data: String?) throws(WireError) -> String? {
        guard let trimmed = data?.trimmingSpaces, !trimmed.isEmpty else { return nil }
        guard trimmed.utf8.count <= maxNickBytes else {
            throw WireError(.invalidPayload, "A nickname may have at most \(maxNickBytes) bytes in UTF-8 (32 Chinese characters).")
        }
        guard !PlayerText.hasHiddenCharacters(trimmed) else {
            throw WireError(
                .invalidPayload, "A nickname may not contain control or invisible formatting characters (such as bidi overrides or zero-width spaces).")
        }
        return trimmed
    }
}

extension String {
    fileprivate var trimmingSpaces: String {
        var scalars = Substring(self)
        while let first = scalars.first, first.isWhitespace { scalars.removeFirst() }
        while let last = scalars.last, last.isWhitespace { scalars.removeLast() }
        return String(scalars)
    }
}

/// What text a player supplies (accounts, nicknames) may contain: it ends up
/// in snapshots, records, the dashboard and logs, where others read it.
public enum PlayerText {
    /// The longest player account accepted, in UTF-8 bytes.
    public static let maxAccountBytes = 128

    /// Whether `account` is one the gateway takes a player by: 1 to
    /// ``maxAccountBytes`` bytes, nothing hidden (the ingress's sender, a
    /// wallet's account).
    public static func isAccount(_ account: String) -> Bool {
        !account.isEmpty && account.utf8.count <= maxAccountBytes && !hasHiddenCharacters(account)
    }

    /// Whether `text` has characters that can break a line or hide, reorder
    /// or disguise what others see: control characters, format characters
    /// (bidi overrides, zero-width spaces and joiners), line and paragraph
    /// separators.
    public static func hasHiddenCharacters(_ text: String) -> Bool {
        text.unicodeScalars.contains { scalar in
            switch scalar.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator: true
            default: false
            }
        }
    }
}
