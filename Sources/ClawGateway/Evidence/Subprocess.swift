import Foundation
import Synchronization

/// A program run to its end off the caller's thread (ffmpeg, ffprobe): its
/// exit status is awaited, never waited on with a blocking call.
enum Subprocess {
    /// Runs `program`; its exit status, or -1 when it could not start (or
    /// the task was cancelled). `started` is handed the running process (to
    /// stop it, to note its pid). Cancelling the task kills the process.
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
        if Task.isCancelled { return -1 }
        do { try process.run() } catch { return -1 }
        let pid = process.processIdentifier
        started?(process)
        // A cancelled wait ends at once (an AsyncStream's does): the child
        // is killed with it, never left running with nobody to stop it.
        return await withTaskCancellationHandler {
            var status: Int32 = -1
            for await code in exited.stream { status = code }
            return status
        } onCancel: {
            kill(pid, SIGKILL)
        }
    }

    /// How a run bounded in time ended.
    enum Exit: Sendable, Equatable {
        case status(Int32)
        /// It could not be started.
        case notStarted
        /// Still running at its deadline: killed by its pid, and not waited for.
        case timedOut
    }

    /// Runs `program` until it exits or `deadline` passes on `clock`. At the
    /// deadline it is killed (SIGKILL, by its pid) and given up on at once,
    /// not waited for: a process stuck in a write the kernel cannot abort
    /// dies only when the write returns, and no caller waits for that.
    static func run(
        _ program: String, _ arguments: [String], output: Pipe? = nil, until deadline: Duration, on clock: GameClock
    ) async -> Exit {
        let running = Running()
        return await withTaskGroup(of: Exit?.self) { group in
            group.addTask {
                let status = await run(program, arguments, output: output) { process in
                    let late = running.state.withLock { running in
                        running.pid = process.processIdentifier
                        return running.givenUp
                    }
                    if late { kill(process.processIdentifier, SIGKILL) }
                }
                if Task.isCancelled { return nil }
                return status == -1 && running.state.withLock({ $0.pid }) == nil ? .notStarted : .status(status)
            }
            group.addTask {
                do { try await clock.sleep(deadline) } catch { return nil }
                return .timedOut
            }
            let exit = (await group.next() ?? nil) ?? .timedOut
            if exit == .timedOut, let pid = running.state.withLock({ running in
                running.givenUp = true
                return running.pid
            }) {
                kill(pid, SIGKILL)
            }
            // Ends the other child: the timer, or the wait for an exit that may not come soon.
            group.cancelAll()
            return exit
        }
    }

    /// The pid of a bounded run once it started; `givenUp` once its
    /// deadline passed, so that a process started after it is killed as it starts.
    private final class Running: Sendable {
        let state = Mutex<(pid: pid_t?, givenUp: Bool)>((nil, false))
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
