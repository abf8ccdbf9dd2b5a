import Foundation

/// A child process started with posix_spawn and reaped with waitpid.
///
/// Foundation's `Process.waitUntilExit()` can hang when called from a Swift
/// concurrency thread on Linux (it waits on a run loop that nobody runs), so
/// the tests manage their brokers, gateways and tools with this instead.
final class ChildProcess {
    let pid: pid_t
    private(set) var exitStatus: Int32?

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34 and later),
    /// which Swift's Glibc module does not declare.
    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
    private static let addCloseFrom: AddCloseFrom? = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np").map {
        unsafeBitCast($0, to: AddCloseFrom.self)
    }

    /// Starts `executable` with `arguments`; stdout and stderr go to `output`
    /// (appended), or nowhere. `socket` is passed as descriptor 3, as
    /// systemd passes a socket it holds (`sd_listen_fds(3)`).
    init(
        _ executable: String, _ arguments: [String], output: URL? = nil, environment: [String: String]? = nil,
        passing socket: CInt? = nil
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        let target = output?.path ?? "/dev/null"
        posix_spawn_file_actions_addopen(&actions, 1, target, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        if let socket { posix_spawn_file_actions_adddup2(&actions, socket, 3) }
        // Nothing else of the test runner's: a socket a test holds open (and
        // means to close) must not stay open in a broker or gateway another
        // test starts meanwhile.
        _ = Self.addCloseFrom?(&actions, socket == nil ? 3 : 4)
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let env = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { env.forEach { free($0) } }
        // The child must not inherit the test runner's blocked signals (its
        // threads block SIGTERM and friends), or it could never be stopped.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t(), defaultSignals = sigset_t()
        sigemptyset(&noSignals)
        sigfillset(&defaultSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        posix_spawnattr_setsigdefault(&attributes, &defaultSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, env)
        guard rc == 0 else { throw BrokerError("could not start \(executable): \(String(cString: strerror(rc)))") }
        self.pid = pid
    }

    var isRunning: Bool {
        guard exitStatus == nil else { return false }
        var status: Int32 = 0
        let rc = waitpid(pid, &status, WNOHANG)
        if rc == pid { exitStatus = Self.decode(status) }
        return exitStatus == nil
    }

    /// The process's resident memory (VmRSS), in bytes; nil once it is gone.
    var residentBytes: Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { return nil }
        return kilobytes * 1024
    }

    func signal(_ number: Int32) {
        guard exitStatus == nil else { return }
        kill(pid, number)
    }

    /// Waits for the process to end and returns its exit status (128 + signal when killed).
    @discardableResult
    func wait() -> Int32 {
        if let exitStatus { return exitStatus }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let decoded = Self.decode(status)
        exitStatus = decoded
        return decoded
    }

    /// Waits up to `timeout` seconds; nil if still running.
    func wait(timeout: Double) async -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while isRunning {
            if Date() > deadline { return nil }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return exitStatus
    }

    private static func decode(_ status: Int32) -> Int32 {
        let signal = status & 0x7F
        return signal == 0 ? (status >> 8) & 0xFF : 128 + signal
    }

    deinit {
        if exitStatus == nil {
            kill(pid, SIGKILL)
            wait()
        }
    }
}
