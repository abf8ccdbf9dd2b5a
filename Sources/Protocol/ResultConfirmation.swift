/// What the gateway publishes on `claw/<m>/result/ack` (SPEC §4) once the
/// result a PC numbered `serial` is on disk: `{"serial":…}`.
///
/// A PC keeps repeating its result (same serial, every 2 s, for up to
/// `result_timeout`) until this comes: the broker's own acknowledgement
/// (PUBACK) says only that the gateway's MQTT client received it, not that
/// the game's end survived the gateway being killed the next moment. A
/// repeat of a result already taken is taken once and confirmed again.
public struct ResultConfirmation: Sendable, Equatable {
    public var serial: Int64

    public init(serial: Int64) {
        self.serial = serial
    }

    /// How often a PC repeats a result not confirmed yet.
    public static let repeatSeconds = 2

    public func encoded() -> [UInt8] {
        JSONObjectWriter.object([("serial", .integer(serial))])
    }

    /// A confirmation as the gateway writes it; nil for anything else.
    public static func decode(_ payload: [UInt8]) -> ResultConfirmation? {
        guard let fields = try? JSONObjectReader.fields(in: payload),
            case .number(let number)? = fields.first(where: { $0.key == "serial" })?.value, let serial = number.int64
        else { return nil }
        return ResultConfirmation(serial: serial)
    }
}
