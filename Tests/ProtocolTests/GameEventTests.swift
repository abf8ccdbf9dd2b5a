import Foundation
import Protocol
import Testing

@Suite struct GameEventTests {
    @Test(arguments: [
        GameEvent(type: .joined, seq: 1, ts: "2026-11-21T10:00:00.000Z", machine: "m1", player: "alice", nick: "Al \"the\" ice\n", position: 3),
        GameEvent(
            type: .ack, seq: 99, ts: "t", machine: "m/1", player: "p", command: "move", data: "ok\u{1}", serial: 1_795_000_000_001,
            playerSerial: -7, latencyMs: 0.125),
        GameEvent(type: .gameEnded, seq: 2, ts: "t", machine: "m", session: "s", outcome: .machineOffline, commands: 12),
        GameEvent(type: .dropped, seq: 3, ts: "t", machine: "m", reason: "rate_limited"),
    ])
    func encodedEventsDecodeToThemselves(event: GameEvent) throws {
        let bytes = event.encoded()
        let decoded = try JSONDecoder().decode(GameEvent.self, from: Data(bytes))
        #expect(decoded == event)
        #expect(String(decoding: bytes, as: UTF8.self).hasPrefix(#"{"type":"\#(event.type.rawValue)","seq":\#(event.seq),"#))
    }

    @Test func absentFieldsAreLeftOut() {
        let text = String(decoding: GameEvent(type: .online, seq: 5, ts: "t", machine: "m1").encoded(), as: UTF8.self)
        #expect(text == #"{"type":"online","seq":5,"ts":"t","machine":"m1"}"#)
    }
}
