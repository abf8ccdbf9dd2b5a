import Protocol
import Testing

@Suite("JSON object reader: strict RFC 8259, top-level fields only")
struct JSONObjectReaderTests {
    private func fields(_ json: String) throws(JSONReadError) -> [JSONField] {
        try JSONObjectReader.fields(in: Array(json.utf8))
    }

    private func fields(_ bytes: [UInt8]) throws(JSONReadError) -> [JSONField] {
        try JSONObjectReader.fields(in: bytes)
    }

    /// The error reading `bytes` throws, or nil when it reads.
    private func refusal(_ bytes: [UInt8]) -> JSONReadError? {
        do throws(JSONReadError) {
            _ = try JSONObjectReader.fields(in: bytes)
            return nil
        } catch {
            return error
        }
    }

    private func refusal(_ json: String) -> JSONReadError? {
        refusal(Array(json.utf8))
    }

    /// The value of the only field of `{"v":<json>}`.
    private func value(_ json: String) throws(JSONReadError) -> JSONValue? {
        try fields(#"{"v":"# + json + "}").first?.value
    }

    private func number(_ text: String) throws(JSONReadError) -> JSONNumber? {
        guard case .number(let number)? = try value(text) else { return nil }
        return number
    }

    // MARK: Fields

    @Test("every kind of value, in order, duplicates included")
    func kinds() throws {
        let json = #"{"s":"x","n":-1.50e+3,"t":true,"f":false,"z":null,"o":{"a":[1]},"a":[1,{"b":2}],"s":""}"#
        let read = try fields(json)
        #expect(read.map(\.key) == ["s", "n", "t", "f", "z", "o", "a", "s"])
        #expect(read[0].value == .string("x"))
        guard case .number(let number) = read[1].value else { Issue.record("not a number: \(read[1].value)"); return }
        #expect(number.text == "-1.50e+3")
        #expect(number.double == -1500)
        #expect(number.int64 == -1500)
        #expect(read[2].value == .bool(true))
        #expect(read[3].value == .bool(false))
        #expect(read[4].value == .null)
        #expect(read[5].value == .object(54..<63))
        #expect(read[6].value == .array(68..<79))
        #expect(read[7].value == .string(""))
    }

    @Test("whitespace is space, tab, CR and LF, before, between and after", arguments: [
        "{}", " {} ", "\t\r\n{\t\r\n}\t\r\n", #"{ "a" : 1 , "b" : [ 1 , { } ] }"#, "\n{\"a\"\n:\n1\n}\n",
    ])
    func whitespace(_ json: String) throws {
        _ = try fields(json)
    }

    @Test("an empty object has no fields")
    func empty() throws {
        #expect(try fields(" { } ").isEmpty)
    }

    @Test("forEachField hands over what fields(in:) returns")
    func visitor() throws {
        let json = Array(#"{"a":1,"b":"x","a":[true]}"#.utf8)
        var seen: [JSONField] = []
        try JSONObjectReader.forEachField(in: json) { seen.append($0) }
        #expect(try seen == JSONObjectReader.fields(in: json))
    }

    // MARK: Strings

    @Test("escapes are decoded", arguments: [
        (#""\"""#, "\""), (#""\\""#, "\\"), (#""\/""#, "/"), (#""\b\f\n\r\t""#, "\u{8}\u{C}\n\r\t"),
        (#""\u0041""#, "A"), (#""\u00e9\u00E9""#, "éé"), (#""\u5de6""#, "左"), (#""\u0000""#, "\u{0}"),
        (#""\u001f\u007f""#, "\u{1F}\u{7F}"), (#""\uffff""#, "\u{FFFF}"), (#""\ud83d\ude00""#, "😀"),
        (#""\uD83D\uDE00""#, "😀"), (#""\udbff\udfff""#, "\u{10FFFF}"), (#""\ud800\udc00""#, "\u{10000}"),
        (#""a\nb\u00e9c\"d""#, "a\nbéc\"d"), (#""Zoë 左 😀""#, "Zoë 左 😀"), (#""\ufeff""#, "\u{FEFF}"),
        ("\"\u{7F}\"", "\u{7F}"),
    ])
    func escapes(_ json: String, _ expected: String) throws {
        #expect(try value(json) == .string(expected))
    }

    @Test("keys are decoded like values")
    func escapedKeys() throws {
        #expect(try fields(#"{"comm\u0061nd":1,"\ud83d\ude00":2,"":3}"#).map(\.key) == ["command", "😀", ""])
    }

    @Test("a surrogate must come as a high and low pair", arguments: [
        #""\ud800""#, #""\udc00""#, #""\ud800x""#, #""\ud800\u0041""#, #""\ud800\udbff""#, #""\ude00\ud83d""#,
        #""\ud800\n""#, #""\ud800\""#, #""x\udfff""#,
    ])
    func loneSurrogates(_ json: String) throws {
        let error = try #require(refusal(#"{"v":"# + json + "}"))
        #expect(error.reason == .loneSurrogate)
        // At the backslash of the escape that has no partner.
        let bytes = Array((#"{"v":"# + json + "}").utf8)
        #expect(bytes[error.offset] == UInt8(ascii: "\\"))
    }

    @Test("only the escapes RFC 8259 lists", arguments: [
        #""\x""#, #""\U0041""#, #""\u12G4""#, #""\u12""#, #""\'""#, #""\a""#, #""\0""#, #""\ ""#, #""\u{41}""#,
    ])
    func invalidEscapes(_ json: String) {
        #expect(refusal(#"{"v":"# + json + "}")?.reason == .invalidEscape)
        #expect(refusal(#"{"# + json + ":1}")?.reason == .invalidEscape)
    }

    @Test("control characters must be escaped", arguments: [0x00, 0x01, 0x09, 0x0A, 0x0D, 0x1F] as [UInt8])
    func controlCharacters(_ byte: UInt8) {
        let json = Array(#"{"v":"a"#.utf8) + [byte] + Array(#""}"#.utf8)
        #expect(refusal(json) == JSONReadError(.controlCharacter, at: 7))
        let key = Array(#"{""#.utf8) + [byte] + Array(#"":1}"#.utf8)
        #expect(refusal(key) == JSONReadError(.controlCharacter, at: 2))
    }

    @Test("well-formed UTF-8 at the edges of each length", arguments: [
        [0xC2, 0x80], [0xDF, 0xBF], [0xE0, 0xA0, 0x80], [0xED, 0x9F, 0xBF], [0xEE, 0x80, 0x80], [0xEF, 0xBF, 0xBF],
        [0xF0, 0x90, 0x80, 0x80], [0xF4, 0x8F, 0xBF, 0xBF], [0x7F],
    ] as [[UInt8]])
    func validUTF8(_ sequence: [UInt8]) throws {
        let json = Array(#"{"v":""#.utf8) + sequence + Array(#""}"#.utf8)
        #expect(try fields(json).first?.value == .string(String(decoding: sequence, as: UTF8.self)))
    }

    @Test("invalid UTF-8 is refused, in values and keys", arguments: [
        [0xFF], [0xFE], [0x80], [0xBF], [0xC0, 0xAF], [0xC1, 0xBF], [0xC2], [0xC2, 0x41], [0xE0, 0x80, 0xAF],
        [0xE0, 0x9F, 0xBF], [0xED, 0xA0, 0x80], [0xED, 0xBF, 0xBF], [0xE4, 0xB8], [0xF0, 0x80, 0x80, 0x80],
        [0xF0, 0x8F, 0xBF, 0xBF], [0xF4, 0x90, 0x80, 0x80], [0xF5, 0x80, 0x80, 0x80], [0xF8, 0x88, 0x80, 0x80, 0x80],
        [0xF0, 0x9F, 0x98],
    ] as [[UInt8]])
    func invalidUTF8(_ sequence: [UInt8]) {
        #expect(refusal(Array(#"{"v":"x"#.utf8) + sequence + Array(#""}"#.utf8)) == JSONReadError(.invalidUTF8, at: 7))
        #expect(refusal(Array(#"{""#.utf8) + sequence + Array(#"":1}"#.utf8)) == JSONReadError(.invalidUTF8, at: 2))
        // And cut short by the end of the text.
        #expect(refusal(Array(#"{"v":""#.utf8) + sequence)?.reason == .invalidUTF8)
        // Outside strings, any such byte is out of place.
        #expect(refusal(Array(#"{"v":"#.utf8) + sequence + Array("}".utf8)) == JSONReadError(.unexpectedByte, at: 5))
    }

    @Test("invalid UTF-8 inside a nested value is refused too")
    func invalidUTF8Nested() {
        let json = Array(#"{"v":[{"w":""#.utf8) + [0xC0, 0x80] + Array(#""}]}"#.utf8)
        #expect(refusal(json) == JSONReadError(.invalidUTF8, at: 12))
    }

    // MARK: Numbers

    @Test("numbers keep their text and have an exact Int64 when whole and in range", arguments: [
        ("0", 0), ("-0", 0), ("7", 7), ("7.0", 7), ("70e-1", 7), ("0.7e1", 7), ("7.5", nil), ("1e2", 100), ("1E+2", 100),
        ("100e-2", 1), ("0.000", 0), ("0e99999999999999999999", 0), ("-0.0e-5", 0), ("1.0000000000000001", nil),
        ("1e-400", nil), ("0.5", nil), ("9223372036854775807", .max), ("-9223372036854775808", .min),
        ("9223372036854775808", nil), ("-9223372036854775809", nil), ("9223372036854775807.0", .max),
        ("922337203685477580.7e1", .max), ("92233720368547758070e-1", .max), ("-9223372036854775808e0", .min),
        ("-9.223372036854775808e18", .min), ("9223372036854775807.5", nil), ("18446744073709551616", nil),
        ("1e18", 1_000_000_000_000_000_000), ("1e19", nil), ("1000000000000000000000e-3", 1_000_000_000_000_000_000),
        ("12345678901234567890e-1", 1_234_567_890_123_456_789), ("123456789012345678901234567890e-29", nil),
        ("1e99999999999999999999", nil), ("1e-99999999999999999999", nil), ("9007199254740993", 9_007_199_254_740_993),
    ] as [(String, Int64?)])
    func integers(_ text: String, _ expected: Int64?) throws {
        let number = try #require(try number(text))
        #expect(number.text == text)
        #expect(number.description == text)
        #expect(number.int64 == expected)
    }

    @Test("numbers have the nearest Double, infinite beyond its range", arguments: [
        ("0.1", 0.1), ("-2.5E-3", -0.0025), ("1e400", .infinity), ("-1e400", -.infinity), ("2e-324", 0),
        ("1.7976931348623157e308", .greatestFiniteMagnitude), ("4.9e-324", .leastNonzeroMagnitude),
        ("9007199254740993", 9_007_199_254_740_992), ("123456789012345678901234567890", 1.2345678901234568e29),
    ] as [(String, Double)])
    func doubles(_ text: String, _ expected: Double) throws {
        #expect(try #require(try number(text)).double == expected)
    }

    @Test("negative zero keeps its sign as a Double")
    func negativeZero() throws {
        let zero = try #require(try number("-0"))
        #expect(zero.double == 0 && zero.double.sign == .minus)
    }

    @Test("numbers outside RFC 8259's grammar", arguments: [
        ("01", JSONReadError.Reason.invalidNumber), ("-01", .invalidNumber), ("00", .invalidNumber), ("-", .invalidNumber),
        ("1.", .invalidNumber), ("1.e1", .invalidNumber), ("1e", .invalidNumber), ("1e+", .invalidNumber),
        ("1E-", .invalidNumber), ("-a", .invalidNumber), ("- 1", .invalidNumber), (".5", .unexpectedByte),
        ("+1", .unexpectedByte), ("0x10", .unexpectedByte), ("1.5.3", .unexpectedByte), ("12abc", .unexpectedByte),
        ("NaN", .unexpectedByte), ("Infinity", .unexpectedByte), ("-Infinity", .invalidNumber), ("1_000", .unexpectedByte),
    ])
    func invalidNumbers(_ text: String, _ reason: JSONReadError.Reason) {
        #expect(refusal(#"{"v":"# + text + "}")?.reason == reason)
        #expect(refusal(#"{"v":[{"w":"# + text + "}]}")?.reason == reason)
    }

    // MARK: Malformed text

    @Test("malformed text is refused with a reason and a place", arguments: [
        ("", JSONReadError(.unexpectedEnd, at: 0)), ("   ", JSONReadError(.unexpectedEnd, at: 3)),
        ("{", JSONReadError(.unexpectedEnd, at: 1)), (#"{"a""#, JSONReadError(.unexpectedEnd, at: 4)),
        (#"{"a":"#, JSONReadError(.unexpectedEnd, at: 5)), (#"{"a":1"#, JSONReadError(.unexpectedEnd, at: 6)),
        (#"{"a":1,"#, JSONReadError(.unexpectedEnd, at: 7)), (#"{"a":"x"#, JSONReadError(.unexpectedEnd, at: 7)),
        (#"{"a":"x\"#, JSONReadError(.unexpectedEnd, at: 8)), (#"{"a":"\u00"#, JSONReadError(.unexpectedEnd, at: 10)),
        (#"{"a":tr"#, JSONReadError(.unexpectedEnd, at: 7)), (#"{"a":[1,{"b":2"#, JSONReadError(.unexpectedEnd, at: 14)),
        (#"{"a" 1}"#, JSONReadError(.unexpectedByte, at: 5)), (#"{"a":1 "b":2}"#, JSONReadError(.unexpectedByte, at: 7)),
        (#"{"a":1;"b":2}"#, JSONReadError(.unexpectedByte, at: 6)), (#"{,}"#, JSONReadError(.unexpectedByte, at: 1)),
        (#"{1:2}"#, JSONReadError(.unexpectedByte, at: 1)), (#"{'a':1}"#, JSONReadError(.unexpectedByte, at: 1)),
        (#"{a:1}"#, JSONReadError(.unexpectedByte, at: 1)), (#"{"a":True}"#, JSONReadError(.unexpectedByte, at: 5)),
        (#"{"a":tru}"#, JSONReadError(.unexpectedByte, at: 8)), (#"{"a":truex}"#, JSONReadError(.unexpectedByte, at: 9)),
        (#"{"a":nullnull}"#, JSONReadError(.unexpectedByte, at: 9)), (#"{"a":undefined}"#, JSONReadError(.unexpectedByte, at: 5)),
        (#"{"a":1 /* c */}"#, JSONReadError(.unexpectedByte, at: 7)), ("// c\n{}", JSONReadError(.unexpectedByte, at: 0)),
        ("\u{FEFF}{}", JSONReadError(.unexpectedByte, at: 0)), ("\u{C}{}", JSONReadError(.unexpectedByte, at: 0)),
        ("{\u{B}}", JSONReadError(.unexpectedByte, at: 1)), ("{\u{A0}}", JSONReadError(.unexpectedByte, at: 1)),
        (#"{"a":1,}"#, JSONReadError(.trailingComma, at: 6)), (#"{"a":1 , }"#, JSONReadError(.trailingComma, at: 7)),
        (#"{"a":[1,]}"#, JSONReadError(.trailingComma, at: 7)), (#"{"a":{"b":1,}}"#, JSONReadError(.trailingComma, at: 11)),
        (#"{"a":[,1]}"#, JSONReadError(.unexpectedByte, at: 6)), (#"{"a":[1,,2]}"#, JSONReadError(.unexpectedByte, at: 8)),
        (#"{"a":{,}}"#, JSONReadError(.unexpectedByte, at: 6)), (#"{"a":[1 2]}"#, JSONReadError(.unexpectedByte, at: 8)),
        (#"{"a":[1}}"#, JSONReadError(.unexpectedByte, at: 7)), (#"{"a":{"b":1]}"#, JSONReadError(.unexpectedByte, at: 11)),
        (#"{"a":{"b"}}"#, JSONReadError(.unexpectedByte, at: 9)), (#"{"a":{"b":}}"#, JSONReadError(.unexpectedByte, at: 10)),
        (#"{"a":[1:2]}"#, JSONReadError(.unexpectedByte, at: 7)), (#"{"a":{1:2}}"#, JSONReadError(.unexpectedByte, at: 6)),
        (#"{"a":1]"#, JSONReadError(.unexpectedByte, at: 6)), (#"{"a":1}}"#, JSONReadError(.trailingData, at: 7)),
        (#"{"a":1} x"#, JSONReadError(.trailingData, at: 8)), ("{}{}", JSONReadError(.trailingData, at: 2)),
        ("{}\u{0}", JSONReadError(.trailingData, at: 2)), ("{} \u{FEFF}", JSONReadError(.trailingData, at: 3)),
    ])
    func malformed(_ json: String, _ expected: JSONReadError) {
        #expect(refusal(json) == expected)
    }

    @Test("well-formed JSON that is not an object", arguments: [
        "[]", "[1,2]", #" [ {"a":[]} ] "#, #""x""#, "1", "-1.5e3", "true", "false", "null", " null ",
    ])
    func notAnObject(_ json: String) {
        #expect(refusal(json)?.reason == .notAnObject)
    }

    @Test("malformed JSON that is not an object is malformed first", arguments: [
        ("[1,]", JSONReadError.Reason.trailingComma), ("[1", .unexpectedEnd), (#""\q""#, .invalidEscape), ("01", .invalidNumber),
        ("1 2", .trailingData), ("nul", .unexpectedEnd), ("[1]]", .trailingData), (#""x"#, .unexpectedEnd),
    ])
    func malformedNotAnObject(_ json: String, _ reason: JSONReadError.Reason) {
        #expect(refusal(json)?.reason == reason)
    }

    @Test("errors say what and where")
    func description() {
        #expect(JSONReadError(.invalidEscape, at: 12).description == "invalid escape at byte 12")
        for reason in JSONReadError.Reason.allCases {
            #expect(!JSONReadError(reason, at: 0).summary.isEmpty)
        }
    }

    // MARK: Nesting

    /// `{"a":` then `depth - 1` nested arrays (or objects), so `depth` levels in all.
    private func nested(depth: Int, objects: Bool = false) -> [UInt8] {
        let inner = depth - 1
        let open = objects ? String(repeating: #"{"a":"#, count: inner) : String(repeating: "[", count: inner)
        let close = String(repeating: objects ? "}" : "]", count: inner)
        return Array((#"{"a":"# + open + (objects ? "1" : "") + close + "}").utf8)
    }

    @Test("nesting up to the limit is read", arguments: [false, true])
    func deepestNesting(objects: Bool) throws {
        let json = nested(depth: JSONObjectReader.maximumDepth, objects: objects)
        let read = try fields(json)
        #expect(read.count == 1)
        let expected: JSONValue = objects ? .object(5..<json.count - 1) : .array(5..<json.count - 1)
        #expect(read.first?.value == expected)
    }

    @Test("nesting past the limit is refused at the first level too many", arguments: [false, true])
    func tooDeep(objects: Bool) {
        let json = nested(depth: JSONObjectReader.maximumDepth + 1, objects: objects)
        let offset = 5 + (JSONObjectReader.maximumDepth - 1) * (objects ? 5 : 1)
        #expect(refusal(json) == JSONReadError(.tooDeep, at: offset))
    }

    @Test("hostile nesting is refused without exhausting the stack")
    func hostileNesting() {
        let opened = Array(#"{"a":"#.utf8) + [UInt8](repeating: UInt8(ascii: "["), count: 1_000_000)
        #expect(refusal(opened)?.reason == .tooDeep)
        let objects = Array(String(repeating: #"{"a":"#, count: 100_000).utf8)
        #expect(refusal(objects)?.reason == .tooDeep)
        let arrays = [UInt8](repeating: UInt8(ascii: "["), count: 100_000)
        #expect(refusal(arrays)?.reason == .tooDeep)
    }

    @Test("a top-level array counts as the first level")
    func topLevelArrayDepth() {
        let limit = JSONObjectReader.maximumDepth
        let deepest = String(repeating: "[", count: limit) + String(repeating: "]", count: limit)
        #expect(refusal(deepest)?.reason == .notAnObject)
        #expect(refusal("[" + deepest + "]") == JSONReadError(.tooDeep, at: limit))
    }

    // MARK: Raw ranges

    @Test("nested values are given as the range of their text")
    func rawRanges() throws {
        let json = Array(#"{"o": {"a":[1,"]}"]} , "a":[ "}" , "\"]" ,{}],"e":{},"n":[[]]}"#.utf8)
        let texts = try fields(json).map { field -> String in
            switch field.value {
            case .object(let range), .array(let range): String(decoding: json[range], as: UTF8.self)
            default: "not nested"
            }
        }
        #expect(texts == [#"{"a":[1,"]}"]}"#, #"[ "}" , "\"]" ,{}]"#, "{}", "[[]]"])
    }

    @Test("ranges count from the first byte of a slice, whatever its indices")
    func sliceRanges() throws {
        let whole = Array(#"xx{"a":[1]}"#.utf8)
        let slice = whole[2...]
        #expect(try JSONObjectReader.fields(in: slice) == [JSONField(key: "a", value: .array(5..<8))])
    }

    @Test("raw buffers and collections that are not contiguous read alike")
    func inputKinds() throws {
        let json = Array(#"{"command":1,"data":"left","serial":7,"x":[{}]}"#.utf8)
        let expected = try fields(json)
        #expect(try json.withUnsafeBytes { (raw) throws(JSONReadError) in try JSONObjectReader.fields(in: raw) } == expected)
        #expect(try JSONObjectReader.fields(in: json.lazy.map { $0 }) == expected)
        #expect(try JSONObjectReader.fields(in: String(decoding: json, as: UTF8.self).utf8) == expected)
    }
}
