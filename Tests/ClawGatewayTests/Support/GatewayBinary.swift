import Foundation
import Testing

/// The built `claw-gateway` executable, run as a child process.
enum GatewayBinary {
    /// `swift build --build-tests` puts it beside the test bundle.
    static func url() throws -> URL {
        var folder = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
        for _ in 0..<4 {
            let candidate = folder.appendingPathComponent("claw-gateway")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            folder = folder.deletingLastPathComponent()
        }
        throw BrokerError("the claw-gateway executable was not found next to the tests; build it first with swift build --build-tests (./scripts/test does)")
    }

    struct Result {
        var status: Int32
        var output: String
        var error: String
    }

    /// Runs the binary to completion.
    static func run(_ arguments: [String], environment: [String: String]? = nil) throws -> Result {
        let folder = try TemporaryDirectory.make(prefix: "run")
        defer { try? FileManager.default.removeItem(at: folder) }
        let out = folder.appendingPathComponent("stdout"), err = folder.appendingPathComponent("stderr")
        let shell = ["-c", "exec \"$0\" \"$@\" > \(out.path) 2> \(err.path)", try url().path] + arguments
        let process = try ChildProcess("/bin/sh", shell, environment: environment)
        let status = process.wait()
        return Result(
            status: status, output: (try? String(contentsOf: out, encoding: .utf8)) ?? "",
            error: (try? String(contentsOf: err, encoding: .utf8)) ?? "")
    }

    /// Starts the binary in the background; its output goes to `log`.
    static func start(_ arguments: [String], log: URL) throws -> ChildProcess {
        try ChildProcess(try url().path, arguments, output: log)
    }
}
