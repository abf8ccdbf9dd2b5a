/// MQTT 3.1.1 packets written by hand, to send over a ``RawSocket``: what a PC
/// that ignores the broker's limits would send. libmosquitto (MQTT v5) reads
/// the broker's maximum packet size from its CONNACK and refuses a larger
/// publish itself, so it cannot show what the broker does with one.
enum MQTT311Packet {
    /// CONNECT: clean session, keepalive 60 s, a username and password, and
    /// a retained QoS 0 last will.
    static func connect(clientID: String, username: String, password: String, will: (topic: String, payload: String)) -> [UInt8] {
        // Flags: username, password, will retain, will flag, clean session.
        var body = string("MQTT") + [4, 0b1110_0110, 0, 60]
        for field in [clientID, will.topic, will.payload, username, password] { body += string(field) }
        return [0x10] + remainingLength(body.count) + body
    }

    /// A QoS 0 PUBLISH, `payload.count + topic + 3` bytes or more.
    static func publish(_ topic: String, payload: [UInt8]) -> [UInt8] {
        let body = string(topic) + payload
        return [0x30] + remainingLength(body.count) + body
    }

    /// PINGREQ: the smallest packet there is.
    static let ping: [UInt8] = [0xC0, 0x00]

    /// A UTF-8 string as MQTT encodes it: two bytes of length, then the bytes.
    private static func string(_ text: String) -> [UInt8] {
        let bytes = Array(text.utf8)
        return [UInt8(bytes.count >> 8), UInt8(bytes.count & 0xFF)] + bytes
    }

    /// MQTT's variable-length integer.
    private static func remainingLength(_ value: Int) -> [UInt8] {
        var value = value
        var out: [UInt8] = []
        repeat {
            var byte = UInt8(value % 128)
            value /= 128
            if value > 0 { byte |= 0x80 }
            out.append(byte)
        } while value > 0
        return out
    }
}
