import Foundation

/// A program run to its end off the caller's thread (ffmpeg, ffprobe): its
/// exit status is awaited, never waited on with a blocking call.
enum Subprocess {
    /// Runs `program`; its exit status, or -1 when it could not start.
    /// `started` is handed the running process (to stop it, to note its pid).
    static func run(
        _ program: String, _ arguments: [String], output: Pipe? = nil, started: ((Process) -> Void)? = nil
    ) async -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: program)
        process.arguments = arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = output ?? FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        let exited = AsyncStream<Int32>.makeStream()
        process.terminationHandler = { process in
            exited.continuation.yield(process.terminationStatus)
            exited.continuation.finish()
        }
        do { try process.run() } catch { return -1 }
        started?(process)
        var status: Int32 = -1
        for await code in exited.stream { status = code }
        return status
    }

    /// The first executable `name` on the PATH, or nil.
    static func find(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for folder in path.split(separator: ":") {
            let candidate = "\(folder)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}
