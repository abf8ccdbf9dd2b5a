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
    /// Command 1001: what the machine's mainboard takes with the coin
    /// (SPEC §12). Written, not read: a PC reads it with its own JSON parser.
    public var settings: BoardSettings?
    /// Commands 9 (`insufficient_credits`) and 11: the player's balance and
    /// the machine's price (SPEC §11). Written, not read, like the fields below.
    public var balance: Int64?
    public var price: Int64?
    /// Command 14: the change to the balance (signed) and why: `topup`,
    /// `debit`, `refund`, `adjust`, `exchange` (SPEC §11).
    public var change: Int64?
    public var reason: String?
    /// Command 15: the prize's state now (`held`, `to_ship`, `shipped`,
    /// `delivered`, `exchanged`), its name, and once shipped its tracking
    /// number (SPEC §15). Written, not read.
    public var state: String?
    public var prize: String?
    public var tracking: String?
    /// Command 11: `true` on a continue, the turn offered first to the
    /// player whose game just ended (SPEC §3). Written, not read.
    public var isContinue: Bool?
    /// Command 4: `true` when an operator corrected the game's result
    /// (SPEC §16); `data` is the corrected one. Written, not read.
    public var corrected: Bool?

    public init(
        command: Int, data: String? = nil, serial: Int64? = nil, length: Int? = nil,
        message: String? = nil, timeout: Int? = nil, session: String? = nil, player: String? = nil,
        settings: BoardSettings? = nil, balance: Int64? = nil, price: Int64? = nil, change: Int64? = nil, reason: String? = nil,
        state: String? = nil, prize: String? = nil, tracking: String? = nil, isContinue: Bool? = nil,
        corrected: Bool? = nil
    ) {
        self.corrected = corrected
        self.command = command
        self.data = data
        self.serial = serial
        self.length = length
        self.message = message
        self.timeout = timeout
        self.session = session
        self.player = player
        self.settings = settings
        self.balance = balance
        self.price = price
        self.change = change
        self.reason = reason
        self.state = state
        self.prize = prize
        self.tracking = tracking
        self.isContinue = isContinue
    }

    public init(
        _ code: CommandCode, data: String? = nil, serial: Int64? = nil, length: Int? = nil,
        message: String? = nil, timeout: Int? = nil, session: String? = nil, player: String? = nil,
        settings: BoardSettings? = nil, balance: Int64? = nil, price: Int64? = nil, change: Int64? = nil, reason: String? = nil,
        state: String? = nil, prize: String? = nil, tracking: String? = nil, isContinue: Bool? = nil,
        corrected: Bool? = nil
    ) {
        self.init(
            command: code.rawValue, data: data, serial: serial, length: length,
            message: message, timeout: timeout, session: session, player: player, settings: settings,
            balance: balance, price: price, change: change, reason: reason, state: state, prize: prize, tracking: tracking, isContinue: isContinue,
            corrected: corrected)
    }

    /// The command as a known code, or nil for a number the protocol does not define.
    public var code: CommandCode? { CommandCode(rawValue: command) }
}

// MARK: - Decoding

extension WireMessage {
    /// Decodes a wire message, tolerating what real clients send: `command` as a
    /// number or a numeric string, `data` as a string or a number (kept as its
    /// string form), `serial` as a number or a numeric string, unknown fields.
    ///
    /// In detail: `command`, `serial`, `length` and `timeout` take an integer
    /// or a string that `Int64.init(_:)` reads (`"42"`, `"-7"`, `"+7"`); `data`,
    /// `message`, `session` and `player` take a string, or a number kept as
    /// `String(Int64)` when it is a whole number in range and as `String(Double)`
    /// when it is another finite one; `null` counts as absent; unknown fields
    /// are ignored; a leading UTF-8 byte order mark is skipped.
    ///
    /// Throws ``WireError`` with ``ErrorCode/invalidPayload`` for anything that is
    /// not a JSON object with an integral `command`.
    ///
    /// This reads with ``JSONObjectReader``, not Foundation, and was checked
    /// against the `JSONDecoder`-based decoder it replaced (which
    /// the property tests keep as their reference); it behaves the same except, on purpose:
    /// - Malformed JSON anywhere in the payload is refused as "not valid JSON":
    ///   trailing commas, and numbers or strings that break RFC 8259 (leading
    ///   zeros, bad escapes, lone surrogates, control characters, invalid
    ///   UTF-8) in fields the decoder does not read. `JSONDecoder` accepted those
    ///   in unknown fields, and refused them in known ones with that field's
    ///   message ("\"data\" must be a string or a number.").
    /// - A number counts as an integer when its exact value is one, whatever the
    ///   notation (`7.0`, `70e-1`, `9223372036854775807.0`). `JSONDecoder` read
    ///   such notations through `Double`, so `1.0000000000000001` and `1e-400`
    ///   passed as the integers 1 and 0, a fraction was dropped from 2^53 up
    ///   (`9007199254740993.5` read as 9007199254740993), and some exact
    ///   integers near 2^63 were refused. The same holds for a number in a text
    ///   field: `1.0000000000000001` becomes `"1.0"`, not `"1"`.
    /// - A top-level `null` is refused as "must be a JSON object", like any other
    ///   JSON that is not an object; `JSONDecoder` called it "not valid JSON".
    /// - Only UTF-8 is read; `JSONDecoder` also read UTF-16 and UTF-32.
    ///
    /// As before, when a key appears twice its first occurrence counts.
    public static func decode(_ bytes: some Collection<UInt8>) throws(WireError) -> WireMessage {
        let inPlace = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(WireError) in try decode(buffer: buffer) }
        }
        if let inPlace {
            return try inPlace.get()
        }
        return try Array(bytes).withUnsafeBufferPointer { buffer in
            Result { () throws(WireError) in try decode(buffer: buffer) }
        }.get()
    }

    /// ``decode(_:)`` on bytes in memory, where the reader is specialized.
    private static func decode(buffer: UnsafeBufferPointer<UInt8>) throws(WireError) -> WireMessage {
        let hasByteOrderMark = buffer.count >= 3 && buffer[0] == 0xEF && buffer[1] == 0xBB && buffer[2] == 0xBF
        let json = hasByteOrderMark ? UnsafeBufferPointer(rebasing: buffer[3...]) : buffer
        var fields = ReceivedFields()
        do throws(JSONReadError) {
            try JSONObjectReader.forEachField(in: json) { fields.take($0) }
        } catch where error.reason == .notAnObject {
            throw WireError(.invalidPayload, "The payload must be a JSON object with a \"command\" field.")
        } catch {
            throw WireError(.invalidPayload, "The payload is not valid JSON; send an object such as {\"command\":1,\"data\":\"left\",\"serial\":1}.")
        }
        return try fields.decoded()
    }

    /// The first occurrence of each field ``decode(_:)`` reads; `.null` when it was `null`.
    private struct ReceivedFields {
        var command, data, serial, length, message, timeout, session, player: JSONValue?

        mutating func take(_ field: JSONField) {
            // The first occurrence wins, as it did with JSONDecoder.
            switch field.key {
            case "command": command = command ?? field.value
            case "data": data = data ?? field.value
            case "serial": serial = serial ?? field.value
            case "length": length = length ?? field.value
            case "message": message = message ?? field.value
            case "timeout": timeout = timeout ?? field.value
            case "session": session = session ?? field.value
            case "player": player = player ?? field.value
            default: break
            }
        }

        /// The message, checking the fields in the order the Foundation-based
        /// decoder did, so that a payload with several bad fields gets the same message.
        func decoded() throws(WireError) -> WireMessage {
            guard let command, command != .null else {
                throw WireError(.invalidPayload, "The payload has no \"command\" field.")
            }
            guard let code = Self.integer(command).flatMap({ Int(exactly: $0) }) else {
                throw WireError(.invalidPayload, "\"command\" must be an integer or a numeric string.")
            }
            var decoded = WireMessage(command: code)
            decoded.data = try Self.text(data, "data")
            decoded.serial = try Self.optionalInteger(serial, "serial")
            decoded.length = try Self.optionalInteger(length, "length").flatMap { Int(exactly: $0) }
            decoded.timeout = try Self.optionalInteger(timeout, "timeout").flatMap { Int(exactly: $0) }
            decoded.message = try Self.text(message, "message")
            decoded.session = try Self.text(session, "session")
            decoded.player = try Self.text(player, "player")
            return decoded
        }

        private static func optionalInteger(_ value: JSONValue?, _ key: String) throws(WireError) -> Int64? {
            guard let value, value != .null else { return nil }
            guard let number = integer(value) else {
                throw WireError(.invalidPayload, "\"\(key)\" must be an integer or a numeric string.")
            }
            return number
        }

        /// An integral JSON number, or a string holding one; nil for anything else.
        private static func integer(_ value: JSONValue) -> Int64? {
            switch value {
            case .number(let number): number.int64
            case .string(let string): Int64(string)
            default: nil
            }
        }

        /// A JSON string, or a number kept as its string form.
        private static func text(_ value: JSONValue?, _ key: String) throws(WireError) -> String? {
            switch value {
            case nil, .null?:
                return nil
            case .string(let string)?:
                return string
            case .number(let number)?:
                if let integer = number.int64 { return String(integer) }
                let double = number.double
                if double.isFinite { return String(double) }
            default:
                break
            }
            throw WireError(.invalidPayload, "\"\(key)\" must be a string or a number.")
        }
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
        JSONText.appendInteger(Int64(command), to: &out)
        if let data { JSONText.appendField("data", string: data, to: &out) }
        if let serial { JSONText.appendField("serial", integer: serial, to: &out) }
        if let length { JSONText.appendField("length", integer: Int64(length), to: &out) }
        if let message { JSONText.appendField("message", string: message, to: &out) }
        if let timeout { JSONText.appendField("timeout", integer: Int64(timeout), to: &out) }
        if let session { JSONText.appendField("session", string: session, to: &out) }
        if let player { JSONText.appendField("player", string: player, to: &out) }
        if let settings {
            out.append(contentsOf: #","settings":"#.utf8)
            settings.append(to: &out)
        }
        if let balance { JSONText.appendField("balance", integer: balance, to: &out) }
        if let price { JSONText.appendField("price", integer: price, to: &out) }
        if let change { JSONText.appendField("change", integer: change, to: &out) }
        if let reason { JSONText.appendField("reason", string: reason, to: &out) }
        if let state { JSONText.appendField("state", string: state, to: &out) }
        if let prize { JSONText.appendField("prize", string: prize, to: &out) }
        if let tracking { JSONText.appendField("tracking", string: tracking, to: &out) }
        if let isContinue { JSONText.appendField("continue", bool: isContinue, to: &out) }
        if let corrected { JSONText.appendField("corrected", bool: corrected, to: &out) }
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
        appendInteger(integer, to: &out)
    }

    /// Decimal digits, without making a String.
    static func appendInteger(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        var digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        var count = 0
        withUnsafeMutableBytes(of: &digits) { buffer in
            repeat {
                buffer[19 - count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            out.append(contentsOf: buffer[(20 - count)...])
        }
    }

    static func appendField(_ key: String, number: Double, to out: inout [UInt8]) {
        appendKey(key, to: &out)
        appendNumber(number, to: &out)
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
