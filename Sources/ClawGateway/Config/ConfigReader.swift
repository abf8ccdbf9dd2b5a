import Foundation
import Yams

/// Walks a composed YAML document, reading typed values and collecting every
/// problem with its path instead of stopping at the first.
///
/// Each mapping is read through a ``Section`` that knows the keys it may hold,
/// so a misspelt key is reported rather than silently ignored.
final class ConfigReader {
    private(set) var problems: [ConfigProblem] = []
    private let environment: [String: String]

    init(environment: [String: String]) {
        self.environment = environment
    }

    func report(_ path: String, _ message: String) {
        problems.append(ConfigProblem(path: path, message: message))
    }

    /// A mapping at `path` holding only `keys`; nil (and a problem) if the node
    /// is something else.
    func section(_ node: Node?, at path: String, keys: [String]) -> Section? {
        guard let node else { return nil }
        guard case .mapping(let mapping) = node else {
            report(path, "must be a mapping of \(keys.joined(separator: ", "))")
            return nil
        }
        var values: [String: Node] = [:]
        for (key, value) in mapping {
            guard case .scalar(let scalar) = key else {
                report(path, "keys must be plain names")
                continue
            }
            let name = scalar.string
            guard keys.contains(name) else {
                let suggestion = Self.closest(to: name, in: keys).map { " (did you mean \($0)?)" } ?? ""
                report(Self.join(path, name), "unknown key\(suggestion)")
                continue
            }
            values[name] = value
        }
        return Section(reader: self, path: path, values: values)
    }

    /// A scalar as a string with `${VAR}` substituted; nil (and a problem) if the
    /// node is a mapping or a list, or names a variable that is not set.
    func string(_ node: Node, at path: String) -> String? {
        guard case .scalar(let scalar) = node else {
            report(path, "must be a single value, not a \(node.isMapping ? "mapping" : "list")")
            return nil
        }
        return substitute(scalar.string, at: path)
    }

    private func substitute(_ text: String, at path: String) -> String? {
        guard text.contains("${") else { return text }
        var result = ""
        var rest = Substring(text)
        var ok = true
        while let open = rest.range(of: "${") {
            result += rest[..<open.lowerBound]
            guard let close = rest[open.upperBound...].firstIndex(of: "}") else {
                report(path, "unterminated ${ (write ${NAME})")
                return nil
            }
            let name = String(rest[open.upperBound..<close])
            if name.isEmpty || !name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) {
                report(path, "\"${\(name)}\" is not a variable name (letters, digits and _)")
                ok = false
            } else if let value = environment[name] {
                result += value
            } else {
                report(path, "environment variable \(name) is not set")
                ok = false
            }
            rest = rest[rest.index(after: close)...]
        }
        result += rest
        return ok ? result : nil
    }

    static func join(_ path: String, _ key: String) -> String {
        path.isEmpty ? key : "\(path).\(key)"
    }

    /// The known key nearest to a misspelt one, if it is close enough to be a typo.
    static func closest(to word: String, in candidates: [String]) -> String? {
        let scored = candidates.map { ($0, editDistance(word, $0)) }
        guard let best = scored.min(by: { $0.1 < $1.1 }), best.1 <= max(2, word.count / 3) else { return nil }
        return best.0
    }

    private static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        var previous = Array(0...b.count)
        for i in 1...max(a.count, 1) where !a.isEmpty {
            var current = [i] + Array(repeating: 0, count: b.count)
            for j in stride(from: 1, through: b.count, by: 1) {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = current
        }
        return a.isEmpty ? b.count : previous[b.count]
    }
}

extension ConfigReader {
    /// One mapping of the file, read key by key.
    struct Section {
        let reader: ConfigReader
        let path: String
        let values: [String: Node]

        func path(_ key: String) -> String { ConfigReader.join(path, key) }

        func has(_ key: String) -> Bool { values[key] != nil }

        /// A nested mapping; nil when absent (and a problem when `required`).
        func section(_ key: String, keys: [String], required: Bool = false) -> Section? {
            guard let node = values[key] else {
                if required { reader.report(path(key), "is required") }
                return nil
            }
            return reader.section(node, at: path(key), keys: keys)
        }

        /// The items of a list; nil when absent (and a problem when `required`).
        func list(_ key: String, required: Bool = false) -> [(path: String, node: Node)]? {
            guard let node = values[key] else {
                if required { reader.report(path(key), "is required") }
                return nil
            }
            guard case .sequence(let sequence) = node else {
                reader.report(path(key), "must be a list")
                return nil
            }
            return sequence.enumerated().map { ("\(path(key))[\($0.offset)]", $0.element) }
        }

        func string(_ key: String, required: Bool = false) -> String? {
            guard let node = values[key] else {
                if required { reader.report(path(key), "is required") }
                return nil
            }
            return reader.string(node, at: path(key))
        }

        /// A string that must not be empty once variables are substituted.
        func nonEmpty(_ key: String, required: Bool = false) -> String? {
            guard let value = string(key, required: required) else { return nil }
            guard !value.isEmpty else {
                reader.report(path(key), "must not be empty")
                return nil
            }
            return value
        }

        func int(_ key: String, default fallback: Int, in range: ClosedRange<Int>) -> Int {
            guard let text = string(key) else { return fallback }
            guard let value = Int(text) else {
                reader.report(path(key), "must be a whole number, not \"\(text)\"")
                return fallback
            }
            guard range.contains(value) else {
                reader.report(path(key), "must be between \(range.lowerBound) and \(range.upperBound), not \(value)")
                return fallback
            }
            return value
        }

        func bool(_ key: String, default fallback: Bool) -> Bool {
            guard let text = string(key) else { return fallback }
            switch text.lowercased() {
            case "true", "yes", "on": return true
            case "false", "no", "off": return false
            default:
                reader.report(path(key), "must be true or false, not \"\(text)\"")
                return fallback
            }
        }

        /// A duration longer than zero; with `zeroTurnsOff`, also `0` (or
        /// `0s`), which turns the feature off; with `atLeast`, nothing shorter
        /// but zero.
        func duration(_ key: String, default fallback: Duration, zeroTurnsOff: Bool = false, atLeast minimum: Duration? = nil)
            -> Duration
        {
            guard let text = string(key) else { return fallback }
            if zeroTurnsOff, text == "0" { return .zero }
            guard let value = ConfigDuration.parse(text) else {
                reader.report(path(key), "\"\(text)\" is not a duration; write e.g. 500ms, 10s, 2m, 1h or 30d")
                return fallback
            }
            if zeroTurnsOff, value == .zero { return .zero }
            guard value > .zero else {
                reader.report(path(key), "must be longer than zero")
                return fallback
            }
            if let minimum, value < minimum {
                reader.report(path(key), "must be at least \(ConfigDuration.format(minimum))\(zeroTurnsOff ? ", or 0 to turn it off" : "")")
                return fallback
            }
            return value
        }

        /// One of a fixed set of words.
        func choice<T>(_ key: String, default fallback: T, from choices: [(String, T)]) -> T {
            guard let text = string(key) else { return fallback }
            guard let match = choices.first(where: { $0.0 == text }) else {
                reader.report(path(key), "must be one of \(choices.map(\.0).joined(separator: ", ")), not \"\(text)\"")
                return fallback
            }
            return match.1
        }
    }
}

extension Node {
    fileprivate var isMapping: Bool {
        if case .mapping = self { return true }
        return false
    }
}
