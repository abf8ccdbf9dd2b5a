import Foundation

/// One gateway per data (SPEC §13): the lock file beside `storage.path`
/// (`gateway.sqlite.lock`), locked with `flock` for as long as the process
/// lives and holding its pid. A second `claw-gateway run` on the same
/// storage fails on it before it touches anything the first one uses: its
/// MQTT session (the same client id), its retained state and snapshots, its
/// games and camera recorders.
///
/// The kernel lets go of the lock when the process ends, however it ends
/// (a `kill -9` leaves no stale lock); the file stays, with the last pid.
/// It is opened close-on-exec, so that no child (ffmpeg) keeps it locked.
final class InstanceLock: Sendable {
    let path: String
    private let descriptor: CInt

    private init(path: String, descriptor: CInt) {
        self.path = path
        self.descriptor = descriptor
    }

    /// The lock file of the storage at `storage`.
    static func path(beside storage: String) -> String { storage + ".lock" }

    /// Takes the lock of the storage at `storage`, or says who holds it.
    static func take(beside storage: String) throws(StartupError) -> InstanceLock {
        let path = path(beside: storage)
        // The storage's folder, as the storage itself would make it.
        try? FileManager.default.createDirectory(
            at: URL(fileURLWithPath: path).deletingLastPathComponent(), withIntermediateDirectories: true)
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw .lockFailed(lock: path, cause: String(cString: strerror(errno))) }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let code = errno
            let holder = code == EWOULDBLOCK ? Self.pid(in: descriptor) : nil
            close(descriptor)
            if code == EWOULDBLOCK { throw .alreadyRunning(lock: path, holder: holder) }
            throw .lockFailed(lock: path, cause: String(cString: strerror(code)))
        }
        let pid = Array("\(getpid())\n".utf8)
        guard ftruncate(descriptor, 0) == 0, pwrite(descriptor, pid, pid.count, 0) == pid.count else {
            let cause = String(cString: strerror(errno))
            close(descriptor)
            throw .lockFailed(lock: path, cause: cause)
        }
        return InstanceLock(path: path, descriptor: descriptor)
    }

    /// The pid the holder wrote, when it has written one yet.
    private static func pid(in descriptor: CInt) -> RunningProcess? {
        var bytes = [UInt8](repeating: 0, count: 32)
        let count = pread(descriptor, &bytes, bytes.count, 0)
        guard count > 0, let pid = pid_t(String(decoding: bytes[0..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            return nil
        }
        return RunningProcess(pid: pid)
    }

    /// Lets go of the lock: the process is done with the storage.
    func release() {
        close(descriptor)
    }
}
