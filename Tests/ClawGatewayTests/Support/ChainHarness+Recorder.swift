import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// What a chain test of the game records (SPEC §10) needs on top of
/// ``ChainHarness``: `claw-gateway record` against the chain's cluster, a
/// site's shipping settings, and the games a site's SQLite file holds.
extension ChainHarness {
    /// The key the routers make the vouchers of accepts with and the recorder checks them with (SPEC §9).
    static let ledgerKey = "chain-test-ledger-key-0123456789"

    /// One `claw-gateway record`, logged in as `recorder`, its recorder.yaml
    /// and log in its own folder; started, killed and started again by PID.
    final class RecorderNode {
        static let readToken = "chain-recorder-read-token"

        let port: Int
        let directory: URL
        let clientID: String
        private(set) var process: ChildProcess?

        var base: String { "http://127.0.0.1:\(port)" }
        var config: URL { directory.appendingPathComponent("recorder.yaml") }
        var log: URL { directory.appendingPathComponent("recorder.log") }
        var logText: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

        /// `urls` as the recorder dials them, first to last.
        /// `extra`: more of recorder.yaml (its `credits:`).
        init(urls: [String], database: PostgresServer, clientID: String = "claw-recorder-chain-test", extra: String = "") throws {
            port = try FreePort.next()
            directory = try TemporaryDirectory.make(prefix: "recorder")
            self.clientID = clientID
            try """
                recorder:
                  listen: 127.0.0.1:\(port)
                  database: \(database.url)
                  read_token: \(Self.readToken)
                  ledger_key: \(ChainHarness.ledgerKey)
                  log_level: info
                bus:
                  urls: [\(urls.joined(separator: ", "))]
                  username: recorder
                  password: \(NATSCluster.passwords["recorder"] ?? "")
                  client_id: \(clientID)
                  topic_prefix: claw
                \(extra)
                """.write(to: config, atomically: true, encoding: .utf8)
        }

        func start() throws {
            precondition(process == nil, "recorder already running")
            process = try GatewayBinary.start(["record", "--config", config.path], log: log)
        }

        /// `/readyz` 200: connected to the cluster with its subscription granted, and the database up.
        func waitReady(timeout: Duration = .seconds(30)) async throws {
            let base = base
            try await eventually("the recorder to be ready", timeout: timeout) {
                guard let process, process.isRunning else {
                    throw BrokerError("the recorder exited (\(process?.exitStatus ?? -1)). Its log:\n\(logText)")
                }
                return (try? await HTTP.get("\(base)/readyz"))?.status == 200
            }
        }

        /// One series of the recorder's `/metrics`; nil when it does not answer.
        func metric(_ series: String) async -> Double? {
            guard
                let answer = try? await HTTP.request(
                    .GET, "\(base)/metrics", headers: [("Authorization", "Bearer \(Self.readToken)")], timeout: .seconds(5)),
                answer.status == 200
            else { return nil }
            return (try? PrometheusText(answer.body))?.samples[series]
        }

        /// `claw_recorder_records_total{result=…}`.
        func records(_ result: String) async -> Double? {
            await metric(#"claw_recorder_records_total{result="\#(result)"}"#)
        }

        /// SIGKILL: no goodbye to the cluster or the database.
        func kill() {
            process?.signal(SIGKILL)
            process?.wait()
            process = nil
        }

        func stop() async {
            await Site.stop(process)
            process = nil
        }

        deinit {
            process?.signal(SIGKILL)
            try? FileManager.default.removeItem(at: directory)
        }
    }
}

extension ChainHarness.Site {
    /// Sets `chain.resend_interval` in the site's gateway.yaml; the gateway
    /// reads it when it is restarted.
    func setResendInterval(_ value: String) throws {
        var yaml = try String(contentsOf: site.config, encoding: .utf8)
        let marker = "  username: \(user)\n"
        guard let range = yaml.range(of: marker) else {
            throw BrokerError("no chain.username line in \(site.config.path)")
        }
        yaml.replaceSubrange(range, with: marker + "  resend_interval: \(value)\n")
        try yaml.write(to: site.config, atomically: true, encoding: .utf8)
    }

    /// Adds `credits:` to the site's gateway.yaml (games cost `price`, paid
    /// from the chain's wallets), with the read token it needs; the gateway
    /// reads it when it is restarted.
    func setCredits(price: Int) throws {
        var yaml = try String(contentsOf: site.config, encoding: .utf8)
        let listen = "  listen: 127.0.0.1:\(site.httpPort)\n"
        guard let range = yaml.range(of: listen) else { throw BrokerError("no http.listen line in \(site.config.path)") }
        let token = "chain-site-read-token-\(name)"
        yaml.replaceSubrange(range, with: listen + "  read_token: \(token)\n")
        yaml += "\ncredits:\n  price: \(price)\n"
        try yaml.write(to: site.config, atomically: true, encoding: .utf8)
        readToken = token
    }

    /// One ended game as the site's SQLite file holds it, with the number it was shipped under.
    struct StoredGame: Sendable, Equatable, CustomStringConvertible {
        var id: String
        var seq: Int64?
        var machine: String
        var player: String
        var outcome: String
        /// Milliseconds since 1970; nil when the game never started.
        var offeredAt: Int64
        var startedAt: Int64?
        var endedAt: Int64
        var commands: Int

        var description: String {
            "\(id) seq \(seq.map(String.init) ?? "none") \(machine) \(player) \(outcome) offered \(offeredAt) started \(startedAt.map(String.init) ?? "never") ended \(endedAt) commands \(commands)"
        }

        /// The millisecond `text` names (``Timestamp/date(_:)`` reads it
        /// back into the middle of it: rounding could land on the next one).
        static func milliseconds(_ text: String) -> Int64? {
            Timestamp.date(text).map { Int64(($0.timeIntervalSince1970 * 1000).rounded(.down)) }
        }
    }

    /// Every ended game in the site's SQLite file (read with the sqlite3
    /// tool, as an operator would, while the gateway runs).
    func endedGames() throws -> [StoredGame] {
        let sql = """
            SELECT id, ifnull(ship_seq, ''), machine, player, outcome, offered_at, ifnull(started_at, ''), ended_at, commands
            FROM games WHERE ended_at IS NOT NULL ORDER BY id
            """
        let output = try Self.sqlite(site.database.path, sql)
        return try output.split(separator: "\n").map { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 9, let offered = StoredGame.milliseconds(fields[5]), let ended = StoredGame.milliseconds(fields[7]),
                let commands = Int(fields[8])
            else { throw BrokerError("an ended game the test cannot read from \(site.database.path): \(line)") }
            return StoredGame(
                id: fields[0], seq: Int64(fields[1]), machine: fields[2], player: fields[3], outcome: fields[4], offeredAt: offered,
                startedAt: fields[6].isEmpty ? nil : StoredGame.milliseconds(fields[6]), endedAt: ended, commands: commands)
        }
    }

    private static func sqlite(_ path: String, _ sql: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/sqlite3")
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/sqlite3") else {
            throw BrokerError("the sqlite3 tool is not installed (/usr/bin/sqlite3): sudo apt-get install -y sqlite3")
        }
        process.arguments = ["-batch", "-noheader", "-separator", "\t", "-cmd", ".timeout 5000", path, sql]
        let output = Pipe(), errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        let problem = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw BrokerError("sqlite3 \(path) failed (\(process.terminationStatus)): \(String(decoding: problem, as: UTF8.self))")
        }
        return String(decoding: data, as: UTF8.self)
    }
}

extension PostgresServer {
    /// Every row of the recorder's `games` table, in the shape of ``ChainHarness/Site/StoredGame``, with its site.
    func recordedGames() throws -> [(site: String, game: ChainHarness.Site.StoredGame)] {
        // The millisecond of each time, as the recorder's own API writes it (truncated).
        func ms(_ column: String) -> String { "coalesce(floor(extract(epoch FROM \(column)) * 1000)::bigint, -1)" }
        let rows = try psql(
            """
            SELECT site, id, seq, machine, player, coalesce(outcome, ''), \(ms("offered_at")), \(ms("started_at")), \(ms("ended_at")), commands
            FROM games ORDER BY site, id
            """)
        return try rows.map { row in
            let fields = row.split(separator: "|", omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 10, let offered = Int64(fields[6]), let started = Int64(fields[7]), let ended = Int64(fields[8]),
                let commands = Int(fields[9])
            else { throw BrokerError("a row the test cannot read: \(row)") }
            return (
                fields[0],
                ChainHarness.Site.StoredGame(
                    id: fields[1], seq: Int64(fields[2]), machine: fields[3], player: fields[4], outcome: fields[5], offeredAt: offered,
                    startedAt: started < 0 ? nil : started, endedAt: ended, commands: commands)
            )
        }
    }
}
