import Foundation
import Protocol
import Testing

extension HeavySuites {
    /// Property tests of `WireMessage.decode(_:)` and the `JSONObjectReader`
    /// under it, against Foundation on mutated payloads (`CLAW_FUZZ_INPUTS`
    /// inputs per test, seeded by `CLAW_FUZZ_SEED`):
    /// - the decoder agrees with the `JSONDecoder`-based one it replaced, kept
    ///   here as `FoundationWireDecoder`, except where `decode(_:)` documents
    ///   a difference;
    /// - the reader accepts an object exactly when `JSONSerialization` does and
    ///   finds the same keys and strings, except where `JSONObjectReader`
    ///   documents a difference.
    @Suite struct WireDecoderPropertyTests {
        /// `DecoderFuzzTests.wireSeeds`, copied so this file needs only `Protocol`.
        private static let wireSeeds: [[UInt8]] = [
            #"{"command":1,"data":"left","serial":7}"#, #"{"command":"2","serial":"8"}"#, #"{"command":3,"data":2,"serial":9}"#,
            #"{"command":6,"data":"Zoë"}"#, #"{"command":7}"#, #"{"command":12,"data":"9f0c-1","serial":1}"#,
            #"{"command":13,"data":"x"}"#, #"{"command":4,"data":"true"}"#, #"{"command":5,"data":"ok","serial":3}"#,
            #"{"command":1,"data":"up","serial":1,"extra":{"nested":[1,2,{"a":null}]}}"#,
        ].map { Array($0.utf8) }

        /// What the wire seeds seldom reach: the other fields, escapes,
        /// numbers in every notation, duplicates, a byte order mark, non-objects.
        private static let moreSeeds: [[UInt8]] = [
            #"{"command":9,"data":"queue_full","serial":4,"message":"Wait \"your\" turn\n\u0001"}"#,
            #"{"command":"1001","data":1,"serial":"5","session":"g-1","player":"alice"}"#,
            #"{"command":8,"data":"2","length":"4"}"#, #"{"command":11,"data":"g-1","serial":3,"timeout":10}"#,
            #"{"command":3,"data":2.5e0,"serial":9.0,"length":-0,"timeout":1E1,"message":-1.5e300}"#,
            #"{"command":1,"data":"\u5de6\ud83d\ude00\/\\\b\f\r\t","serial":-9223372036854775808}"#,
            #"{"command":1,"command":2,"data":null,"data":"x","x":[true,false,null,{"y":[]}]}"#,
            "\u{FEFF}{\"command\":1,\"data\":\"é\"}", #" [1,2] "#, #""command""#, "null", "1e5",
            #"{"command":1.0000000000000001,"data":9007199254740993.5,"serial":9223372036854775807.0}"#,
            #"{"command":1,"data":1e-400,"serial":1e2,"player":0.1e1}"#,
        ].map { Array($0.utf8) }

        @Test func decoderAgreesWithFoundationOnWireSeeds() {
            checkDecoder(seeds: Self.wireSeeds, mutator: Mutator(seed: FuzzBudget.seed ^ 0x1501))
        }

        @Test func decoderAgreesWithFoundationOnMoreSeeds() {
            checkDecoder(seeds: Self.moreSeeds, mutator: Mutator(seed: FuzzBudget.seed ^ 0x1502))
        }

        @Test func readerAgreesWithJSONSerialization() {
            var mutator = Mutator(seed: FuzzBudget.seed ^ 0x1503)
            var report = PropertyReport()
            for _ in 0..<FuzzBudget.inputs {
                let input = mutator.input(from: Self.wireSeeds + Self.moreSeeds)
                report.note(compareReader(input), input)
            }
            report.finish()
            #expect(report.outcomes["both read an object", default: 0] > 0, report.summary)
            #expect(report.outcomes["both refuse", default: 0] > 0, report.summary)
        }

        /// What a decoder makes of an example.
        enum Answer: Equatable, CustomStringConvertible {
            case decodes(WireMessage)
            case refuses(String)

            init(_ decode: () throws(WireError) -> WireMessage) {
                do throws(WireError) {
                    self = .decodes(try decode())
                } catch {
                    self = error.code == .invalidPayload ? .refuses(error.message) : .refuses("\(error)")
                }
            }

            var description: String {
                switch self {
                case .decodes(let message): message.encodedString()
                case .refuses(let message): message
                }
            }
        }

        /// Each difference `WireMessage.decode(_:)` documents, on an example.
        static let differences: [(input: [UInt8], answer: Answer)] = [
            (Array(#"{"command":1,"x":01}"#.utf8), .refuses(FoundationWireDecoder.notJSON)),
            (Array(#"{"command":1,"x":"\q"}"#.utf8), .refuses(FoundationWireDecoder.notJSON)),
            (Array(#"{"command":1,}"#.utf8), .refuses(FoundationWireDecoder.notJSON)),
            (Array(#"{"command":1,"x":[1,]}"#.utf8), .refuses(FoundationWireDecoder.notJSON)),
            (Array(#"{"command":1,"data":"\ud800"}"#.utf8), .refuses(FoundationWireDecoder.notJSON)),
            (Array("{\"command\":1,\"data\":\"a\tb\"}".utf8), .refuses(FoundationWireDecoder.notJSON)),
            (Array(#"{"command":1,"data":""#.utf8) + [0xC0, 0xAF] + Array(#""}"#.utf8), .refuses(FoundationWireDecoder.notJSON)),
            (Array(#"{"command":1.0000000000000001}"#.utf8), .refuses("\"command\" must be an integer or a numeric string.")),
            (Array(#"{"command":1,"data":1e-400}"#.utf8), .decodes(WireMessage(command: 1, data: "0.0"))),
            (Array(#"{"command":1,"serial":9007199254740993.5}"#.utf8), .refuses("\"serial\" must be an integer or a numeric string.")),
            (Array(#"{"command":1,"serial":9223372036854775807.0}"#.utf8), .decodes(WireMessage(command: 1, serial: .max))),
            (Array("null".utf8), .refuses(FoundationWireDecoder.notAnObject)),
            (Array(#"{"command":1}"#.utf16).flatMap { [UInt8($0 & 0xFF), UInt8($0 >> 8)] }, .refuses(FoundationWireDecoder.notJSON)),
        ]

        @Test("documented differences from the Foundation decoder", arguments: differences)
        func documentedDifference(_ input: [UInt8], _ answer: Answer) {
            #expect(Answer { () throws(WireError) in try WireMessage.decode(input) } == answer)
            // Foundation still answers otherwise; if not, the documentation of decode(_:) is out of date.
            #expect(Answer { () throws(WireError) in try FoundationWireDecoder.decode(input) } != answer)
        }

        /// Behaviour worth keeping that looks accidental but is the same on both.
        static let agreements: [(input: [UInt8], answer: Answer)] = [
            ([0xEF, 0xBB, 0xBF] + Array(#"{"command":1}"#.utf8), .decodes(WireMessage(command: 1))),
            (Array(#"{"command":1,"command":2,"data":null,"data":"x"}"#.utf8), .decodes(WireMessage(command: 1))),
            (Array(#"{"command":null,"command":1}"#.utf8), .refuses("The payload has no \"command\" field.")),
            (Array(#"{"command":"+7","serial":"-0"}"#.utf8), .decodes(WireMessage(command: 7, serial: 0))),
            (Array(#"{"command":" 7"}"#.utf8), .refuses("\"command\" must be an integer or a numeric string.")),
            (Array(#"{"command":1e2,"serial":7.0,"length":-0}"#.utf8), .decodes(WireMessage(command: 100, serial: 7, length: 0))),
            (Array(#"{"command":1,"data":-0.0,"message":2.5,"session":1e300,"player":1E2}"#.utf8),
             .decodes(WireMessage(command: 1, data: "0", message: "2.5", session: "1e+300", player: "100"))),
            (Array(#"{"command":1,"data":1e400}"#.utf8), .refuses("\"data\" must be a string or a number.")),
            (Array(#"{"command":1,"serial":true,"data":false}"#.utf8), .refuses("\"data\" must be a string or a number.")),
            (Array(#"{"comm\u0061nd":5}"#.utf8), .decodes(WireMessage(command: 5))),
            (Array(#"[{"command":1}]"#.utf8), .refuses(FoundationWireDecoder.notAnObject)),
            (Array(#"{"command":1} {}"#.utf8), .refuses(FoundationWireDecoder.notJSON)),
        ]

        @Test("agreements with the Foundation decoder worth stating", arguments: agreements)
        func agreement(_ input: [UInt8], _ answer: Answer) {
            #expect(Answer { () throws(WireError) in try WireMessage.decode(input) } == answer)
            #expect(Answer { () throws(WireError) in try FoundationWireDecoder.decode(input) } == answer)
        }

        private func checkDecoder(seeds: [[UInt8]], mutator: Mutator) {
            var mutator = mutator
            var report = PropertyReport()
            for _ in 0..<FuzzBudget.inputs {
                let input = mutator.input(from: seeds)
                report.note(compareDecoders(input), input)
            }
            report.finish()
            #expect(report.outcomes["both decode", default: 0] > 0, report.summary)
            #expect(report.outcomes["both refuse", default: 0] > 0, report.summary)
        }
    }
}

// MARK: - WireMessage.decode against JSONDecoder

/// How one input came out: a kind of agreement, a documented difference, or
/// a failure to report.
private enum PropertyOutcome {
    case agreed(String)
    case documented(String)
    case failed(String)
}

private func compareDecoders(_ input: [UInt8]) -> PropertyOutcome {
    let reference = Result { () throws(WireError) in try FoundationWireDecoder.decode(input) }
    let decoded = Result { () throws(WireError) in try WireMessage.decode(input) }
    switch (reference, decoded) {
    case (.success(let expected), .success(let actual)):
        if expected == actual { return .agreed("both decode") }
        if let why = DocumentedDifference.ambiguousNumber(input) { return .documented(why) }
        return .failed("decoded \(actual), Foundation \(expected)")
    case (.failure(let expected), .failure(let actual)):
        guard expected.code == .invalidPayload, actual.code == .invalidPayload else {
            return .failed("refused with \(actual.code), Foundation with \(expected.code)")
        }
        if expected.message == actual.message { return .agreed("both refuse") }
        if let why = DocumentedDifference.stricterOrOther(input, refusal: actual) { return .documented(why) }
        if actual.message == FoundationWireDecoder.notAnObject, DocumentedDifference.isTopLevelNull(input) {
            return .documented("top-level null")
        }
        return .failed("refused with \"\(actual.message)\", Foundation with \"\(expected.message)\"")
    case (.success(let expected), .failure(let actual)):
        if let why = DocumentedDifference.stricterOrOther(input, refusal: actual) { return .documented(why) }
        return .failed("refused with \"\(actual.message)\", Foundation decoded \(expected)")
    case (.failure(let expected), .success(let actual)):
        if let why = DocumentedDifference.ambiguousNumber(input) { return .documented(why) }
        return .failed("decoded \(actual), Foundation refused with \"\(expected.message)\"")
    }
}

/// The differences `WireMessage.decode(_:)` documents, each told from the
/// input rather than from the decoder's answer (the reader only finds the
/// fields, and `JSONSerialization` confirms that malformed text is malformed).
private enum DocumentedDifference {
    /// Why the new decoder may refuse what Foundation took, or refuse it with
    /// another message; nil when none of the documented reasons holds.
    static func stricterOrOther(_ input: [UInt8], refusal: WireError) -> String? {
        if let encoding = foreignEncoding(input) { return encoding }
        if refusal.message == FoundationWireDecoder.notJSON, let malformed = malformed(input) { return malformed }
        return ambiguousNumber(input)
    }

    /// `JSONDecoder` reads UTF-16 and UTF-32, which it tells by a byte order
    /// mark or by zero bytes among the first four.
    static func foreignEncoding(_ input: [UInt8]) -> String? {
        if input.starts(with: [0xFE, 0xFF]) || input.starts(with: [0xFF, 0xFE]) || input.prefix(4).contains(0) {
            return "UTF-16 or UTF-32"
        }
        return nil
    }

    /// The text is malformed JSON by the reader, and `JSONSerialization`
    /// agrees, unless the reader's reason is a trailing comma, which
    /// `JSONSerialization` accepts (as `JSONDecoder` does).
    static func malformed(_ input: [UInt8]) -> String? {
        let text = withoutByteOrderMark(input)
        do throws(JSONReadError) {
            _ = try JSONObjectReader.fields(in: text)
            return nil
        } catch {
            switch error.reason {
            case .notAnObject: return nil
            case .trailingComma: return "malformed: trailing comma"
            default:
                let accepted = (try? JSONSerialization.jsonObject(with: Data(text), options: .fragmentsAllowed)) != nil
                return accepted ? nil : "malformed: \(error.summary)"
            }
        }
    }

    static func isTopLevelNull(_ input: [UInt8]) -> Bool {
        String(decoding: withoutByteOrderMark(input), as: UTF8.self).trimmingCharacters(in: CharacterSet(charactersIn: " \t\r\n"))
            == "null"
    }

    /// A field the decoder reads holds a number written with a fraction or an
    /// exponent that `JSONDecoder`, reading it through `Double`, takes for
    /// another integer than its exact value (or for one where there is none).
    static func ambiguousNumber(_ input: [UInt8]) -> String? {
        let known: Set = ["command", "data", "serial", "length", "message", "timeout", "session", "player"]
        guard let fields = try? JSONObjectReader.fields(in: withoutByteOrderMark(input)) else { return nil }
        var seen: Set<String> = []
        for field in fields where known.contains(field.key) && seen.insert(field.key).inserted {
            guard case .number(let number) = field.value, number.text.contains(where: { ".eE".contains($0) }) else { continue }
            let double = number.double
            let foundationMayRound = number.int64 == nil && double.isFinite && double == double.rounded(.towardZero)
            let foundationMayTruncate = number.int64 != nil && abs(double) >= 0x1p53
            if foundationMayRound || foundationMayTruncate { return "number read through Double: \(number.text)" }
        }
        return nil
    }

    static func withoutByteOrderMark(_ input: [UInt8]) -> ArraySlice<UInt8> {
        input.starts(with: [0xEF, 0xBB, 0xBF]) ? input.dropFirst(3) : input[...]
    }
}

/// The decoder `WireMessage.decode(_:)` replaced: Foundation's `JSONDecoder`
/// and the `init(from:)` that was `WireMessage`'s, copied as they were.
private struct FoundationWireDecoder: Decodable {
    static let notAnObject = "The payload must be a JSON object with a \"command\" field."
    static let notJSON = "The payload is not valid JSON; send an object such as {\"command\":1,\"data\":\"left\",\"serial\":1}."

    var message: WireMessage

    static func decode(_ bytes: some Collection<UInt8>) throws(WireError) -> WireMessage {
        do {
            return try JSONDecoder().decode(FoundationWireDecoder.self, from: Data(bytes)).message
        } catch let error as WireError {
            throw error
        } catch DecodingError.typeMismatch {
            throw WireError(.invalidPayload, notAnObject)
        } catch {
            throw WireError(.invalidPayload, notJSON)
        }
    }

    private enum Field: String, CodingKey {
        case command, data, serial, length, message, timeout, session, player
    }

    init(from decoder: any Decoder) throws {
        let fields = try decoder.container(keyedBy: Field.self)
        guard fields.contains(.command), try !fields.decodeNil(forKey: .command) else {
            throw WireError(.invalidPayload, "The payload has no \"command\" field.")
        }
        guard let command = Self.integer(fields, .command).flatMap({ Int(exactly: $0) }) else {
            throw WireError(.invalidPayload, "\"command\" must be an integer or a numeric string.")
        }
        message = WireMessage(command: command)
        message.data = try Self.text(fields, .data)
        message.serial = try Self.optionalInteger(fields, .serial)
        message.length = try Self.optionalInteger(fields, .length).flatMap { Int(exactly: $0) }
        message.timeout = try Self.optionalInteger(fields, .timeout).flatMap { Int(exactly: $0) }
        message.message = try Self.text(fields, .message)
        message.session = try Self.text(fields, .session)
        message.player = try Self.text(fields, .player)
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

    private static func integer(_ fields: KeyedDecodingContainer<Field>, _ key: Field) -> Int64? {
        if let number = try? fields.decode(Int64.self, forKey: key) { return number }
        if let string = try? fields.decode(String.self, forKey: key) { return Int64(string) }
        return nil
    }

    private static func text(_ fields: KeyedDecodingContainer<Field>, _ key: Field) throws(WireError) -> String? {
        guard fields.contains(key), (try? fields.decodeNil(forKey: key)) == false else { return nil }
        if let string = try? fields.decode(String.self, forKey: key) { return string }
        if let number = try? fields.decode(Int64.self, forKey: key) { return String(number) }
        if let number = try? fields.decode(Double.self, forKey: key), number.isFinite { return String(number) }
        throw WireError(.invalidPayload, "\"\(key.rawValue)\" must be a string or a number.")
    }
}

// MARK: - JSONObjectReader against JSONSerialization

private func compareReader(_ input: [UInt8]) -> PropertyOutcome {
    let read = Result { () throws(JSONReadError) in try JSONObjectReader.fields(in: input) }
    let parsed = Result { try JSONSerialization.jsonObject(with: Data(input), options: .fragmentsAllowed) }
    switch (read, parsed) {
    case (.success(let fields), .success(let object)):
        guard let dictionary = object as? [String: Any] else { return .failed("read an object, JSONSerialization \(type(of: object))") }
        guard let mismatch = compareFields(fields, dictionary, in: input) else { return .agreed("both read an object") }
        // JSONSerialization drops a raw U+FEFF that starts a string or follows an escape.
        if compareFields(fields, dictionary, in: input, ignoring: "\u{FEFF}") == nil { return .documented("U+FEFF dropped") }
        return .failed(mismatch)
    case (.success, .failure(let error)):
        if let number = unrepresentableNumber(error), let double = Double(number), double.isInfinite {
            return .documented("number beyond Double: \(number)")
        }
        return .failed("read an object, JSONSerialization refused: \(error)")
    case (.failure(let error), .success(let object)):
        if error.reason == .notAnObject, !(object is [String: Any]) { return .agreed("both find something else") }
        if error.reason == .trailingComma { return .documented("trailing comma") }
        if input.starts(with: [0xEF, 0xBB, 0xBF]) { return .documented("byte order mark") }
        if let encoding = DocumentedDifference.foreignEncoding(input) { return .documented(encoding) }
        return .failed("refused (\(error)), JSONSerialization read \(type(of: object))")
    case (.failure, .failure):
        return .agreed("both refuse")
    }
}

/// Keys and kinds of values agree, strings exactly (but for `ignored`
/// scalars); with duplicate keys `JSONSerialization` keeps the last, so the
/// reader's last occurrence counts.
private func compareFields(
    _ fields: [JSONField], _ dictionary: [String: Any], in input: [UInt8], ignoring ignored: Unicode.Scalar? = nil
) -> String? {
    func normal(_ string: String) -> [UInt8] {
        var scalars = string.unicodeScalars[...]
        if let ignored { scalars.removeAll { $0 == ignored } }
        return Array(String(String.UnicodeScalarView(scalars)).utf8)
    }
    var last: [[UInt8]: JSONValue] = [:]
    for field in fields { last[normal(field.key)] = field.value }
    var others: [[UInt8]: Any] = [:]
    for (key, value) in dictionary { others[normal(key)] = value }
    guard Set(last.keys) == Set(others.keys) else {
        return "keys \(fields.map(\.key)), JSONSerialization \(dictionary.keys.sorted())"
    }
    for (key, value) in last {
        let other = others[key]
        let same: Bool =
            switch value {
            case .string(let string): (other as? String).map { normal($0) == normal(string) } ?? false
            case .number, .bool: other is NSNumber
            case .null: other is NSNull
            // A nested value's range holds exactly its text: JSONSerialization reads it alone.
            case .object(let range):
                other is [String: Any] && input[range].first == UInt8(ascii: "{") && input[range].last == UInt8(ascii: "}")
                    && (try? JSONSerialization.jsonObject(with: Data(input[range]))) is [String: Any]
            case .array(let range):
                other is [Any] && input[range].first == UInt8(ascii: "[") && input[range].last == UInt8(ascii: "]")
                    && (try? JSONSerialization.jsonObject(with: Data(input[range]))) is [Any]
            }
        if !same {
            let name = String(decoding: key, as: UTF8.self).debugDescription
            return "\(name): \(value), JSONSerialization \(String(describing: other))"
        }
    }
    return nil
}

/// The number in JSONSerialization's "Number 1e400 is not representable in Swift."
private func unrepresentableNumber(_ error: any Error) -> String? {
    let description = (error as NSError).userInfo[NSDebugDescriptionErrorKey] as? String ?? ""
    guard description.hasPrefix("Number "), description.hasSuffix(" is not representable in Swift.") else { return nil }
    return String(description.dropFirst("Number ".count).dropLast(" is not representable in Swift.".count))
}

// MARK: - Reporting

/// Counts outcomes and records the first few failures, so that a systematic
/// bug does not bury the run under a hundred thousand issues.
private struct PropertyReport {
    var outcomes: [String: Int] = [:]
    var failures = 0

    mutating func note(_ outcome: PropertyOutcome, _ input: [UInt8]) {
        switch outcome {
        case .agreed(let kind):
            outcomes[kind, default: 0] += 1
        case .documented(let why):
            outcomes["documented: \(why.prefix { $0 != ":" })", default: 0] += 1
        case .failed(let what):
            failures += 1
            if failures <= 10 {
                Issue.record("\(String(decoding: input, as: UTF8.self).debugDescription) \(input): \(what)")
            }
        }
    }

    func finish() {
        if failures > 10 { Issue.record("\(failures - 10) more failures") }
    }

    /// How many inputs came out each way, for the messages of failed expectations.
    var summary: Comment {
        Comment(rawValue: outcomes.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: ", "))
    }
}
