import Foundation
import Testing

@testable import ClawGateway

/// The hand-written timestamp against Foundation's ISO 8601 style.
@Suite struct TimestampTests {
    static let style = Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: .gmt)

    @Test(arguments: [0.0, 0.001, 59.999, 951_782_400, 1_795_000_000.123, 4_102_444_799.999, 253_402_300_799.5, 1_709_164_800.25])
    func knownInstants(_ seconds: Double) {
        let date = Date(timeIntervalSince1970: seconds)
        #expect(Timestamp.string(date) == date.formatted(Self.style))
    }

    @Test func everyDayOfFourHundredYearsAndRandomMilliseconds() {
        var generator = SystemRandomNumberGenerator()
        // Leap years, centuries and the 400-year cycle, from 1970 to 2370.
        for day in stride(from: 0, to: 146_097, by: 1) {
            let milliseconds = Double(day) * 86_400 + Double(UInt32.random(in: 0..<86_400_000, using: &generator)) / 1000
            let date = Date(timeIntervalSince1970: milliseconds)
            let expected = date.formatted(Self.style)
            guard Timestamp.string(date) == expected else {
                Issue.record("\(milliseconds): \(Timestamp.string(date)) ≠ \(expected)")
                return
            }
            guard let read = Timestamp.date(expected), Timestamp.string(read) == expected else {
                Issue.record("\(expected) read back as \(Timestamp.date(expected).map(Timestamp.string) ?? "nothing")")
                return
            }
        }
    }

    @Test(arguments: ["", "2026-11-21T10:00:30Z", "2026-11-21 10:00:30.123Z", "2026-13-21T10:00:30.123Z", "2026-11-21T24:00:30.123Z",
        "2026-11-21T10:00:30.12xZ", "2026-11-21T10:00:30.123+", "２０２６-11-21T10:00:30.123Z"])
    func textThatTheGatewayDidNotWriteIsNotADate(_ text: String) {
        #expect(Timestamp.date(text) == nil)
    }
}
