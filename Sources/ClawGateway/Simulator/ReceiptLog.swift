import Foundation
import Protocol

/// What the simulated PCs received, one JSON object a line, appended to a
/// file: the PCs' own word on which commands reached them and when, for
/// checks that must not take the gateway's word for it (`scripts/chaos`).
///
/// Each line is written with one `write(2)` on a descriptor opened with
/// `O_APPEND`, before the PC acts on the message: a line is never torn or
/// interleaved, several simulate processes may share the file, and a
/// process killed with SIGKILL loses at most the message it was reading.
/// A restarted simulator appends to what its predecessor wrote.
final class ReceiptLog: Sendable {
    let path: String
    private let descriptor: Int32

    struct OpenFailed: Error {
        var message: String
    }

    init(path: String) throws(OpenFailed) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw OpenFailed(message: "Cannot open the receipt log \(path): \(String(cString: strerror(errno))). Check the folder exists and is writable.")
        }
        self.path = path
        self.descriptor = descriptor
    }

    deinit {
        close(descriptor)
    }

    /// Appends the line for one message received on `topic` (`control` or `camera`).
    func record(machine: String, topic: String, payload: [UInt8], at date: Date = Date()) {
        var line = Self.line(machine: machine, topic: topic, payload: payload, at: date)
        line.append(UInt8(ascii: "\n"))
        line.withUnsafeBytes { bytes in
            // A short write to a regular file happens only when the disk is
            // full; the line is then lost, which the checks see as a gap.
            _ = write(descriptor, bytes.baseAddress, bytes.count)
        }
    }

    /// `{"time","machine","topic","command","data","serial","session","player"}`;
    /// fields the message does not carry are left out, and a message the PC
    /// cannot read is written with `"unreadable"` and its length instead.
    static func line(machine: String, topic: String, payload: [UInt8], at date: Date) -> [UInt8] {
        var fields: [(String, JSONObjectWriter.Value)] = [
            ("time", .string(Timestamp.string(date))), ("machine", .string(machine)), ("topic", .string(topic)),
        ]
        guard let message = try? WireMessage.decode(payload) else {
            fields.append(("unreadable", .integer(Int64(payload.count))))
            return JSONObjectWriter.object(fields)
        }
        fields.append(("command", .integer(Int64(message.command))))
        if let data = message.data { fields.append(("data", .string(data))) }
        if let serial = message.serial { fields.append(("serial", .integer(serial))) }
        if let session = message.session { fields.append(("session", .string(session))) }
        if let player = message.player { fields.append(("player", .string(player))) }
        return JSONObjectWriter.object(fields)
    }
}
