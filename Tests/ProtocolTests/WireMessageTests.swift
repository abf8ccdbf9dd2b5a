import Foundation
import Protocol
import Testing

@Suite("Wire messages: tolerant decoding, exact encoding")
struct WireMessageTests {
    /// A payload and what it must decode to.
    struct Valid: CustomTestStringConvertible, Sendable {
        let json: String
        let expected: WireMessage
        var testDescription: String { json }
    }

    static let valid: [Valid] = [
        Valid(json: #"{"command":1,"data":"left","serial":7}"#, expected: WireMessage(command: 1, data: "left", serial: 7)),
        Valid(json: #"{"command":"1","data":"left","serial":7}"#, expected: WireMessage(command: 1, data: "left", serial: 7)),
        Valid(json: #"{"command":2,"serial":8}"#, expected: WireMessage(command: 2, serial: 8)),
        Valid(json: #"{"command":2,"data":"","serial":8}"#, expected: WireMessage(command: 2, data: "", serial: 8)),
        Valid(json: #"{"command":3,"data":1,"serial":9}"#, expected: WireMessage(command: 3, data: "1", serial: 9)),
        Valid(json: #"{"command":3,"data":2.5,"serial":9}"#, expected: WireMessage(command: 3, data: "2.5", serial: 9)),
        Valid(json: #"{"command":4,"data":"true"}"#, expected: WireMessage(command: 4, data: "true")),
        Valid(json: #"{"command":5,"data":"ok","serial":9223372036854775807}"#, expected: WireMessage(command: 5, data: "ok", serial: .max)),
        Valid(json: #"{"command":5,"serial":"42"}"#, expected: WireMessage(command: 5, serial: 42)),
        Valid(json: #"{"command":6,"data":"Alice","extra":{"a":[1,2]},"x":null}"#, expected: WireMessage(command: 6, data: "Alice")),
        Valid(json: #"{"command":7,"data":null,"serial":null}"#, expected: WireMessage(command: 7)),
        Valid(json: #"{"command":12,"data":"s-1","serial":3}"#, expected: WireMessage(command: 12, data: "s-1", serial: 3)),
        Valid(json: #"  {"serial":1,"command":99}  "#, expected: WireMessage(command: 99, serial: 1)),
        Valid(json: #"{"command":9,"data":"queue_full","serial":4,"message":"full"}"#, expected: WireMessage(command: 9, data: "queue_full", serial: 4, message: "full")),
        Valid(json: #"{"command":8,"data":"2","length":"5"}"#, expected: WireMessage(command: 8, data: "2", length: 5)),
        Valid(json: #"{"command":1001,"data":"1","serial":1,"session":"g1","player":"alice"}"#, expected: WireMessage(command: 1001, data: "1", serial: 1, session: "g1", player: "alice")),
        Valid(json: #"{"command":1,"data":"\u5de6","serial":1}"#, expected: WireMessage(command: 1, data: "左", serial: 1)),
    ]

    @Test("valid payloads decode", arguments: valid)
    func decodes(_ example: Valid) throws {
        let message = try WireMessage.decode(Array(example.json.utf8))
        #expect(message == example.expected)
    }

    static let invalid: [String] = [
        "",
        "not json",
        "[]",
        "[1,2]",
        "\"command\"",
        "1",
        "null",
        "{}",
        #"{"data":"left","serial":1}"#,
        #"{"command":null}"#,
        #"{"command":"one"}"#,
        #"{"command":"1.0"}"#,
        #"{"command":1.5}"#,
        #"{"command":true}"#,
        #"{"command":[1]}"#,
        #"{"command":{"n":1}}"#,
        #"{"command":99999999999999999999}"#,
        #"{"command":1,"data":true,"serial":1}"#,
        #"{"command":1,"data":{"x":1},"serial":1}"#,
        #"{"command":1,"data":["left"],"serial":1}"#,
        #"{"command":1,"data":"left","serial":"seven"}"#,
        #"{"command":1,"data":"left","serial":1.5}"#,
        #"{"command":1,"data":"left","serial":false}"#,
        #"{"command":1,"data":"left","serial":1"#,
        #"{"command":1,"data":"left","serial":1}}"#,
    ]

    @Test("invalid payloads are rejected with invalid_payload", arguments: invalid)
    func rejects(_ json: String) {
        #expect(throws: WireError.self) { try WireMessage.decode(Array(json.utf8)) }
        do {
            _ = try WireMessage.decode(Array(json.utf8))
        } catch {
            #expect(error.code == .invalidPayload)
            #expect(!error.message.isEmpty)
        }
    }

    @Test("invalid UTF-8 is rejected, not crashed on")
    func invalidUTF8() {
        #expect(throws: WireError.self) { try WireMessage.decode([0x7B, 0x22, 0xFF, 0xFE, 0x22, 0x7D]) }
    }

    @Test("commands 1–5 encode byte for byte as NetEase's clients send them", arguments: [
        (WireMessage(command: 1, data: "left", serial: 7), #"{"command":1,"data":"left","serial":7}"#),
        (WireMessage(command: 2, serial: 8), #"{"command":2,"serial":8}"#),
        (WireMessage(command: 3, data: "1", serial: 9), #"{"command":3,"data":"1","serial":9}"#),
        (WireMessage(command: 4, data: "true"), #"{"command":4,"data":"true"}"#),
        (WireMessage(command: 5, data: "ok", serial: 7), #"{"command":5,"data":"ok","serial":7}"#),
    ])
    func netEaseEncoding(_ message: WireMessage, _ expected: String) {
        #expect(message.encodedString() == expected)
    }

    @Test("extension fields follow command, data, serial in a fixed order")
    func extensionEncoding() {
        let offer = WireMessage(.turnOffer, data: "g-1", serial: 3, timeout: 10)
        #expect(offer.encodedString() == #"{"command":11,"data":"g-1","serial":3,"timeout":10}"#)
        let error = WireMessage(.error, data: "not_your_turn", serial: 4, message: "Wait \"your\" turn\n\u{1}")
        #expect(error.encodedString() == #"{"command":9,"data":"not_your_turn","serial":4,"message":"Wait \"your\" turn\n\u0001"}"#)
        let coins = WireMessage(.addCoins, data: "1", serial: 5, session: "g-1", player: "alice")
        #expect(coins.encodedString() == #"{"command":1001,"data":"1","serial":5,"session":"g-1","player":"alice"}"#)
        let position = WireMessage(.queuePosition, data: "2", length: 4)
        #expect(position.encodedString() == #"{"command":8,"data":"2","length":4}"#)
    }

    @Test("what is encoded decodes back to the same message", arguments: [
        WireMessage(command: 1, data: "up", serial: 1),
        WireMessage(.error, data: "queue_full", serial: -3, message: "\\ \" / \t 中文 😀"),
        WireMessage(.addCoins, data: "1", serial: .max, session: "s", player: "p"),
        WireMessage(.queuePosition, data: "0", length: 0),
        WireMessage(.turnOffer, data: "x", serial: 0, timeout: 10),
    ])
    func roundTrip(_ message: WireMessage) throws {
        #expect(try WireMessage.decode(message.encoded()) == message)
        // And it is JSON any parser accepts.
        #expect(try JSONSerialization.jsonObject(with: Data(message.encoded())) is [String: Any])
    }
}
