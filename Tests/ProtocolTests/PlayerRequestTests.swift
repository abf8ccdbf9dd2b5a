import Protocol
import Testing

@Suite("Player requests: validation and error codes")
struct PlayerRequestTests {
    private func request(_ json: String) throws(WireError) -> PlayerRequest {
        try PlayerRequest(WireMessage.decode(Array(json.utf8)))
    }

    @Test("valid requests", arguments: [
        (#"{"command":1,"data":"left","serial":1}"#, PlayerRequest(command: .move(.left), serial: 1)),
        (#"{"command":1,"data":"stop","serial":2}"#, PlayerRequest(command: .move(.stop), serial: 2)),
        (#"{"command":2,"serial":3}"#, PlayerRequest(command: .grab, serial: 3)),
        (#"{"command":2,"data":"","serial":3}"#, PlayerRequest(command: .grab, serial: 3)),
        (#"{"command":3,"data":2,"serial":4}"#, PlayerRequest(command: .camera("2"), serial: 4)),
        (#"{"command":6}"#, PlayerRequest(command: .join(nick: nil), serial: nil)),
        (#"{"command":6,"data":"  Alice  ","serial":5}"#, PlayerRequest(command: .join(nick: "Alice"), serial: 5)),
        (#"{"command":6,"data":""}"#, PlayerRequest(command: .join(nick: nil), serial: nil)),
        (#"{"command":7}"#, PlayerRequest(command: .leave, serial: nil)),
        (#"{"command":12,"data":"g-1","serial":3}"#, PlayerRequest(command: .accept(session: "g-1"), serial: 3)),
        (#"{"command":"13","data":"g-1"}"#, PlayerRequest(command: .decline(session: "g-1"), serial: nil)),
    ])
    func valid(_ json: String, _ expected: PlayerRequest) throws {
        #expect(try request(json) == expected)
    }

    @Test("invalid requests and their codes", arguments: [
        (#"{"command":1,"data":"north","serial":1}"#, ErrorCode.invalidPayload),
        (#"{"command":1,"data":"LEFT","serial":1}"#, .invalidPayload),
        (#"{"command":1,"serial":1}"#, .invalidPayload),
        (#"{"command":1,"data":"left"}"#, .invalidPayload),
        (#"{"command":2}"#, .invalidPayload),
        (#"{"command":3,"serial":1}"#, .invalidPayload),
        (#"{"command":3,"data":"","serial":1}"#, .invalidPayload),
        (#"{"command":12}"#, .invalidPayload),
        (#"{"command":13,"data":""}"#, .invalidPayload),
        (#"{"command":6,"data":"\u0007bell"}"#, .invalidPayload),
        (#"{"command":4,"data":"true"}"#, .unknownCommand),
        (#"{"command":5,"serial":1}"#, .unknownCommand),
        (#"{"command":8}"#, .unknownCommand),
        (#"{"command":9}"#, .unknownCommand),
        (#"{"command":11,"data":"x"}"#, .unknownCommand),
        (#"{"command":1001,"data":"1"}"#, .unknownCommand),
        (#"{"command":0}"#, .unknownCommand),
        (#"{"command":-1}"#, .unknownCommand),
        (#"{"command":14}"#, .unknownCommand),
        (#"{"command":"x"}"#, .invalidPayload),
    ])
    func invalid(_ json: String, _ code: ErrorCode) {
        do {
            _ = try request(json)
            Issue.record("\(json) was accepted")
        } catch {
            #expect(error.code == code, "\(error)")
        }
    }

    @Test("a nickname is bounded in UTF-8 bytes, not characters")
    func longNick() {
        let nick = String(repeating: "字", count: 33)  // 99 bytes
        #expect(throws: WireError.self) { try request(#"{"command":6,"data":"\#(nick)"}"#) }
        #expect((try? request(#"{"command":6,"data":"\#(String(nick.dropFirst()))"}"#)) != nil)
        // One character of about 60 KB: "a" and 30,000 combining marks.
        let heavy = "a" + String(repeating: "\u{0301}", count: 30_000)
        #expect(heavy.count == 1)
        #expect(throws: WireError.self) { try request(#"{"command":6,"data":"\#(heavy)"}"#) }
    }

    @Test(
        "a nickname with control or invisible formatting characters is refused",
        arguments: ["evil\u{202E}gnp.exe", "zero\u{200B}width", "join\u{200D}er", "line\u{2028}break", "para\u{2029}graph", "bell\u{7}"])
    func hiddenCharacters(_ nick: String) {
        let json = String(decoding: WireMessage(.join, data: nick).encoded(), as: UTF8.self)
        #expect(throws: WireError.self) { try request(json) }
        #expect(PlayerText.hasHiddenCharacters(nick))
    }

    @Test("a camera the machine does not have is invalid_payload")
    func cameras() throws {
        let camera = try request(#"{"command":3,"data":"3","serial":1}"#)
        #expect(throws: WireError(.invalidPayload, "Camera \"3\" does not exist on this machine; its cameras are 1, 2.")) {
            try camera.validate(cameras: ["1", "2"])
        }
        try request(#"{"command":3,"data":"2","serial":1}"#).validate(cameras: ["1", "2"])
        try request(#"{"command":1,"data":"up","serial":1}"#).validate(cameras: [String]())
    }
}
