import Foundation

/// The JSON inside an IM notification's `attach`, and the payload of every
/// command message on MQTT: `{"command":1,"data":"left","serial":7}` plus the
/// optional fields of SPEC §2.
///
/// Decoding is tolerant the way real clients are (see ``decode(_:)``);
/// encoding writes the keys in a fixed order, `command`, `data`, `serial`
/// first, so commands 1–5 are byte-for-byte what NetEase's clients send.
public struct WireMessage: Sendable, Equatable {
    public var command: Int
    public var data: String?
    public var serial: Int64?
    /// Command 8: how many players are waiting.
    public var length: Int?
    /// Command 9: a sentence saying what went wrong and what to do.
    public var message: String?
    /// Command 11: seconds the player has to accept.
    public var timeout: Int?
    /// Commands 1001 and control messages: the game's session id.
    public var session: String?
    /// Control messages: the player the command comes from.
    public var player: String?

    public init(
        command: Int, data: String? = nil, serial: Int64? = nil, length: Int? = nil,
        message: String? = nil, timeout: Int? = nil, session: String? = nil, player: String? = nil
    ) {
        self.command = command
        self.data = data
        self.serial = serial
        self.length = length
        self.message = message
        self.timeout = timeout
        self.session = session
        self.player = player
    }

    public init(
        _ code: CommandCode, data: String? = nil, serial: Int64? = nil, length: Int? = nil,
        message: String? = nil, timeout: Int? = nil, session: String? = nil, player: String? = nil
    ) {
        self.init(
            command: code.rawValue, data: data, serial: serial, length: length,
            message: message, timeout: timeout, session: session, player: player)
    }

    /// The command as a known code, or nil for a number the protocol does not define.
    public var code: CommandCode? { CommandCode(rawValue: command) }
}

// MARK: - Decoding

extension WireMessage: Decodable {
    private enum Field: String, CodingKey {
        case command, data, serial, length, message, timeout, session, player
    }

    /// Decodes a wire message, tolerating what real clients send: `command` as a
    /// number or a numeric string, `data` as a string or a number (kept as its
    /// string form), `serial` as a number or a numeric string, unknown fields.
    ///
    /// Throws ``WireError`` with ``ErrorCode/invalidPayload`` for anything that is
    /// not a JSON object with an integral `command`.
    public static func decode(_ bytes: some Collection<UInt8>) throws(WireError) -> WireMessage {
        do {
            return try JSONDecoder().decode(WireMessage.self, from: Data(bytes))
        } catch let error as WireError {
            throw error
        } catch DecodingError.typeMismatch {
            throw WireError(.invalidPayload, "The payload must be a JSON object with a \"command\" field.")
        } catch {
            throw WireError(.invalidPayload, "The payload is not valid JSON; send an object such as {\"command\":1,\"data\":\"left\",\"serial\":1}.")
        }
    }

    /// Decodes tolerantly (see ``decode(_:)``); problems are thrown as ``WireError``.
    public init(from decoder: any Decoder) throws {
        let fields = try decoder.container(keyedBy: Field.self)
        guard fields.contains(.command), try !fields.decodeNil(forKey: .command) else {
            throw WireError(.invalidPayload, "The payload has no \"command\" field.")
        }
        guard let command = Self.integer(fields, .command).flatMap({ Int(exactly: $0) }) else {
            throw WireError(.invalidPayload, "\"command\" must be an integer or a numeric string.")
        }
        self.init(command: command)
        data = try Self.text(fields, .data)
        serial = try Self.optionalInteger(fields, .serial)
        length = try Self.optionalInteger(fields, .length).flatMap { Int(exactly: $0) }
        timeout = try Self.optionalInteger(fields, .timeout).flatMap { Int(exactly: $0) }
        message = try Self.text(fields, .message)
        session = try Self.text(fields, .session)
        player = try Self.text(fields, .player)
    }

    private static func optionalInteger(
        _ fields: KeyedDecodingContainer<Field>, _ key: Field
    ) throws(WireError) -> Int64? {
        guard fields.contains(key), (try? fields.decodeNil(forKey: key)) == false else { return nil }
        guard let number = integer(fields, key) else {
            throw WireError(.invalidPayload, "\"\(key.rawValue)\" must be an integer or a numeric string.")
        }
        return number
    }

    /// An integral JSON number, or a string holding one; nil for anything else.
    private static func integer(_ fields: KeyedDecodingContainer<Field>, _ key: Field) -> Int64? {
        if let number = try? fields.decode(Int64.self, forKey: key) { return number }
        if let string = try? fields.decode(String.self, forKey: key) { return Int64(string) }
        return nil
    }

    /// A JSON string, or a number kept as its string form.
    private static func text(_ fields: KeyedDecodingContainer<Field>, _ key: Field) throws(WireError) -> String? {
        guard fields.contains(key), (try? fields.decodeNil(forKey: key)) == false else { return nil }
        if let string = try? fields.decode(String.self, forKey: key) { return string }
        if let number = try? fields.decode(Int64.self, forKey: key) { return String(number) }
        if let number = try? fields.decode(Double.self, forKey: key), number.isFinite { return String(number) }
        throw WireError(.invalidPayload, "\"\(key.rawValue)\" must be a string or a number.")
    }
}

// MARK: - Encoding

extension WireMessage {
    /// The message as JSON bytes: `command`, `data`, `serial`, then the
    /// extension fields in a fixed order; absent fields are left out.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 + (data?.utf8.count ?? 0) + (message?.utf8.count ?? 0))
        out.append(contentsOf: #"{"command":"#.utf8)
        out.append(contentsOf: String(command).utf8)
        if let data { JSONText.appendField("data", string: data, to: &out) }
        if let serial { JSONText.appendField("serial", integer: serial, to: &out) }
        if let length { JSONText.appendField("length", integer: Int64(length), to: &out) }
        if let message { JSONText.appendField("message", string: message, to: &out) }
        if let timeout { JSONText.appendField("timeout", integer: Int64(timeout), to: &out) }
        if let session { JSONText.appendField("session", string: session, to: &out) }
        if let player { JSONText.appendField("player", string: player, to: &out) }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// ``encoded()`` as a String, e.g. for an IM `attach` field.
    public func encodedString() -> String {
        String(decoding: encoded(), as: UTF8.self)
    }
}

/// JSON text for the few fields the wire encoder writes itself (RFC 8259 §7).
enum JSONText {
    static func appendField(_ key: String, string: String, to out: inout [UInt8]) {
        appendKey(key, to: &out)
        appendString(string, to: &out)
    }

    static func appendField(_ key: String, integer: Int64, to out: inout [UInt8]) {
        appendKey(key, to: &out)
        out.append(contentsOf: String(integer).utf8)
    }

    static func appendField(_ key: String, number: Double, to out: inout [UInt8]) {
        appendKey(key, to: &out)
        out.append(contentsOf: String(number).utf8)
    }

    private static func appendKey(_ key: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: ","))
        out.append(UInt8(ascii: "\""))
        out.append(contentsOf: key.utf8)
        out.append(contentsOf: "\":".utf8)
    }

    static func appendString(_ string: String, to out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
            case 0x0A: out.append(contentsOf: #"\n"#.utf8)
            case 0x0D: out.append(contentsOf: #"\r"#.utf8)
            case 0x09: out.append(contentsOf: #"\t"#.utf8)
            case 0x00..<0x20:
                out.append(contentsOf: #"\u00"#.utf8)
                out.append(hexDigit(byte >> 4))
                out.append(hexDigit(byte & 0x0F))
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
    }
}
