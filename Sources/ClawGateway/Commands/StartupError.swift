import Foundation

/// Why `run` stopped before it started anything (SPEC §13): what would
/// otherwise harm a gateway already running on the same data or port, or
/// take connections on a port the config does not name. Each says what
/// holds what, and what to do.
enum StartupError: ShapedError, Equatable {
    /// Another process holds the lock beside `storage.path`.
    case alreadyRunning(lock: String, holder: RunningProcess?)
    /// The lock file could not be made or locked at all.
    case lockFailed(lock: String, cause: String)
    /// Another process listens on `http.listen`.
    case portTaken(address: String, holder: RunningProcess?)
    /// `http.listen` cannot be bound for another reason.
    case listenFailed(address: String, cause: String)
    /// systemd passed a socket (`claw-gateway.socket`) on another address than `http.listen`.
    case listenMismatch(passed: String, configured: String)

    /// The exit status: 78 (EX_CONFIG) for what only a change of the config
    /// or the socket unit fixes, so that systemd does not restart in vain
    /// (`RestartPreventExitStatus=78`); 1 for a place that another process
    /// holds now, which a restart takes once that process has stopped.
    var exitStatus: Int32 {
        switch self {
        case .listenMismatch: ExitStatus.configError
        case .alreadyRunning, .lockFailed, .portTaken, .listenFailed: 1
        }
    }

    var shape: ErrorShape {
        switch self {
        case .alreadyRunning(let lock, let holder):
            ErrorShape(
                code: "already_running",
                message: "another gateway (\(holder?.description ?? "its pid not written yet")) runs on this storage: it holds \(lock). "
                    + "Stop it first (systemctl stop claw-gateway, or Ctrl-C where it runs), or give this gateway a storage.path and an http.listen of its own")
        case .lockFailed(let lock, let cause):
            ErrorShape(
                code: "lock_failed",
                message: "cannot lock \(lock) beside storage.path: check that the gateway's user may create and write files in its folder",
                cause: cause)
        case .portTaken(let address, let holder):
            ErrorShape(
                code: "port_in_use",
                message: "http.listen \(address) is taken by \(holder.map { "another process (\($0))" } ?? "another process (ss -ltnp names it)"). "
                    + "Stop it first, or give this gateway an http.listen of its own")
        case .listenFailed(let address, let cause):
            ErrorShape(
                code: "listen_failed",
                message: "cannot listen on http.listen \(address): check that the address is one of this host's", cause: cause)
        case .listenMismatch(let passed, let configured):
            ErrorShape(
                code: "listen_mismatch",
                message: "the socket systemd passed (LISTEN_FDS, claw-gateway.socket) listens on \(passed), but http.listen is \(configured). "
                    + "Make ListenStream= of claw-gateway.socket and http.listen the same (systemctl edit claw-gateway.socket), "
                    + "then systemctl restart claw-gateway.socket claw-gateway")
        }
    }
}

/// A process named in a ``StartupError``: its pid, and its name when /proc shows it.
struct RunningProcess: Sendable, Equatable, CustomStringConvertible {
    var pid: pid_t

    var name: String? {
        (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    var description: String { name.map { "pid \(pid), \($0)" } ?? "pid \(pid)" }

    /// The process listening on TCP `port` (any address), when /proc shows
    /// it: the listening socket's inode in `/proc/net/tcp{,6}`, then the
    /// process with that socket among its descriptors. Only processes this
    /// user may look into are found.
    static func listening(on port: Int) -> RunningProcess? {
        let hexPort = String(format: ":%04X", port)
        var inodes: Set<String> = []
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            guard let text = try? String(contentsOfFile: table, encoding: .utf8) else { continue }
            for line in text.split(separator: "\n").dropFirst() {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                // sl local_address rem_address st ... inode: st 0A is LISTEN.
                guard fields.count > 9, fields[1].hasSuffix(hexPort), fields[3] == "0A" else { continue }
                inodes.insert("socket:[\(fields[9])]")
            }
        }
        guard !inodes.isEmpty, let processes = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return nil }
        let me = getpid()
        for entry in processes {
            guard let pid = pid_t(entry), pid != me,
                let descriptors = try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")
            else { continue }
            for descriptor in descriptors {
                if let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(descriptor)"),
                    inodes.contains(target)
                {
                    return RunningProcess(pid: pid)
                }
            }
        }
        return nil
    }
}
