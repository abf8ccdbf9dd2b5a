/// The Prometheus text exposition format, read line by line: HELP and TYPE
/// per family, and every sample by its series (name and labels as written).
struct PrometheusText {
    var help: [String: String] = [:]
    var types: [String: String] = [:]
    var samples: [String: Double] = [:]
    /// Lines that break the format: a sample of a family with no TYPE before
    /// it, a TYPE without HELP, a value that is not a number, a repeated series.
    var problems: [String] = []

    struct Unreadable: Error, CustomStringConvertible {
        var description: String
    }

    init(_ text: String) throws {
        guard text.hasSuffix("\n") else { throw Unreadable(description: "the exposition does not end with a newline") }
        for line in text.split(separator: "\n") {
            if line.hasPrefix("# HELP ") {
                let parts = line.dropFirst(7).split(separator: " ", maxSplits: 1)
                help[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
            } else if line.hasPrefix("# TYPE ") {
                let parts = line.dropFirst(7).split(separator: " ")
                guard parts.count == 2 else {
                    problems.append("bad TYPE line: \(line)")
                    continue
                }
                let family = String(parts[0])
                if help[family] == nil { problems.append("TYPE before HELP: \(family)") }
                types[family] = String(parts[1])
            } else if line.hasPrefix("#") {
                continue
            } else {
                guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                    problems.append("unreadable sample: \(line)")
                    continue
                }
                let series = String(line[..<space])
                let name = String(series.prefix { $0 != "{" })
                if family(of: name) == nil { problems.append("sample of a family with no TYPE: \(line)") }
                if samples[series] != nil { problems.append("repeated series: \(series)") }
                samples[series] = value
            }
        }
    }

    /// The family a sample name belongs to: itself, or a histogram's or
    /// summary's family for its `_bucket`, `_sum` and `_count`.
    func family(of name: String) -> String? {
        if types[name] != nil { return name }
        for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) {
            let family = String(name.dropLast(suffix.count))
            if let type = types[family], type == "histogram" || type == "summary" { return family }
        }
        return nil
    }
}
