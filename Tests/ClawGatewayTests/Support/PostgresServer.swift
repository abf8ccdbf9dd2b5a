import Foundation
import Testing

/// A real PostgreSQL 15 for one test, from Debian's packages: a new cluster
/// (`initdb`) in a temporary directory, the server on a free loopback port as
/// a child process, stopped by PID, and a database made for the test.
///
/// `initdb` and the server refuse to run as root: as root, the directory is
/// given to the packaged `postgres` user and both run as it (`setpriv`, which
/// execs, so the child's PID is the server's own); as anyone else, as that
/// user. There is no fallback: without the binaries the test fails and says
/// how to install them.
final class PostgresServer {
    static let binaries = "/usr/lib/postgresql/15/bin"
    static let user = "claw"
    static let password = "claw-test-password"
    static let database = "claw_chain"

    let port: Int
    let directory: URL
    private var data: URL { directory.appendingPathComponent("data") }
    private var logFile: URL { directory.appendingPathComponent("postgres.log") }
    private var process: ChildProcess?
    /// The account the server runs as when the tests run as root.
    private let runAs: (uid: uid_t, gid: gid_t)?

    /// `postgres://claw:…@127.0.0.1:<port>/claw_chain`.
    var url: String { "postgres://\(Self.user):\(Self.password)@127.0.0.1:\(port)/\(Self.database)?sslmode=disable" }
    var pid: Int32? { process?.pid }
    var isRunning: Bool { process?.isRunning ?? false }

    /// Makes the cluster, starts the server and creates the database.
    static func start() throws -> PostgresServer {
        let server = try PostgresServer()
        try server.start()
        try server.createDatabase()
        return server
    }

    private init() throws {
        for tool in ["initdb", "postgres", "pg_isready"] where !FileManager.default.isExecutableFile(atPath: "\(Self.binaries)/\(tool)") {
            throw BrokerError(
                "PostgreSQL 15 is not installed (\(Self.binaries)/\(tool) is missing), and these tests need a real server. "
                    + "Run ./scripts/test (it installs it) or: sudo apt-get install -y postgresql-15")
        }
        port = try FreePort.next()
        directory = try TemporaryDirectory.make(prefix: "postgres")
        if getuid() == 0 {
            guard let account = getpwnam("postgres") else {
                throw BrokerError("running as root, and there is no postgres user to run PostgreSQL as (initdb refuses root); install postgresql-15")
            }
            runAs = (account.pointee.pw_uid, account.pointee.pw_gid)
            guard chown(directory.path, account.pointee.pw_uid, account.pointee.pw_gid) == 0 else {
                throw BrokerError("could not give \(directory.path) to the postgres user: \(String(cString: strerror(errno)))")
            }
        } else {
            runAs = nil
        }
        let passwordFile = directory.appendingPathComponent("password")
        try Self.password.write(to: passwordFile, atomically: true, encoding: .utf8)
        if let runAs { chown(passwordFile.path, runAs.uid, runAs.gid) }
        let result = try run(
            "\(Self.binaries)/initdb",
            [
                "-D", data.path, "-U", Self.user, "--pwfile=\(passwordFile.path)", "--auth-host=scram-sha-256", "--auth-local=trust",
                "-E", "UTF8", "--locale=C.UTF-8", "--no-sync",
            ])
        guard result.status == 0 else { throw BrokerError("initdb failed (\(result.status)):\n\(result.output)") }
    }

    /// Starts the server (again, after ``stop()``) and waits until it takes connections.
    func start() throws {
        precondition(process == nil, "PostgreSQL already running")
        let arguments = [
            "\(Self.binaries)/postgres", "-D", data.path, "-p", String(port), "-h", "127.0.0.1", "-k", directory.path,
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
        ]
        process = try spawn(arguments, output: logFile)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline {
            guard process?.isRunning == true else { break }
            let ready = try run("\(Self.binaries)/pg_isready", ["-h", "127.0.0.1", "-p", String(port), "-q"])
            if ready.status == 0 { return }
            usleep(50_000)
        }
        stop()
        throw BrokerError("PostgreSQL did not start on port \(port). Its log:\n\(log)")
    }

    /// Fast shutdown (SIGINT) by PID, waiting for the server to end: every
    /// client is cut off at once.
    func stop() {
        guard let process else { return }
        self.process = nil
        process.signal(SIGINT)
        process.wait()
    }

    /// Runs `sql` with psql and returns its rows, one per line, columns split by `|`.
    @discardableResult
    func psql(_ sql: String) throws -> [String] {
        let result = try run(
            "/usr/bin/psql",
            ["-X", "-h", "127.0.0.1", "-p", String(port), "-U", Self.user, "-d", Self.database, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
            environment: ["PGPASSWORD": Self.password])
        guard result.status == 0 else { throw BrokerError("psql failed (\(result.status)) on \(sql):\n\(result.output)") }
        return result.output.split(separator: "\n").map(String.init)
    }

    private func createDatabase() throws {
        let result = try run(
            "\(Self.binaries)/createdb", ["-h", "127.0.0.1", "-p", String(port), "-U", Self.user, Self.database],
            environment: ["PGPASSWORD": Self.password])
        guard result.status == 0 else { throw BrokerError("createdb failed (\(result.status)):\n\(result.output)") }
    }

    var log: String {
        (try? String(contentsOf: logFile, encoding: .utf8)) ?? ""
    }

    /// `arguments` as a child, as the server's account when running as root.
    private func spawn(_ arguments: [String], output: URL, environment: [String: String]? = nil) throws -> ChildProcess {
        if let runAs {
            if !FileManager.default.fileExists(atPath: output.path) {
                _ = FileManager.default.createFile(atPath: output.path, contents: nil)
                chown(output.path, runAs.uid, runAs.gid)
            }
            return try ChildProcess(
                "/usr/bin/setpriv", ["--reuid=\(runAs.uid)", "--regid=\(runAs.gid)", "--clear-groups", "--"] + arguments, output: output,
                environment: environment)
        }
        return try ChildProcess(arguments[0], Array(arguments.dropFirst()), output: output, environment: environment)
    }

    /// Runs a tool to its end; its output (stdout and stderr) comes back.
    private func run(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws -> (status: Int32, output: String) {
        let output = directory.appendingPathComponent("tool-\(UUID().uuidString.prefix(8)).log")
        defer { try? FileManager.default.removeItem(at: output) }
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment ?? [:] { env[key] = value }
        let process = try spawn([executable] + arguments, output: output, environment: env)
        let status = process.wait()
        return (status, (try? String(contentsOf: output, encoding: .utf8)) ?? "")
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }
}
