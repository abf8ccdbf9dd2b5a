import Foundation

/// The one timestamp format of the gateway: ISO 8601 UTC with milliseconds,
/// e.g. `2026-11-21T10:00:30.123Z`. It sorts as text, which the games table
/// relies on.
enum Timestamp {
    private static let style = Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: .gmt)

    static func string(_ date: Date) -> String {
        date.formatted(style)
    }
}
