import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import Synchronization

// MARK: Records

/// `claw-bench records`: what shipping games to the chain (SPEC §10) costs.
/// The records a second one recorder writes into PostgreSQL, published by
/// the bench as one site at full speed; and how long a real site gateway
/// whose SQLite holds a day's backlog of ended games it never shipped takes
/// to get all of them acknowledged.
struct RecordsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "records",
        abstract: "Records a second one recorder writes, and a site's backlog catching up (PostgreSQL, a broker, a recorder and a site it starts).",
        discussion: """
            Starts on loopback, and stops by PID at the end: PostgreSQL 15 from Debian's packages in a temporary \
            directory (as the postgres user when run as root; its default durability, fsync and synchronous_commit \
            on, unless --unsafe-database), one mosquitto as the chain's bus, and `claw-gateway record`.

            Rate: --records valid records of one site (seq 1…N) go to the bus at QoS 1 as fast as mosquitto_pub \
            sends them; timed until the recorder's retained `records/ack` says N.

            Backlog: a site gateway (`claw-gateway run` with `chain:`) is started once to make its SQLite schema \
            and stopped; --backlog ended games are written into its file with sqlite3, numbered 1…N as the gateway \
            numbers games it could not ship; then the gateway is started again and timed from its spawn until the \
            acknowledgement says N, and PostgreSQL's rows of the site are counted. Given longer than --give, the \
            rate so far and the projected time are printed instead.
            """
    )

    @OptionGroup var options: GatewayOption
    @Option(help: "Records published for the rate.") var records = 20_000
    @Option(help: "Ended games in the site's backlog.") var backlog = 100_000
    @Option(help: "How long the backlog may take before it is projected instead, e.g. 10m.") var give = "10m"
    @Flag(help: "PostgreSQL with fsync and synchronous_commit off (what the tests run with).") var unsafeDatabase = false
    @Flag(help: "Leave out the rate.") var noRate = false
    @Flag(help: "Leave out the backlog.") var noBacklog = false

    func run() async throws {
        guard let limit = Soak.duration(give) else { throw ValidationError("--give takes a duration such as 10m.") }
        guard records > 0, backlog > 0 else { throw ValidationError("--records and --backlog take a positive count.") }
        let rig = try RecordsRig(gateway: options.binary)
        defer { rig.stop() }
        try await withClient(connections: 2) { http in
            try rig.startPostgres(unsafe: unsafeDatabase)
            try rig.startBroker()
            try rig.startRecorder()
            try await rig.waitReady(http, url: rig.recorderBase + "/readyz", what: "recorder", log: "recorder")
            say("records: PostgreSQL \(rig.postgresVersion) (\(unsafeDatabase ? "fsync off, synchronous_commit off" : "fsync on, synchronous_commit on")), "
                + "mosquitto as the bus, one `claw-gateway record`; \(ProcessInfo.processInfo.activeProcessorCount) cores")
            if !noRate { try await rate(rig, http) }
            if !noBacklog { try await catchUp(rig, http, limit: limit) }
        }
    }

    // MARK: Rate

    private func rate(_ rig: RecordsRig, _ http: HTTPClient) async throws {
        let site = "bench-rate"
        let file = rig.directory.appendingPathComponent("records.jsonl")
        var lines = ""
        lines.reserveCapacity(records * 300)
        for seq in 1...records { lines += RecordsRig.record(site: site, seq: seq) + "\n" }
        try lines.write(to: file, atomically: true, encoding: .utf8)
        let acks = try rig.watchAcks(site: site)
        let before = try await rig.metrics(http)
        let cpu = rig.cpu()
        let clock = ContinuousClock()
        let start = clock.now
        let publisher = try rig.spawn(
            "publish", "/usr/bin/mosquitto_pub",
            ["-h", "127.0.0.1", "-p", "\(rig.brokerPort)", "-i", "claw-bench-\(site)", "-q", "1", "-t", "claw/\(site)/records", "-l"],
            stdin: file.path)
        var published: Duration?
        var upto = 0
        while upto < records {
            if published == nil, rig.exited(publisher) { published = clock.now - start }
            guard clock.now - start < .seconds(600) else {
                throw BenchError("the recorder acknowledged \(upto) of \(records) within 600 s; its log:\n" + rig.logTail("recorder"))
            }
            try await Task.sleep(for: .milliseconds(5))
            upto = acks.upto
        }
        let elapsed = clock.now - start
        let used = cpu.cores()
        let after = try await rig.metrics(http)
        let written = after.value("claw_recorder_records_total{result=\"written\"}") - before.value("claw_recorder_records_total{result=\"written\"}")
        let duplicates = after.value("claw_recorder_records_total{result=\"duplicate\"}") - before.value("claw_recorder_records_total{result=\"duplicate\"}")
        let rows = try rig.psql("SELECT count(*) FROM games WHERE site = '\(site)'")
        say("\nrate: \(records) records of one site (seq 1…\(records)) published back to back at QoS 1 (mosquitto_pub -l), "
            + "timed until the retained ack said \(records)")
        say("records   seconds   records/s   published in   written   duplicates   rows in PostgreSQL")
        say(
            String(
                format: "%7d   %7.2f   %9.0f   %10@   %7.0f   %10.0f   %@", records, elapsed.seconds, Double(records) / elapsed.seconds,
                published.map { String(format: "%.2f s", $0.seconds) } ?? "-", written, duplicates, rows.first ?? "?"))
        say("one record's transaction (claw_recorder_write_latency_seconds, COMMIT included): "
            + after.latency(since: before, family: "claw_recorder_write_latency_seconds"))
        say("CPU (cores) over the run: " + used.map { String(format: "%@ %.2f", $0.name, $0.cores) }.joined(separator: ", "))
    }

    // MARK: Backlog

    private func catchUp(_ rig: RecordsRig, _ http: HTTPClient, limit: Duration) async throws {
        let site = "bench-backlog"
        try rig.writeSiteConfig(site: site)
        // Once with the chain, to make the schema (and prove it starts), then stopped.
        try rig.startSite()
        try await rig.waitReady(http, url: rig.siteBase + "/readyz", what: "site gateway", log: "gateway")
        rig.stopSite()
        let fill = ContinuousClock.now
        try rig.fillBacklog(count: backlog)
        say("\nbacklog: \(backlog) ended games written into the stopped site's SQLite, numbered 1…\(backlog), never shipped "
            + String(format: "(sqlite3, %.1f s)", (ContinuousClock.now - fill).seconds))
        let acks = try rig.watchAcks(site: site)
        let before = try await rig.metrics(http)
        let clock = ContinuousClock()
        let start = clock.now
        try rig.startSite()
        let cpu = rig.cpu()
        say("elapsed    acked   records/s (last 10 s)")
        var next = start + .seconds(10)
        var last = (at: start, upto: 0)
        var upto = 0
        while upto < backlog, clock.now - start < limit {
            try await Task.sleep(for: .milliseconds(20))
            upto = acks.upto
            if clock.now >= next {
                say(String(format: "%5.0f s  %7d   %6.0f", (clock.now - start).seconds, upto, Double(upto - last.upto) / (clock.now - last.at).seconds))
                last = (clock.now, upto)
                next += .seconds(10)
            }
        }
        let elapsed = clock.now - start
        let used = cpu.cores()
        let after = try await rig.metrics(http)
        let rows = try rig.psql("SELECT count(*), count(DISTINCT seq), min(seq), max(seq) FROM games WHERE site = '\(site)'").first ?? "?"
        let shipper = try await rig.siteMetrics(http)
        if upto >= backlog {
            say(String(format: "caught up: the ack said %d %.1f s after the gateway was spawned: %.0f records/s end to end", backlog, elapsed.seconds,
                Double(backlog) / elapsed.seconds))
        } else {
            let perSecond = Double(upto) / elapsed.seconds
            say(String(format: "NOT caught up within %.0f s: the ack said %d; %.0f records/s so far, %.0f s projected for all %d", elapsed.seconds,
                upto, perSecond, Double(backlog) / max(perSecond, 0.001), backlog))
        }
        say("rows in PostgreSQL for \(site) (count, distinct seq, min, max): \(rows.replacingOccurrences(of: "|", with: ", "))")
        say("recorder: " + after.delta(since: before, "claw_recorder_records_total{result=\"written\"}", as: "written")
            + ", " + after.delta(since: before, "claw_recorder_records_total{result=\"duplicate\"}", as: "duplicates")
            + "; one record's transaction: " + after.latency(since: before, family: "claw_recorder_write_latency_seconds"))
        if !shipper.isEmpty { say("site gateway's shipping metrics: " + shipper) }
        say("the site's highest shipping number (GameStore.lastRecordNumber, and the same subquery numbers each game that ends), "
            + "read with sqlite3 on its \(backlog)-game file: " + (try rig.timeHighestNumber()))
        say("CPU (cores) over the catch-up: " + used.map { String(format: "%@ %.2f", $0.name, $0.cores) }.joined(separator: ", "))
    }
}

/// A line of the bench's output, flushed: progress shows as it comes, also into a file.
func say(_ line: String) {
    print(line)
    fflush(nil)
}

/// What the records bench runs: PostgreSQL, a broker, a recorder and a site
/// gateway, each a child of ours in one work folder, stopped by PID.
final class RecordsRig: Sendable {
    static let postgresBinaries = "/usr/lib/postgresql/15/bin"
    static let databaseUser = "claw"
    static let databasePassword = "claw-bench-password"
    static let database = "claw_chain"
    /// The recorder's read token: with the chain's wallets it needs one, and `/metrics` asks for it.
    static let readToken = "claw-bench-read-token-0123"

    let gateway: String
    let bench: Workbench
    let brokerPort: Int
    let postgresPort: Int
    let recorderPort: Int
    let sitePort: Int
    /// The packaged postgres account, when we run as root (initdb refuses root).
    private let runAs: (uid: uid_t, gid: gid_t)?

    var directory: URL { bench.directory }

    init(gateway: String) throws {
        self.gateway = gateway
        bench = try Workbench(prefix: "claw-bench-records")
        brokerPort = try Loopback.freePort()
        postgresPort = try Loopback.freePort()
        recorderPort = try Loopback.freePort()
        sitePort = try Loopback.freePort()
        if getuid() == 0 {
            guard let account = getpwnam("postgres") else {
                throw BenchError("running as root, and there is no postgres user to run PostgreSQL as (initdb refuses root): apt-get install -y postgresql-15")
            }
            runAs = (account.pointee.pw_uid, account.pointee.pw_gid)
        } else {
            runAs = nil
        }
    }

    var recorderBase: String { "http://127.0.0.1:\(recorderPort)" }
    var siteBase: String { "http://127.0.0.1:\(sitePort)" }
    private var postgresFolder: URL { directory.appendingPathComponent("postgres") }
    private var sitePath: String { directory.appendingPathComponent("site.sqlite").path }
    private var siteConfig: String { directory.appendingPathComponent("gateway.yaml").path }
    var databaseURL: String {
        "postgres://\(Self.databaseUser):\(Self.databasePassword)@127.0.0.1:\(postgresPort)/\(Self.database)?sslmode=disable"
    }

    // MARK: PostgreSQL

    var postgresVersion: String {
        (try? psql("SHOW server_version").first) ?? "?"
    }

    func startPostgres(unsafe: Bool) throws {
        for tool in ["initdb", "postgres", "pg_isready", "createdb"] where !FileManager.default.isExecutableFile(atPath: "\(Self.postgresBinaries)/\(tool)") {
            throw BenchError("PostgreSQL 15 is not installed (\(Self.postgresBinaries)/\(tool)): apt-get install -y postgresql-15")
        }
        try FileManager.default.createDirectory(at: postgresFolder, withIntermediateDirectories: true)
        let passwordFile = postgresFolder.appendingPathComponent("password")
        try Self.databasePassword.write(to: passwordFile, atomically: true, encoding: .utf8)
        if let runAs {
            chown(postgresFolder.path, runAs.uid, runAs.gid)
            chown(passwordFile.path, runAs.uid, runAs.gid)
        }
        let data = postgresFolder.appendingPathComponent("data").path
        let initdb = try tool(
            "initdb",
            "\(Self.postgresBinaries)/initdb",
            [
                "-D", data, "-U", Self.databaseUser, "--pwfile=\(passwordFile.path)", "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8",
                "--locale=C.UTF-8",
            ])
        guard initdb == 0 else { throw BenchError("initdb failed (\(initdb)):\n" + logTail("initdb")) }
        var arguments = ["-D", data, "-p", "\(postgresPort)", "-h", "127.0.0.1", "-k", postgresFolder.path]
        if unsafe { arguments += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"] }
        let server = try spawn("postgres", "\(Self.postgresBinaries)/postgres", arguments, asPostgres: true)
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline, !exited(server) {
            if try tool("pg_isready", "\(Self.postgresBinaries)/pg_isready", ["-h", "127.0.0.1", "-p", "\(postgresPort)", "-q"]) == 0 {
                let created = try tool(
                    "createdb", "\(Self.postgresBinaries)/createdb", ["-h", "127.0.0.1", "-p", "\(postgresPort)", "-U", Self.databaseUser, Self.database],
                    environment: ["PGPASSWORD": Self.databasePassword])
                guard created == 0 else { throw BenchError("createdb failed (\(created)):\n" + logTail("createdb")) }
                return
            }
            usleep(50_000)
        }
        throw BenchError("PostgreSQL did not start on port \(postgresPort); its log:\n" + logTail("postgres"))
    }

    /// `sql`'s rows, one a line, columns split by `|`.
    func psql(_ sql: String) throws -> [String] {
        let output = directory.appendingPathComponent("psql.out")
        let status = try tool(
            "psql", "/usr/bin/psql",
            ["-X", "-h", "127.0.0.1", "-p", "\(postgresPort)", "-U", Self.databaseUser, "-d", Self.database, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql],
            environment: ["PGPASSWORD": Self.databasePassword], asPostgres: false, output: output.path)
        let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        guard status == 0 else { throw BenchError("psql failed (\(status)) on \(sql):\n\(text)") }
        return text.split(separator: "\n").map(String.init)
    }

    // MARK: Broker, recorder, site

    func startBroker() throws {
        for tool in ["/usr/bin/mosquitto_pub", "/usr/bin/mosquitto_sub", "/usr/bin/sqlite3"] where !FileManager.default.isExecutableFile(atPath: tool) {
            throw BenchError("\(tool) is missing: apt-get install -y mosquitto-clients sqlite3")
        }
        try bench.startBroker(port: brokerPort, extra: "max_queued_messages 0")
    }

    /// `claw-gateway record`; with `ledgerKey`, keeping the chain's wallets
    /// (`credits:`) and taking debits with that key's vouchers.
    func startRecorder(ledgerKey: String? = nil) throws {
        let config = directory.appendingPathComponent("recorder.yaml")
        let wallets = ledgerKey.map {
            """
              ledger_key: \($0)
              voucher_max_age: 10m
            credits:
              topup_secret: claw-bench-topup-secret
            """
        } ?? ""
        try """
            recorder:
              listen: 127.0.0.1:\(recorderPort)
              database: \(databaseURL)
              read_token: \(Self.readToken)
              log_level: warning
            \(wallets)
            bus:
              urls: [mqtt://127.0.0.1:\(brokerPort)]
              client_id: claw-recorder-bench
              topic_prefix: claw

            """.write(to: config, atomically: true, encoding: .utf8)
        try spawn("recorder", gateway, ["record", "--config", config.path])
    }

    func writeSiteConfig(site: String) throws {
        let chain = """
            chain:
              site: \(site)
              bus: [mqtt://127.0.0.1:\(brokerPort)]
            """
        let yaml = BenchSite.siteYAML(
            id: site, brokerPort: brokerPort, httpPort: sitePort, storage: sitePath, extra: chain, machines: 4)
        try yaml.write(toFile: siteConfig, atomically: true, encoding: .utf8)
    }

    func startSite() throws {
        try spawn("gateway", gateway, ["run", "--config", siteConfig])
    }

    /// SIGTERM to the site gateway, and its end awaited: its file is closed.
    func stopSite() {
        bench.stop("gateway")
    }

    /// `count` ended games, numbered 1…count for shipping and never shipped,
    /// over the site's four machines, a game every 0.8 s of a day.
    func fillBacklog(count: Int) throws {
        let sql = """
            PRAGMA journal_mode = WAL;
            BEGIN;
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < \(count))
            INSERT INTO games (id, machine, player, nick, provider, offered_at, started_at, ended_at, outcome, commands, ship_seq)
            SELECT printf('backlog-%07d', i), 'm000' || (1 + i % 4), 'player-' || (i % 500), 'Player ' || (i % 500), 'generic',
                strftime('%Y-%m-%dT%H:%M:%fZ', '2026-11-24 00:00:00', '+' || (i * 0.8) || ' seconds'),
                strftime('%Y-%m-%dT%H:%M:%fZ', '2026-11-24 00:00:02', '+' || (i * 0.8) || ' seconds'),
                strftime('%Y-%m-%dT%H:%M:%fZ', '2026-11-24 00:00:30', '+' || (i * 0.8) || ' seconds'),
                CASE WHEN i % 5 = 0 THEN 'won' ELSE 'lost' END, 9 + i % 20, i
            FROM n;
            COMMIT;
            SELECT count(*) FROM games WHERE ship_seq IS NOT NULL;

            """
        let script = directory.appendingPathComponent("backlog.sql")
        try sql.write(to: script, atomically: true, encoding: .utf8)
        let output = directory.appendingPathComponent("sqlite3.out")
        let status = try tool("sqlite3", "/usr/bin/sqlite3", [sitePath, ".read \(script.path)"], asPostgres: false, output: output.path)
        let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        guard status == 0, text.split(separator: "\n").last.map(String.init) == "\(count)" else {
            throw BenchError("sqlite3 could not write the backlog (\(status)):\n\(text)")
        }
    }

    /// How long the site's `MAX(ship_seq)` takes as the gateway asks it, and with `WHERE ship_seq IS NOT NULL`
    /// (which its partial index `games_by_ship_seq` can answer).
    func timeHighestNumber() throws -> String {
        let queries = [
            "SELECT COALESCE(MAX(ship_seq), 0) FROM games;", "SELECT COALESCE(MAX(ship_seq), 0) FROM games WHERE ship_seq IS NOT NULL;",
        ]
        let script = directory.appendingPathComponent("timer.sql")
        try ([".timer on"] + queries.flatMap { Array(repeating: $0, count: 11) }).joined(separator: "\n").write(to: script, atomically: true, encoding: .utf8)
        let output = directory.appendingPathComponent("sqlite3-timer.out")
        let status = try tool("sqlite3", "/usr/bin/sqlite3", ["-readonly", sitePath, ".read \(script.path)"], asPostgres: false, output: output.path)
        let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
        let times = text.split(separator: "\n").compactMap { line -> Double? in
            guard line.hasPrefix("Run Time: real ") else { return nil }
            return Double(line.dropFirst(15).prefix { $0 != " " })
        }
        guard status == 0, times.count == 22 else { return "not measured (\(status)): \(text)" }
        // sqlite3 shows whole milliseconds of wall time.
        func median(_ part: ArraySlice<Double>) -> String {
            let seconds = part.sorted()[part.count / 2]
            return seconds < 0.001 ? "under 1 ms" : String(format: "%.0f ms", seconds * 1000)
        }
        return "median of 11: \(median(times[0..<11])) as asked (every row read: the partial index games_by_ship_seq cannot answer it), "
            + "\(median(times[11..<22])) with WHERE ship_seq IS NOT NULL"
    }

    // MARK: Watching

    /// A mosquitto_sub on the site's retained acknowledgement, into a file
    /// the returned watcher reads the last `upto` from.
    func watchAcks(site: String) throws -> AckWatcher {
        let file = directory.appendingPathComponent("acks-\(site).log")
        try spawn(
            "acks-\(site)", "/usr/bin/mosquitto_sub",
            ["-h", "127.0.0.1", "-p", "\(brokerPort)", "-i", "claw-bench-acks-\(site)", "-q", "1", "-t", "claw/\(site)/records/ack"],
            output: file.path)
        return AckWatcher(path: file.path)
    }

    func metrics(_ http: HTTPClient) async throws -> PrometheusText {
        var request = HTTPClientRequest(url: recorderBase + "/metrics")
        request.headers.add(name: "Authorization", value: "Bearer \(Self.readToken)")
        let response = try await http.execute(request, timeout: .seconds(10))
        guard response.status == .ok else { throw BenchError("the recorder's /metrics answered \(response.status.code)") }
        return PrometheusText(String(buffer: try await response.body.collect(upTo: 1 << 24)))
    }

    /// The site gateway's chain families, as one line.
    func siteMetrics(_ http: HTTPClient) async throws -> String {
        guard let response = try? await http.execute(HTTPClientRequest(url: siteBase + "/metrics"), timeout: .seconds(10)), response.status == .ok
        else { return "" }
        let text = String(buffer: try await response.body.collect(upTo: 1 << 24))
        return text.split(separator: "\n").filter { !$0.hasPrefix("#") && $0.contains("record") }.joined(separator: "; ")
    }

    /// The CPU the recorder, PostgreSQL (the server and its backends), mosquitto and the site use from now.
    func cpu() -> CPUSample {
        let pids = bench.pids
        let postgres = pids("postgres")
        return CPUSample([
            ("recorder", pids("recorder")), ("PostgreSQL", postgres + postgres.flatMap { Self.children(of: $0) }), ("mosquitto", pids("mosquitto")),
            ("site gateway", pids("gateway")), ("mosquitto_pub", pids("publish")),
        ])
    }

    // MARK: Processes

    /// A record as a site ships it (docs/TOPICS.md), the game ended a second after the previous one.
    static func record(site: String, seq: Int) -> String {
        let offered = 1_764_000_000 + seq
        func time(_ seconds: Int) -> String {
            var clock = time_t(seconds)
            var parts = tm()
            gmtime_r(&clock, &parts)
            return String(
                format: "%04d-%02d-%02dT%02d:%02d:%02d.000Z", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1, Int(parts.tm_mday), Int(parts.tm_hour),
                Int(parts.tm_min), Int(parts.tm_sec))
        }
        return #"{"site":"\#(site)","seq":\#(seq),"id":"\#(site)-g\#(seq)","machine":"m\#(1 + seq % 4)","player":"player-\#(seq % 500)","#
            + #""provider":"generic","nick":"Player","outcome":"\#(seq % 5 == 0 ? "won" : "lost")","offered_at":"\#(time(offered))","#
            + #""started_at":"\#(time(offered + 2))","ended_at":"\#(time(offered + 30))","commands":9}"#
    }

    @discardableResult
    func spawn(
        _ name: String, _ path: String, _ arguments: [String], asPostgres: Bool = false, stdin: String? = nil, output: String? = nil,
        environment: [String: String] = [:]
    ) throws -> pid_t {
        let log = output ?? directory.appendingPathComponent("\(name).log").path
        if let runAs, asPostgres, !FileManager.default.fileExists(atPath: log) {
            _ = FileManager.default.createFile(atPath: log, contents: nil)
            chown(log, runAs.uid, runAs.gid)
        }
        var command = [path] + arguments
        if let runAs, asPostgres {
            command = ["/usr/bin/setpriv", "--reuid=\(runAs.uid)", "--regid=\(runAs.gid)", "--clear-groups", "--"] + command
        }
        let errors = output == nil ? nil : directory.appendingPathComponent("\(name).err").path
        return try bench.spawn(name, command, files: Spawn.Files(output: log, errors: errors, input: stdin ?? "/dev/null"), environment: environment)
    }

    /// Runs a tool to its end and returns its exit status.
    private func tool(
        _ name: String, _ path: String, _ arguments: [String], environment: [String: String] = [:], asPostgres: Bool = true, output: String? = nil
    ) throws -> Int32 {
        if let output { unlink(output) }
        let pid = try spawn(name, path, arguments, asPostgres: asPostgres, output: output, environment: environment)
        bench.forget(pid)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1, errno == EINTR {}
        return status
    }

    /// Whether a child of ours has ended (it is reaped here).
    func exited(_ pid: pid_t) -> Bool {
        var status: Int32 = 0
        guard waitpid(pid, &status, WNOHANG) == pid else { return false }
        bench.forget(pid)
        return true
    }

    func logTail(_ name: String, lines: Int = 20) -> String { bench.logTail(name, lines: lines) }

    func waitReady(_ http: HTTPClient, url: String, what: String, log: String) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if let response = try? await http.execute(HTTPClientRequest(url: url), timeout: .seconds(2)), response.status == .ok { return }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw BenchError("the \(what) did not become ready within 60 s; its log:\n" + logTail(log))
    }

    /// Every child, newest first: SIGTERM (SIGINT to PostgreSQL: a fast
    /// shutdown), SIGKILL after 10 s; then the work folder is removed.
    func stop() {
        bench.stop { $0 == "postgres" ? SIGINT : SIGTERM }
    }

    /// The processes whose parent is `pid` (PostgreSQL's backends).
    private static func children(of pid: pid_t) -> [pid_t] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { entry in
            guard let child = pid_t(entry), let stat = try? String(contentsOfFile: "/proc/\(child)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > 1 && pid_t(fields[1]) == pid ? child : nil
        }
    }
}

/// The highest `upto` a mosquitto_sub of `records/ack` has written so far.
final class AckWatcher: Sendable {
    let path: String
    private let seen = Mutex((offset: 0, upto: 0))

    init(path: String) {
        self.path = path
    }

    var upto: Int {
        seen.withLock { seen in
            guard let handle = FileHandle(forReadingAtPath: path) else { return seen.upto }
            defer { try? handle.close() }
            try? handle.seek(toOffset: UInt64(seen.offset))
            let data = (try? handle.readToEnd()) ?? Data()
            // Only whole lines: mosquitto_sub may be half-way through one.
            guard let end = data.lastIndex(of: UInt8(ascii: "\n")) else { return seen.upto }
            seen.offset += end - data.startIndex + 1
            for line in String(decoding: data[data.startIndex...end], as: UTF8.self).split(separator: "\n") {
                guard let range = line.range(of: #""upto":"#) else { continue }
                if let value = Int(line[range.upperBound...].prefix { $0.isNumber }) { seen.upto = max(seen.upto, value) }
            }
            return seen.upto
        }
    }
}

/// A Prometheus text page, by series.
struct PrometheusText {
    var series: [String: Double] = [:]

    init(_ text: String) {
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            series[String(line[..<space])] = value
        }
    }

    func value(_ name: String) -> Double { series[name] ?? 0 }

    func delta(since before: PrometheusText, _ name: String, as label: String) -> String {
        String(format: "%.0f %@", value(name) - before.value(name), label)
    }

    /// Mean, and p50 and p99 as the upper bounds of their buckets, of a histogram's observations since `before`.
    func latency(since before: PrometheusText, family: String) -> String {
        let count = value(family + "_count") - before.value(family + "_count")
        guard count > 0 else { return "no observations" }
        let mean = (value(family + "_sum") - before.value(family + "_sum")) / count
        let buckets = series.keys.filter { $0.hasPrefix(family + "_bucket{") }.compactMap { key -> (bound: Double, count: Double)? in
            guard let range = key.range(of: #"le=""#) else { return nil }
            let text = key[range.upperBound...].prefix { $0 != "\"" }
            let bound = text == "+Inf" ? Double.infinity : Double(text)
            return bound.map { ($0, value(key) - before.value(key)) }
        }.sorted { $0.bound < $1.bound }
        func quantile(_ q: Double) -> String {
            guard let bucket = buckets.first(where: { $0.count >= q * count }) else { return "?" }
            return bucket.bound.isInfinite ? "above the last bucket" : String(format: "≤ %.1f ms", bucket.bound * 1000)
        }
        return String(format: "%.0f observed, mean %.2f ms, p50 %@, p99 %@", count, mean * 1000, quantile(0.5), quantile(0.99))
    }
}
