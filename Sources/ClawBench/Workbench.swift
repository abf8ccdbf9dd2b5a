import Foundation
import Synchronization

/// A benchmark's work folder and the processes started in it: each with
/// its log in the folder, all stopped by PID, newest first, at the end, and
/// the folder removed. ``BenchSite`` and ``RecordsRig`` each compose one.
final class Workbench: Sendable {
    let directory: URL
    private let processes = Mutex<[(name: String, pid: pid_t)]>([])

    init(prefix: String) throws {
        directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("\(prefix)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        // The broker (and PostgreSQL) may drop to their own user: they must be able to read their configs.
        chmod(directory.path, 0o755)
    }

    func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

    /// Starts `command` as `name`; its output goes to `<name>.log` unless `files` say otherwise.
    @discardableResult
    func spawn(_ name: String, _ command: [String], files: Spawn.Files? = nil, environment: [String: String] = [:]) throws -> pid_t {
        let pid = try Spawn.start(command, files ?? Spawn.Files(output: path("\(name).log")), environment: environment)
        processes.withLock { $0.append((name, pid)) }
        return pid
    }

    /// A process that ended (or was awaited) is no longer stopped at the end.
    func forget(_ pid: pid_t) {
        processes.withLock { $0.removeAll { $0.pid == pid } }
    }

    /// The pids of the processes started as `name`.
    func pids(_ name: String) -> [pid_t] {
        processes.withLock { $0.filter { $0.name == name }.map(\.pid) }
    }

    /// Stops the processes started as `name` now, each awaited.
    func stop(_ name: String) {
        let named = processes.withLock { processes in
            defer { processes.removeAll { $0.name == name } }
            return processes.filter { $0.name == name }
        }
        for process in named { Self.terminate(process.pid) }
    }

    /// The last lines a process logged, to say why a run failed.
    func logTail(_ name: String, lines: Int = 20) -> String {
        let text = (try? String(contentsOf: directory.appendingPathComponent("\(name).log"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(lines).joined(separator: "\n")
    }

    /// A mosquitto on `port` with no persistence (and `extra` lines of
    /// config), logging to `mosquitto.log`; returns once it listens.
    func startBroker(port: Int, extra: String = "") throws {
        let config = directory.appendingPathComponent("mosquitto.conf")
        try """
            listener \(port) 127.0.0.1
            allow_anonymous true
            persistence false
            set_tcp_nodelay true
            \(extra)
            log_dest stderr

            """.write(to: config, atomically: true, encoding: .utf8)
        chmod(config.path, 0o644)
        let paths = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto", "/usr/local/sbin/mosquitto"]
        guard let mosquitto = paths.first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw BenchError("mosquitto is not installed: apt-get install -y mosquitto")
        }
        try spawn("mosquitto", [mosquitto, "-c", config.path])
        for _ in 0..<1000 {
            if Loopback.listens(port) { return }
            usleep(10_000)
        }
        throw BenchError("mosquitto does not listen on \(port); its log:\n" + logTail("mosquitto"))
    }

    /// Every process, newest first, with `signal` (SIGTERM unless it says
    /// otherwise for a name), SIGKILL after 10 s; then the folder is removed.
    func stop(signal: (String) -> Int32 = { _ in SIGTERM }) {
        let started = processes.withLock { processes in
            defer { processes.removeAll() }
            return processes
        }
        for (name, pid) in started.reversed() { Self.terminate(pid, signal: signal(name)) }
        try? FileManager.default.removeItem(at: directory)
    }

    static func terminate(_ pid: pid_t, signal: Int32 = SIGTERM) {
        kill(pid, signal)
        var status: Int32 = 0
        for _ in 0..<1000 where waitpid(pid, &status, WNOHANG) == 0 { usleep(10_000) }
        if waitpid(pid, &status, WNOHANG) == 0 {
            kill(pid, SIGKILL)
            waitpid(pid, &status, 0)
        }
    }
}
