import Foundation

/// The one timestamp format of the gateway: ISO 8601 UTC with milliseconds,
/// e.g. `2026-11-21T10:00:30.123Z`. It sorts as text, which the games table
/// relies on.
///
/// Written by hand: every event carries one, and a `FormatStyle` per event
/// showed in the profile.
enum Timestamp {
    static func string(_ date: Date) -> String {
        // Whole seconds, then the fraction truncated to milliseconds, as
        // Foundation's ISO 8601 style does.
        let interval = date.timeIntervalSince1970
        let seconds = interval.rounded(.down)
        let milliseconds = Int64(seconds) * 1000 + Int64((interval - seconds) * 1000)
        var days = milliseconds >= 0 ? milliseconds / 86_400_000 : (milliseconds - 86_399_999) / 86_400_000
        let ofDay = milliseconds - days * 86_400_000
        // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let dayOfEra = days - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)

        var out = [UInt8](repeating: 0, count: 24)
        func put(_ value: Int64, _ digits: Int, at offset: Int) {
            var value = value
            for index in stride(from: offset + digits - 1, through: offset, by: -1) {
                out[index] = UInt8(ascii: "0") + UInt8(value % 10)
                value /= 10
            }
        }
        put(year, 4, at: 0)
        out[4] = UInt8(ascii: "-")
        put(month, 2, at: 5)
        out[7] = UInt8(ascii: "-")
        put(day, 2, at: 8)
        out[10] = UInt8(ascii: "T")
        put(ofDay / 3_600_000, 2, at: 11)
        out[13] = UInt8(ascii: ":")
        put(ofDay / 60_000 % 60, 2, at: 14)
        out[16] = UInt8(ascii: ":")
        put(ofDay / 1000 % 60, 2, at: 17)
        out[19] = UInt8(ascii: ".")
        put(ofDay % 1000, 3, at: 20)
        out[23] = UInt8(ascii: "Z")
        return String(decoding: out, as: UTF8.self)
    }

    /// The date that ``string(_:)`` wrote as `text`, or nil for any other
    /// text. Read back into the middle of its millisecond, so that writing it
    /// again gives the same text.
    static func date(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count == 24, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"), bytes[10] == UInt8(ascii: "T"),
            bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"), bytes[19] == UInt8(ascii: "."),
            bytes[23] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ offset: Int, _ digits: Int) -> Int64? {
            var value: Int64 = 0
            for byte in bytes[offset..<offset + digits] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int64(byte - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0, 4), let month = number(5, 2), let day = number(8, 2), let hour = number(11, 2),
            let minute = number(14, 2), let second = number(17, 2), let millisecond = number(20, 3),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 60
        else { return nil }
        // Days since 1970-01-01 from the civil date (Howard Hinnant's algorithm).
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        let milliseconds = ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + millisecond
        return Date(timeIntervalSince1970: (Double(milliseconds) + 0.5) / 1000)
    }
}
