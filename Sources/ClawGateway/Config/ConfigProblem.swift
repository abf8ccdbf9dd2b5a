/// One thing wrong with a config file, as `path: message`.
struct ConfigProblem: Sendable, Equatable, CustomStringConvertible {
    /// Where: `machines[1].id`, `mqtt.url`; the file name for a syntax error.
    var path: String
    var message: String

    var description: String { "\(path): \(message)" }
}

/// A config file that cannot be used, with every problem found in it.
struct ConfigError: Error, Sendable, CustomStringConvertible {
    var file: String
    var problems: [ConfigProblem]

    var description: String {
        (["\(file): \(problems.count) problem\(problems.count == 1 ? "" : "s")"] + problems.map { "  \($0)" })
            .joined(separator: "\n")
    }
}

extension ConfigError: ShapedError {
    var shape: ErrorShape {
        ErrorShape(
            code: "config", message: "\(file): \(problems.count) problem\(problems.count == 1 ? "" : "s")",
            cause: problems.map(\.description).joined(separator: "; "))
    }
}
