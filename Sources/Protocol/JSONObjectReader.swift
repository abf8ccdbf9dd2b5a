/// A strict RFC 8259 reader for one JSON object, such as a wire message:
/// it hands back the object's top-level fields in order and only checks the
/// nested objects and arrays, without building them.
///
/// What it accepts is exactly RFC 8259 JSON text whose top-level value is an
/// object, encoded as UTF-8 without a byte order mark: no trailing commas, no
/// comments, no leading zeros, no `NaN` or `Infinity`, no unescaped control
/// characters or invalid UTF-8 in strings, no lone surrogates in `\u`
/// escapes, whitespace only space, tab, CR and LF (before and after the
/// object too), and nothing after the object. Nesting is limited to
/// ``maximumDepth`` and is followed with a loop, so no input can exhaust the
/// stack; every input is either read or refused with a ``JSONReadError``.
///
/// Where Foundation's `JSONSerialization` (swift-corelibs-foundation) reads
/// the same text differently, on purpose:
/// - Duplicate keys are all handed back, in order; `JSONSerialization` keeps
///   the last one. The reader leaves the choice to its caller.
/// - Trailing commas (`{"a":1,}`, `[1,]`) are refused; `JSONSerialization`
///   accepts them.
/// - A number beyond `Double`'s range, such as `1e400`, is valid JSON and is
///   read (``JSONNumber/double`` is then infinite); `JSONSerialization`
///   refuses the whole text.
/// - Only UTF-8 is read, and a byte order mark is refused; `JSONSerialization`
///   skips one and also reads UTF-16 and UTF-32.
/// - A U+FEFF written as raw UTF-8 at the start of a string, or right after
///   an escape, is kept (as `JSONDecoder` keeps it); `JSONSerialization`
///   drops it.
public enum JSONObjectReader {
    /// The deepest nesting read, counting the top-level object as 1; the
    /// same limit as Foundation's JSON parsers.
    public static let maximumDepth = 512

    /// Reads `bytes` as one JSON object and returns its top-level fields in
    /// the order they are written, duplicates included.
    ///
    /// Contiguous collections (`[UInt8]`, `ArraySlice<UInt8>`,
    /// `UnsafeRawBufferPointer`, `Data`, a native `String.UTF8View`) are read
    /// in place; any other collection is copied once. The byte ranges of
    /// nested values count from the first byte of `bytes`.
    public static func fields(in bytes: some Collection<UInt8>) throws(JSONReadError) -> [JSONField] {
        var fields: [JSONField] = []
        try forEachField(in: bytes) { fields.append($0) }
        return fields
    }

    /// Reads `bytes` as one JSON object and hands each top-level field to
    /// `body` as soon as it is read, without collecting them (see
    /// ``fields(in:)``).
    ///
    /// Fields are handed over before the rest of the text is checked: when
    /// this throws, `body` may already have seen some fields of the refused
    /// text, and they should be discarded.
    public static func forEachField(
        in bytes: some Collection<UInt8>, _ body: (JSONField) -> Void
    ) throws(JSONReadError) {
        let inPlace = bytes.withContiguousStorageIfAvailable { buffer in
            Result { () throws(JSONReadError) in try read(buffer, body) }
        }
        if let inPlace {
            return try inPlace.get()
        }
        let copy = Array(bytes)
        try copy.withUnsafeBufferPointer { buffer in
            Result { () throws(JSONReadError) in try read(buffer, body) }
        }.get()
    }

    private static func read(_ buffer: UnsafeBufferPointer<UInt8>, _ body: (JSONField) -> Void) throws(JSONReadError) {
        var scanner = Scanner(buffer)
        try scanner.readObject(body)
    }
}

/// One top-level field of a JSON object.
public struct JSONField: Sendable, Hashable {
    /// The key, escapes decoded.
    public var key: String
    /// The value: scalars decoded, nested objects and arrays as byte ranges.
    public var value: JSONValue

    /// A field with `key` and `value`, e.g. to compare with what the reader found.
    public init(key: String, value: JSONValue) {
        self.key = key
        self.value = value
    }
}

/// The value of a top-level field: scalars decoded, nested objects and arrays
/// as the place of their text in the input.
public enum JSONValue: Sendable, Hashable {
    /// A string, escapes decoded (`\u` escapes and surrogate pairs included).
    case string(String)
    /// A number, as written (see ``JSONNumber``).
    case number(JSONNumber)
    /// `true` or `false`.
    case bool(Bool)
    /// `null`.
    case null
    /// A nested object, checked but not built: the byte offsets of its text,
    /// braces included, from the first byte of the input.
    case object(Range<Int>)
    /// A nested array, checked but not built: the byte offsets of its text,
    /// brackets included, from the first byte of the input.
    case array(Range<Int>)
}

/// A JSON number, kept as written so that no precision is lost before the
/// caller chooses a type.
public struct JSONNumber: Sendable, Hashable, CustomStringConvertible {
    /// The number exactly as written, e.g. `-1.50e+3`.
    public let text: String

    /// Only the reader makes numbers, so `text` always follows RFC 8259's grammar.
    init(validated text: String) {
        self.text = text
    }

    /// The number as written.
    public var description: String { text }

    /// The number as an `Int64` when its exact value is a whole number in
    /// range, whatever the notation: `7`, `-0`, `7.0`, `70e-1` and `0.7e1` all
    /// qualify; `7.5`, `1.0000000000000001` and `9223372036854775808` do not.
    public var int64: Int64? {
        var negative = false
        var inFraction = false, inExponent = false
        // The significant digits (from the first non-zero one to the last), as a number.
        var significand: UInt64 = 0
        var significantDigits = 0
        // Zeros seen after the last non-zero digit: they count only if another one follows.
        var pendingZeros = 0
        var fractionDigits = 0
        var exponent = 0, exponentNegative = false
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "-") where inExponent: exponentNegative = true
            case UInt8(ascii: "-"): negative = true
            case UInt8(ascii: "+"): break
            case UInt8(ascii: "."): inFraction = true
            case UInt8(ascii: "e"), UInt8(ascii: "E"): inExponent = true
            case UInt8(ascii: "0")...UInt8(ascii: "9") where inExponent:
                // Saturate: any exponent this large already decides the answer.
                if exponent < 1_000_000_000 { exponent = exponent * 10 + Int(byte - UInt8(ascii: "0")) }
            case UInt8(ascii: "0")...UInt8(ascii: "9"):
                if inFraction { fractionDigits += 1 }
                let digit = UInt64(byte - UInt8(ascii: "0"))
                if digit == 0 {
                    if significantDigits > 0 { pendingZeros += 1 }
                    continue
                }
                significantDigits += pendingZeros + 1
                // More than 19 significant digits is beyond Int64 (or not whole); keep counting only.
                if significantDigits <= 19 {
                    for _ in 0..<pendingZeros { significand *= 10 }
                    significand = significand * 10 + digit
                }
                pendingZeros = 0
            default:
                return nil
            }
        }
        guard significantDigits > 0 else { return 0 }
        guard significantDigits <= 19 else { return nil }
        // The value is significand × 10^scale, and the significand's last digit is not 0.
        let scale = (exponentNegative ? -exponent : exponent) - fractionDigits + pendingZeros
        guard scale >= 0, significantDigits + scale <= 19 else { return nil }
        var magnitude = significand
        for _ in 0..<scale {
            let (product, overflow) = magnitude.multipliedReportingOverflow(by: 10)
            guard !overflow else { return nil }
            magnitude = product
        }
        if negative {
            guard magnitude <= UInt64(Int64.max) + 1 else { return nil }
            return magnitude == UInt64(Int64.max) + 1 ? .min : -Int64(magnitude)
        }
        return Int64(exactly: magnitude)
    }

    /// The nearest `Double` (rounding half to even): infinite beyond
    /// `Double`'s range, zero below its smallest subnormal.
    public var double: Double {
        // Every RFC 8259 number is in the grammar Double's parser reads, so nan is unreachable.
        Double(text) ?? .nan
    }
}

/// Why a text is not one JSON object, and where.
public struct JSONReadError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong with the text.
    public enum Reason: Sendable, Hashable, CaseIterable {
        /// The text ends before the object does (an empty text included).
        case unexpectedEnd
        /// A byte that cannot stand where it is, such as a missing colon or a bare word.
        case unexpectedByte
        /// Well-formed JSON whose top-level value is not an object.
        case notAnObject
        /// Something other than whitespace after the object.
        case trailingData
        /// A comma right before `}` or `]`.
        case trailingComma
        /// A number outside RFC 8259's grammar: a leading zero, a bare `-`, `1.`, `1e`.
        case invalidNumber
        /// A backslash not followed by one of `"\/bfnrt` or by `u` and four hex digits.
        case invalidEscape
        /// A `\u` escape of a high surrogate not followed by one of a low
        /// surrogate, or of a low surrogate on its own.
        case loneSurrogate
        /// A byte below 0x20 inside a string: control characters must be escaped.
        case controlCharacter
        /// Bytes that are not well-formed UTF-8 inside a string.
        case invalidUTF8
        /// Objects and arrays nested deeper than ``JSONObjectReader/maximumDepth``.
        case tooDeep
    }

    /// What is wrong.
    public var reason: Reason
    /// Where the problem is: a byte offset from the first byte of the input.
    public var offset: Int

    /// The error for `reason` at byte `offset` of the input.
    public init(_ reason: Reason, at offset: Int) {
        self.reason = reason
        self.offset = offset
    }

    /// The reason in a few words, e.g. "invalid escape".
    public var summary: String {
        switch reason {
        case .unexpectedEnd: "unexpected end of text"
        case .unexpectedByte: "unexpected byte"
        case .notAnObject: "not an object"
        case .trailingData: "text after the object"
        case .trailingComma: "trailing comma"
        case .invalidNumber: "invalid number"
        case .invalidEscape: "invalid escape"
        case .loneSurrogate: "lone surrogate"
        case .controlCharacter: "unescaped control character"
        case .invalidUTF8: "invalid UTF-8"
        case .tooDeep: "nested too deep"
        }
    }

    /// The summary and the place, e.g. "invalid escape at byte 12".
    public var description: String { "\(summary) at byte \(offset)" }
}

// MARK: - Scanning

private enum ASCII {
    static let quote = UInt8(ascii: "\"")
    static let backslash = UInt8(ascii: "\\")
    static let slash = UInt8(ascii: "/")
    static let colon = UInt8(ascii: ":")
    static let comma = UInt8(ascii: ",")
    static let minus = UInt8(ascii: "-")
    static let plus = UInt8(ascii: "+")
    static let dot = UInt8(ascii: ".")
    static let zero = UInt8(ascii: "0")
    static let nine = UInt8(ascii: "9")
    static let openBrace = UInt8(ascii: "{")
    static let closeBrace = UInt8(ascii: "}")
    static let openBracket = UInt8(ascii: "[")
    static let closeBracket = UInt8(ascii: "]")

    static func isDigit(_ byte: UInt8) -> Bool { byte >= zero && byte <= nine }

    static func hexValue(_ byte: UInt8) -> UInt16? {
        switch byte {
        case zero...nine: UInt16(byte - zero)
        case UInt8(ascii: "a")...UInt8(ascii: "f"): UInt16(byte - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): UInt16(byte - UInt8(ascii: "A") + 10)
        default: nil
        }
    }
}

/// A cursor over the input. Every read of `bytes[i]` is preceded by a check
/// that `i < bytes.count`: release builds do not check `UnsafeBufferPointer`
/// subscripts.
private struct Scanner {
    let bytes: UnsafeBufferPointer<UInt8>
    var position = 0

    init(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes = bytes
    }

    var current: UInt8? { position < bytes.count ? bytes[position] : nil }

    /// The byte at `position`, or the error for a text that ends there.
    func require() throws(JSONReadError) -> UInt8 {
        guard position < bytes.count else { throw JSONReadError(.unexpectedEnd, at: position) }
        return bytes[position]
    }

    mutating func skipWhitespace() {
        while position < bytes.count {
            switch bytes[position] {
            case 0x20, 0x09, 0x0A, 0x0D: position += 1
            default: return
            }
        }
    }

    mutating func expect(_ byte: UInt8) throws(JSONReadError) {
        guard try require() == byte else { throw JSONReadError(.unexpectedByte, at: position) }
        position += 1
    }

    // MARK: The top level

    mutating func readObject(_ body: (JSONField) -> Void) throws(JSONReadError) {
        skipWhitespace()
        let start = position
        guard try require() == ASCII.openBrace else {
            // Tell well-formed JSON that is not an object from malformed text.
            try skipValue(enclosingDepth: 0)
            try expectEnd()
            throw JSONReadError(.notAnObject, at: start)
        }
        position += 1
        skipWhitespace()
        if try require() == ASCII.closeBrace {
            position += 1
            return try expectEnd()
        }
        while true {
            guard try require() == ASCII.quote else { throw JSONReadError(.unexpectedByte, at: position) }
            let key = try readString()
            skipWhitespace()
            try expect(ASCII.colon)
            skipWhitespace()
            let value = try readValue()
            body(JSONField(key: key, value: value))
            skipWhitespace()
            switch try require() {
            case ASCII.closeBrace:
                position += 1
                return try expectEnd()
            case ASCII.comma:
                let comma = position
                position += 1
                skipWhitespace()
                if try require() == ASCII.closeBrace { throw JSONReadError(.trailingComma, at: comma) }
            default:
                throw JSONReadError(.unexpectedByte, at: position)
            }
        }
    }

    mutating func expectEnd() throws(JSONReadError) {
        skipWhitespace()
        if position < bytes.count { throw JSONReadError(.trailingData, at: position) }
    }

    /// The value of a top-level field, at `position`.
    mutating func readValue() throws(JSONReadError) -> JSONValue {
        let start = position
        switch try require() {
        case ASCII.quote:
            return .string(try readString())
        case ASCII.openBrace:
            try skipContainer(enclosingDepth: 1)
            return .object(start..<position)
        case ASCII.openBracket:
            try skipContainer(enclosingDepth: 1)
            return .array(start..<position)
        case ASCII.minus, ASCII.zero...ASCII.nine:
            try skipNumber()
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<position]), as: UTF8.self)
            return .number(JSONNumber(validated: text))
        default:
            return try readLiteral()
        }
    }

    /// Checks any JSON value at `position` and moves past it.
    mutating func skipValue(enclosingDepth: Int) throws(JSONReadError) {
        switch try require() {
        case ASCII.openBrace, ASCII.openBracket: try skipContainer(enclosingDepth: enclosingDepth)
        default: try skipScalar()
        }
    }

    mutating func skipScalar() throws(JSONReadError) {
        switch try require() {
        case ASCII.quote: _ = try scanString()
        case ASCII.minus, ASCII.zero...ASCII.nine: try skipNumber()
        default: _ = try readLiteral()
        }
    }

    mutating func readLiteral() throws(JSONReadError) -> JSONValue {
        let (word, value): (StaticString, JSONValue) =
            switch try require() {
            case UInt8(ascii: "t"): ("true", .bool(true))
            case UInt8(ascii: "f"): ("false", .bool(false))
            case UInt8(ascii: "n"): ("null", .null)
            default: throw JSONReadError(.unexpectedByte, at: position)
            }
        for expected in UnsafeBufferPointer(start: word.utf8Start, count: word.utf8CodeUnitCount) {
            guard try require() == expected else { throw JSONReadError(.unexpectedByte, at: position) }
            position += 1
        }
        return value
    }

    // MARK: Nesting

    /// Checks the object or array at `position` and moves past it, without
    /// recursion: a stack of the open containers lives in a fixed buffer.
    /// `enclosingDepth` is the depth of the container this one is in.
    mutating func skipContainer(enclosingDepth: Int) throws(JSONReadError) {
        let capacity = JSONObjectReader.maximumDepth - enclosingDepth
        guard capacity > 0 else { throw JSONReadError(.tooDeep, at: position) }
        try withUnsafeTemporaryAllocation(of: Bool.self, capacity: capacity) { (isObject) throws(JSONReadError) in
            var open = 0
            // Whether the next thing is a value (true) or what follows one.
            var expectingValue = true
            while true {
                if expectingValue {
                    let byte = try require()
                    guard byte == ASCII.openBrace || byte == ASCII.openBracket else {
                        try skipScalar()
                        expectingValue = false
                        continue
                    }
                    guard open < capacity else { throw JSONReadError(.tooDeep, at: position) }
                    isObject[open] = byte == ASCII.openBrace
                    open += 1
                    position += 1
                    skipWhitespace()
                    if try require() == (byte == ASCII.openBrace ? ASCII.closeBrace : ASCII.closeBracket) {
                        position += 1
                        open -= 1
                        expectingValue = false
                    } else if byte == ASCII.openBrace {
                        try skipMemberName()
                    }
                } else {
                    if open == 0 { return }
                    skipWhitespace()
                    let inObject = isObject[open - 1]
                    let byte = try require()
                    if byte == ASCII.comma {
                        let comma = position
                        position += 1
                        skipWhitespace()
                        if try require() == (inObject ? ASCII.closeBrace : ASCII.closeBracket) {
                            throw JSONReadError(.trailingComma, at: comma)
                        }
                        if inObject { try skipMemberName() }
                        expectingValue = true
                    } else if byte == (inObject ? ASCII.closeBrace : ASCII.closeBracket) {
                        position += 1
                        open -= 1
                    } else {
                        throw JSONReadError(.unexpectedByte, at: position)
                    }
                }
            }
        }
    }

    /// `"name"`, the colon and the whitespace around it, up to the member's value.
    mutating func skipMemberName() throws(JSONReadError) {
        guard try require() == ASCII.quote else { throw JSONReadError(.unexpectedByte, at: position) }
        _ = try scanString()
        skipWhitespace()
        try expect(ASCII.colon)
        skipWhitespace()
    }

    // MARK: Numbers

    /// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?` at `position`.
    mutating func skipNumber() throws(JSONReadError) {
        if bytes[position] == ASCII.minus { position += 1 }
        switch try require() {
        case ASCII.zero:
            position += 1
            if let next = current, ASCII.isDigit(next) { throw JSONReadError(.invalidNumber, at: position) }
        case UInt8(ascii: "1")...ASCII.nine:
            skipDigits()
        default:
            throw JSONReadError(.invalidNumber, at: position)
        }
        if current == ASCII.dot {
            position += 1
            try skipRequiredDigits()
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            position += 1
            if current == ASCII.plus || current == ASCII.minus { position += 1 }
            try skipRequiredDigits()
        }
    }

    mutating func skipDigits() {
        while position < bytes.count, ASCII.isDigit(bytes[position]) { position += 1 }
    }

    mutating func skipRequiredDigits() throws(JSONReadError) {
        guard ASCII.isDigit(try require()) else { throw JSONReadError(.invalidNumber, at: position) }
        skipDigits()
    }

    // MARK: Strings

    /// Checks the string at `position` (its opening quote) and moves past its
    /// closing quote; returns whether it holds any escape.
    mutating func scanString() throws(JSONReadError) -> Bool {
        position += 1
        var escaped = false
        while true {
            // The common run: printable ASCII other than the quote and the backslash.
            while position < bytes.count {
                let byte = bytes[position]
                guard byte >= 0x20, byte < 0x80, byte != ASCII.quote, byte != ASCII.backslash else { break }
                position += 1
            }
            let byte = try require()
            switch byte {
            case ASCII.quote:
                position += 1
                return escaped
            case ASCII.backslash:
                escaped = true
                try skipEscape()
            case ..<0x20:
                throw JSONReadError(.controlCharacter, at: position)
            default:
                try skipUTF8Sequence()
            }
        }
    }

    /// A backslash escape at `position`; a high surrogate must be followed by
    /// the escape of a low one.
    mutating func skipEscape() throws(JSONReadError) {
        let start = position
        position += 1
        switch try require() {
        case ASCII.quote, ASCII.backslash, ASCII.slash, UInt8(ascii: "b"), UInt8(ascii: "f"), UInt8(ascii: "n"),
            UInt8(ascii: "r"), UInt8(ascii: "t"):
            position += 1
        case UInt8(ascii: "u"):
            position += 1
            let unit = try hexQuad(escapeStart: start)
            switch unit {
            case 0xD800...0xDBFF:
                guard position + 1 < bytes.count, bytes[position] == ASCII.backslash,
                    bytes[position + 1] == UInt8(ascii: "u")
                else { throw JSONReadError(.loneSurrogate, at: start) }
                let low = position
                position += 2
                guard (0xDC00...0xDFFF).contains(try hexQuad(escapeStart: low)) else {
                    throw JSONReadError(.loneSurrogate, at: start)
                }
            case 0xDC00...0xDFFF:
                throw JSONReadError(.loneSurrogate, at: start)
            default:
                break
            }
        default:
            throw JSONReadError(.invalidEscape, at: start)
        }
    }

    /// The four hex digits of a `\u` escape, at `position`.
    mutating func hexQuad(escapeStart: Int) throws(JSONReadError) -> UInt16 {
        var unit: UInt16 = 0
        for _ in 0..<4 {
            guard let digit = ASCII.hexValue(try require()) else { throw JSONReadError(.invalidEscape, at: escapeStart) }
            unit = unit << 4 | digit
            position += 1
        }
        return unit
    }

    /// One well-formed UTF-8 sequence of two to four bytes at `position`
    /// (RFC 3629 §4: no overlong forms, no surrogates, nothing above U+10FFFF).
    mutating func skipUTF8Sequence() throws(JSONReadError) {
        let lead = bytes[position]
        let (length, secondRange): (Int, ClosedRange<UInt8>) =
            switch lead {
            case 0xC2...0xDF: (2, 0x80...0xBF)
            case 0xE0: (3, 0xA0...0xBF)
            case 0xE1...0xEC, 0xEE...0xEF: (3, 0x80...0xBF)
            case 0xED: (3, 0x80...0x9F)
            case 0xF0: (4, 0x90...0xBF)
            case 0xF1...0xF3: (4, 0x80...0xBF)
            case 0xF4: (4, 0x80...0x8F)
            default: throw JSONReadError(.invalidUTF8, at: position)
            }
        guard position + length <= bytes.count, secondRange.contains(bytes[position + 1]) else {
            throw JSONReadError(.invalidUTF8, at: position)
        }
        for offset in 2..<length where !(0x80...0xBF).contains(bytes[position + offset]) {
            throw JSONReadError(.invalidUTF8, at: position)
        }
        position += length
    }

    /// The string at `position`, checked and decoded.
    mutating func readString() throws(JSONReadError) -> String {
        let start = position + 1
        let escaped = try scanString()
        let content = UnsafeBufferPointer(rebasing: bytes[start..<(position - 1)])
        guard escaped else { return String(decoding: content, as: UTF8.self) }
        // Every escape is at least as long as the UTF-8 it stands for.
        return String(unsafeUninitializedCapacity: content.count) { Self.unescape(content, into: $0) }
    }

    /// Decodes the escapes of string content that ``scanString()`` accepted.
    private static func unescape(
        _ content: UnsafeBufferPointer<UInt8>, into output: UnsafeMutableBufferPointer<UInt8>
    ) -> Int {
        var read = 0, written = 0
        func append(_ byte: UInt8) {
            output[written] = byte
            written += 1
        }
        func hexQuad(at index: Int) -> UInt32 {
            content[index..<index + 4].reduce(0) { $0 << 4 | UInt32(ASCII.hexValue($1) ?? 0) }
        }
        while read < content.count {
            let byte = content[read]
            guard byte == ASCII.backslash else {
                append(byte)
                read += 1
                continue
            }
            let kind = content[read + 1]
            read += 2
            switch kind {
            case UInt8(ascii: "b"): append(0x08)
            case UInt8(ascii: "f"): append(0x0C)
            case UInt8(ascii: "n"): append(0x0A)
            case UInt8(ascii: "r"): append(0x0D)
            case UInt8(ascii: "t"): append(0x09)
            case UInt8(ascii: "u"):
                var scalar = hexQuad(at: read)
                read += 4
                if (0xD800...0xDBFF).contains(scalar) {
                    // scanString() made sure a low surrogate's escape follows.
                    let low = hexQuad(at: read + 2)
                    read += 6
                    scalar = 0x10000 + (scalar - 0xD800) << 10 + (low - 0xDC00)
                }
                switch scalar {
                case ..<0x80:
                    append(UInt8(scalar))
                case ..<0x800:
                    append(UInt8(0xC0 | scalar >> 6))
                    append(UInt8(0x80 | scalar & 0x3F))
                case ..<0x10000:
                    append(UInt8(0xE0 | scalar >> 12))
                    append(UInt8(0x80 | scalar >> 6 & 0x3F))
                    append(UInt8(0x80 | scalar & 0x3F))
                default:
                    append(UInt8(0xF0 | scalar >> 18))
                    append(UInt8(0x80 | scalar >> 12 & 0x3F))
                    append(UInt8(0x80 | scalar >> 6 & 0x3F))
                    append(UInt8(0x80 | scalar & 0x3F))
                }
            default:
                // `"`, `\` and `/` stand for themselves.
                append(kind)
            }
        }
        return written
    }
}
