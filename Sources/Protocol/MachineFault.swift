/// What a machine's PC publishes on `claw/<m>/fault` when its board reports
/// a fault (SPEC §12): `{"code":"claw_rise_timeout","text":"…"}`.
///
/// The code is the board's vocabulary, passed on as it is: an unknown code
/// is a fault like any other. It names a metric label, so it is kept short
/// and plain; the text is for people.
public struct MachineFaultReport: Sendable, Equatable, Codable {
    public var code: String
    public var text: String

    public static var maxCodeLength: Int { 64 }
    public static var maxTextLength: Int { 500 }

    public init(code: String, text: String) {
        self.code = code
        self.text = text
    }

    /// Why a fault message was not taken.
    public struct Invalid: Error, Sendable, Equatable, CustomStringConvertible {
        public var message: String
        public var description: String { message }
    }

    /// Reads a fault message: a JSON object whose `code` is 1 to 64 ASCII
    /// letters, digits, `_`, `-` or `.`, and whose `text`, if any, is a
    /// string of at most 500 characters. Anything else is refused, saying why.
    public static func decode(_ payload: [UInt8]) throws(Invalid) -> MachineFaultReport {
        let fields: [JSONField]
        do throws(JSONReadError) {
            fields = try JSONObjectReader.fields(in: payload)
        } catch {
            throw Invalid(message: "not a JSON object (\(error.summary))")
        }
        // The first occurrence of a key counts, as in every message the gateway reads.
        let code = fields.first { $0.key == "code" }?.value, text = fields.first { $0.key == "text" }?.value
        guard case .string(let code)? = code else { throw Invalid(message: "code: missing, or not a string") }
        guard (1...maxCodeLength).contains(code.utf8.count), code.utf8.allSatisfy(plain) else {
            throw Invalid(message: "code: 1 to \(maxCodeLength) letters, digits, '_', '-' or '.'")
        }
        switch text {
        case nil, .null?:
            return MachineFaultReport(code: code, text: "")
        case .string(let given)?:
            guard given.count <= maxTextLength else { throw Invalid(message: "text: longer than \(maxTextLength) characters") }
            return MachineFaultReport(code: code, text: given)
        default:
            throw Invalid(message: "text: not a string")
        }
    }

    private static func plain(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "_"), UInt8(ascii: "-"), UInt8(ascii: "."):
            true
        default: false
        }
    }
}

/// A machine's fault as its snapshot shows it while it is in maintenance:
/// the board's code and text, and when the gateway heard of it.
public struct MachineFault: Sendable, Equatable, Codable {
    public var code: String
    public var text: String
    /// ISO 8601 UTC with milliseconds.
    public var at: String

    public init(code: String, text: String, at: String) {
        self.code = code
        self.text = text
        self.at = at
    }
}
