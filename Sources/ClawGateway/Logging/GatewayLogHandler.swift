import Foundation
import Logging
import Synchronization

/// The gateway's log lines, one per line on standard error.
///
/// On a terminal (or into a file) a line reads as swift-log's stream handler
/// writes it: `2026-11-24T10:00:00+0000 warning claw-gateway: machine.id=m1 [ClawGateway] Machine offline`.
/// Under systemd, when standard error is the journal (`JOURNAL_STREAM`
/// names it), each line starts with its syslog priority instead of a
/// timestamp, `<4>warning claw-gateway: …`, which journald reads
/// (`SyslogLevelPrefix=`, on by default), so `journalctl -p warning` shows
/// warnings and worse only.
///
/// Metadata values are escaped: a value with spaces, quotes or control
/// characters is written quoted, with `\n`, `\"` and `\u{…}` escapes, so an
/// untrusted value cannot forge or break a line. Unlike the stream handler,
/// nothing is formatted when metadata is set, only when a line is written
/// (frameworks set request metadata on every request).
struct GatewayLogHandler: LogHandler {
    /// Where lines go, shared by every logger of the process.
    final class Output: Sendable {
        let journald: Bool
        private let write: Mutex<@Sendable (String) -> Void>

        init(journald: Bool, write: @escaping @Sendable (String) -> Void) {
            self.journald = journald
            self.write = Mutex(write)
        }

        /// Standard error, with priorities when it is the journal.
        static let standardError = Output(journald: Output.stderrIsJournal()) { line in
            var line = line
            line.withUTF8 { bytes in
                var offset = 0
                while offset < bytes.count {
                    let written = Foundation.write(2, bytes.baseAddress! + offset, bytes.count - offset)
                    if written <= 0 { break }
                    offset += written
                }
            }
        }

        func emit(_ line: String) {
            write.withLock { $0(line) }
        }

        /// `JOURNAL_STREAM` is `device:inode` of the journal's stream when
        /// systemd connected it; it counts only if it is still standard error.
        static func stderrIsJournal(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
            guard let stream = environment["JOURNAL_STREAM"] else { return false }
            let parts = stream.split(separator: ":")
            guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
            var info = stat()
            guard fstat(2, &info) == 0 else { return false }
            return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
        }
    }

    let label: String
    let output: Output
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, level: Logger.Level, output: Output = .standardError, metadataProvider: Logger.MetadataProvider? = nil) {
        self.label = label
        self.logLevel = level
        self.output = output
        self.metadataProvider = metadataProvider
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var merged = metadata
        if let provided = metadataProvider?.get() { merged.merge(provided) { _, new in new } }
        if let explicit = event.metadata { merged.merge(explicit) { _, new in new } }
        if let error = event.error { merged["error"] = .string("\(error)") }
        var text = output.journald ? "<\(Self.priority(event.level))>" : Self.timestamp() + " "
        text += "\(event.level) \(label):"
        for key in merged.keys.sorted() {
            text += " \(key)=\(Self.escaped(merged[key]?.description ?? ""))"
        }
        text += " [\(event.source)] \(event.message)\n"
        output.emit(text)
    }

    /// The syslog priority of a level (RFC 5424): journald's `-p` filter.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// A value as it may appear in a line: as is when it is plain, otherwise
    /// quoted with escapes.
    static func escaped(_ value: String) -> String {
        let plain = !value.isEmpty && value.unicodeScalars.allSatisfy { scalar in
            scalar.value > 0x20 && scalar != "\"" && scalar != "\\" && scalar.value != 0x7F
                && !Self.unsafeCategories.contains(scalar.properties.generalCategory)
        }
        guard !plain else { return value }
        var text = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": text += "\\\""
            case "\\": text += "\\\\"
            case "\n": text += "\\n"
            case "\r": text += "\\r"
            case "\t": text += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F || Self.unsafeCategories.contains(scalar.properties.generalCategory):
                text += "\\u{\(String(scalar.value, radix: 16))}"
            default:
                text.unicodeScalars.append(scalar)
            }
        }
        return text + "\""
    }

    /// Characters that could reorder, hide or break what follows them in a line.
    private static let unsafeCategories: Set<Unicode.GeneralCategory> = [.control, .format, .lineSeparator, .paragraphSeparator]

    private static func timestamp() -> String {
        var now = time(nil)
        var parts = tm()
        gmtime_r(&now, &parts)
        var buffer = [CChar](repeating: 0, count: 32)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S+0000", &parts)
        return String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
