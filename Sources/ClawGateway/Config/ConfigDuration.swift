/// Durations as `gateway.yaml` writes them: a number and a unit, `500ms`,
/// `10s`, `2m`, `1h`, `30d`; fractions such as `1.5s` are allowed.
enum ConfigDuration {
    private static let units: [(suffix: String, seconds: Double)] = [
        ("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400),
    ]

    static func parse(_ text: String) -> Duration? {
        for unit in units where text.hasSuffix(unit.suffix) {
            let number = text.dropLast(unit.suffix.count)
            guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
                let value = Double(number), value.isFinite
            else { return nil }
            return .milliseconds(Int64((value * unit.seconds * 1000).rounded()))
        }
        return nil
    }

    /// The shortest form that parses back to the same duration.
    static func format(_ duration: Duration) -> String {
        let ms = duration.milliseconds
        if ms % 3_600_000 == 0, ms != 0 { return "\(ms / 3_600_000)h" }
        if ms % 60_000 == 0, ms != 0 { return "\(ms / 60_000)m" }
        if ms % 1000 == 0 { return "\(ms / 1000)s" }
        return "\(ms)ms"
    }
}
