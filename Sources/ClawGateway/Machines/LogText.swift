/// Untrusted bytes as they may appear in a log line: a short prefix, with
/// control characters escaped so a payload cannot forge or break lines.
enum LogText {
    static let limit = 200

    static func payload(_ bytes: [UInt8]) -> String {
        var text = ""
        for scalar in String(decoding: bytes.prefix(limit), as: UTF8.self).unicodeScalars {
            switch scalar.properties.generalCategory {
            case .control, .format, .lineSeparator, .paragraphSeparator:
                text += scalar.escaped(asASCII: true)
            default:
                text.unicodeScalars.append(scalar)
            }
        }
        return bytes.count > limit ? text + "… (\(bytes.count) bytes)" : text
    }
}
