import ArgumentParser
import AsyncHTTPClient
import Foundation
import Protocol
import Synchronization

/// `claw-bench wallet`: the chain's ledger under load (SPEC §9, §11). The
/// debits a second one recorder settles into PostgreSQL with durable
/// commits, asked by many sites at once; and one site's debit latency
/// while another site floods its wallet topic.
struct WalletBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "wallet",
        abstract: "Debits a second the chain's recorder settles, and one site's debit latency under another's flood (PostgreSQL, a broker and a recorder it starts).",
        discussion: """
            Starts on loopback, and stops by PID at the end: PostgreSQL 15 in a temporary directory (its default durability: \
            fsync and synchronous_commit on), one mosquitto as the chain's bus, and `claw-gateway record` keeping the chain's \
            wallets. Players' wallets are topped up in PostgreSQL first.

            Rate: --sites sites each publish their share of --debits debit asks, every one with a valid voucher of the \
            routers' ledger_key for a new session, back to back at QoS 1 (one mosquitto_pub -l a site, all at once); timed \
            until every answer is on the sites' wallet/ack.

            Flood: one site publishes --flood valid debits back to back while another asks one debit every --every \
            (--honest of them, each its own mosquitto_pub); each honest debit's latency is from just before its publisher \
            starts to its answer's arrival at a mosquitto_sub (its receive time, -F %U). The same honest debits are timed \
            first with no flood, for the baseline (the process start is in both).
            """
    )

    @OptionGroup var options: GatewayOption
    @Option(help: "Sites asking at once for the rate.") var sites = 50
    @Option(help: "Debits asked in all for the rate.") var debits = 20_000
    @Option(help: "Debits the flooding site publishes.") var flood = 20_000
    @Option(help: "Debits the honest site asks during the flood.") var honest = 50
    @Option(help: "Between two honest debits, in milliseconds.") var every = 100

    static let ledgerKey = "claw-bench-ledger-key-0123456789"
    static let players = 1000

    func run() async throws {
        guard sites > 0, debits >= sites, flood > 0, honest > 0, every > 0 else {
            throw ValidationError("--sites, --debits (at least one a site), --flood, --honest and --every take positive counts.")
        }
        let rig = try RecordsRig(gateway: options.binary)
        defer { rig.stop() }
        try await withClient(connections: 2) { http in
            try rig.startPostgres(unsafe: false)
            try rig.startBroker()
            try rig.startRecorder(ledgerKey: Self.ledgerKey)
            try await rig.waitReady(http, url: rig.recorderBase + "/readyz", what: "recorder", log: "recorder")
            _ = try rig.psql(
                """
                INSERT INTO ledger (provider, account, kind, credits, key, digest)
                SELECT 'generic', 'player-' || i, 'topup', 100000000, 'bench-seed-' || i, 'seed' FROM generate_series(1, \(Self.players)) i;
                INSERT INTO wallets (provider, account, balance)
                SELECT 'generic', 'player-' || i, 100000000 FROM generate_series(1, \(Self.players)) i;
                """)
            say("wallet: PostgreSQL \(rig.postgresVersion) (fsync on, synchronous_commit on), mosquitto as the bus, one `claw-gateway record`; "
                + "\(ProcessInfo.processInfo.activeProcessorCount) cores")
            try await rate(rig, http)
            try await underFlood(rig, http)
        }
    }

    /// A debit ask of `site` for a new session, with the routers' voucher, as one line of JSON.
    static func debit(site: String, session: String, player: Int) -> String {
        let account = "player-\(1 + player % players)"
        let voucher = ChainVoucher(
            key: ledgerKey, site: site, provider: "generic", account: account, session: session, copy: "bench-\(session)",
            receivedMS: ChainCopy.milliseconds(Date()), price: 1)
        let ask = ChainWalletAsk(kind: .debit, session: session, provider: "generic", account: account, credits: 1, machine: "m1", voucher: voucher)
        return String(decoding: ask.payload, as: UTF8.self)
    }

    // MARK: Rate

    private func rate(_ rig: RecordsRig, _ http: HTTPClient) async throws {
        let answers = try rig.watchLines("answers", topic: "claw/+/wallet/ack")
        var files: [(site: String, path: String)] = []
        for index in 0..<sites {
            let site = "bench-site-\(index)"
            let share = debits / sites + (index < debits % sites ? 1 : 0)
            let lines = (0..<share).map { Self.debit(site: site, session: "\(site)-g\($0)", player: index * 7919 + $0) }
            let path = rig.directory.appendingPathComponent("\(site).jsonl").path
            try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            files.append((site, path))
        }
        let before = try await rig.metrics(http)
        let cpu = rig.cpu()
        let clock = ContinuousClock()
        let start = clock.now
        for (site, path) in files {
            try rig.spawn(
                "publish", "/usr/bin/mosquitto_pub",
                ["-h", "127.0.0.1", "-p", "\(rig.brokerPort)", "-i", "claw-bench-\(site)", "-q", "1", "-t", "claw/\(site)/wallet", "-l"],
                stdin: path)
        }
        var answered = 0
        while answered < debits {
            guard clock.now - start < .seconds(600) else {
                throw BenchError("\(answered) of \(debits) debits answered within 600 s; the recorder's log:\n" + rig.logTail("recorder"))
            }
            try await Task.sleep(for: .milliseconds(5))
            answered = answers.lines.count
        }
        let elapsed = clock.now - start
        let used = cpu.cores()
        let after = try await rig.metrics(http)
        let debited = after.value(#"claw_recorder_wallet_asks_total{result="debit_debited"}"#)
            - before.value(#"claw_recorder_wallet_asks_total{result="debit_debited"}"#)
        let rows = try rig.psql("SELECT count(*) FROM ledger WHERE kind = 'debit'").first ?? "?"
        say("\nrate: \(debits) debits from \(sites) sites at once (one mosquitto_pub -l a site, QoS 1), each with a valid voucher, "
            + "timed until every answer was on wallet/ack")
        say("debits   seconds   debits/s   debited   debit rows in PostgreSQL")
        say(String(format: "%6d   %7.2f   %8.0f   %7.0f   %@", debits, elapsed.seconds, Double(debits) / elapsed.seconds, debited, rows))
        say("one group's transaction (claw_recorder_wallet_group_latency_seconds, its durable COMMIT included): "
            + after.latency(since: before, family: "claw_recorder_wallet_group_latency_seconds"))
        say("CPU (cores) over the run: " + used.map { String(format: "%@ %.2f", $0.name, $0.cores) }.joined(separator: ", "))
        rig.bench.stop("publish")
        rig.bench.stop("answers")
    }

    // MARK: Flood

    private func underFlood(_ rig: RecordsRig, _ http: HTTPClient) async throws {
        let quiet = try await honestDebits(rig, run: "quiet")
        let lines = (0..<flood).map { Self.debit(site: "bench-flood", session: "bench-flood-g\($0)", player: $0) }
        let path = rig.directory.appendingPathComponent("flood.jsonl").path
        try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        let before = try await rig.metrics(http)
        try rig.spawn(
            "flood", "/usr/bin/mosquitto_pub",
            ["-h", "127.0.0.1", "-p", "\(rig.brokerPort)", "-i", "claw-bench-flood", "-q", "1", "-t", "claw/bench-flood/wallet", "-l"],
            stdin: path)
        // The flood is under way before the first honest debit.
        try await Task.sleep(for: .milliseconds(200))
        let flooded = try await honestDebits(rig, run: "flood")
        let after = try await rig.metrics(http)
        let settled = after.value(#"claw_recorder_wallet_asks_total{result="debit_debited"}"#)
            - before.value(#"claw_recorder_wallet_asks_total{result="debit_debited"}"#)
        let dropped = after.value(#"claw_recorder_wallet_asks_total{result="dropped"}"#)
            - before.value(#"claw_recorder_wallet_asks_total{result="dropped"}"#)
        rig.bench.stop("flood")
        say("\nflood: one site publishes \(flood) valid debits back to back while another asks one every \(every) ms "
            + "(its own mosquitto_pub each: the process start is in the figures)")
        say("honest site        debits   p50 ms   p99 ms   max ms")
        for (name, figures) in [("alone", quiet), ("beside the flood", flooded)] {
            say(String(format: "%-17@  %6d   %6.1f   %6.1f   %6.1f", name, figures.count, figures.p50, figures.p99, figures.max))
        }
        say(String(format: "while it lasted the recorder debited %.0f asks and dropped %.0f of the flood (its site's line was full)",
            settled, dropped))
    }

    struct Figures {
        var count: Int
        var p50: Double
        var p99: Double
        var max: Double
    }

    /// --honest debits of one site, one every --every, each timed from just
    /// before its publisher starts to its answer's receipt.
    private func honestDebits(_ rig: RecordsRig, run: String) async throws -> Figures {
        let site = "bench-honest-\(run)"
        let answers = try rig.watchLines("honest-\(run)", topic: "claw/\(site)/wallet/ack", format: "%U %p")
        try await Task.sleep(for: .milliseconds(300))
        var sent: [String: Double] = [:]
        for index in 0..<honest {
            let session = "\(site)-g\(index)"
            sent[session] = Date().timeIntervalSince1970
            let pid = try rig.spawn(
                "honest", "/usr/bin/mosquitto_pub",
                ["-h", "127.0.0.1", "-p", "\(rig.brokerPort)", "-q", "1", "-t", "claw/\(site)/wallet", "-m",
                 Self.debit(site: site, session: session, player: index)])
            rig.bench.forget(pid)
            try await Task.sleep(for: .milliseconds(every))
        }
        let deadline = ContinuousClock.now + .seconds(120)
        var latencies: [Double] = []
        while ContinuousClock.now < deadline {
            latencies = answers.lines.compactMap { line -> Double? in
                guard let space = line.firstIndex(of: " "), let received = Double(line[..<space]),
                    let answer = ChainWalletAnswer.decode(Array(line[line.index(after: space)...].utf8)), let at = sent[answer.session]
                else { return nil }
                return (received - at) * 1000
            }
            if latencies.count >= honest { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        rig.bench.stop("honest-\(run)")
        guard latencies.count >= honest else {
            throw BenchError("\(latencies.count) of the honest site's \(honest) debits answered within 120 s; the recorder's log:\n" + rig.logTail("recorder"))
        }
        let sorted = latencies.sorted()
        func at(_ q: Double) -> Double { sorted[min(sorted.count - 1, Int((q * Double(sorted.count)).rounded(.up)) - 1)] }
        return Figures(count: sorted.count, p50: at(0.5), p99: at(0.99), max: sorted.last ?? 0)
    }
}

extension RecordsRig {
    /// A mosquitto_sub of `topic` into a file the returned reader reads whole lines of.
    func watchLines(_ name: String, topic: String, format: String = "%p") throws -> LineReader {
        let file = directory.appendingPathComponent("\(name).lines")
        try spawn(
            name, "/usr/bin/mosquitto_sub",
            ["-h", "127.0.0.1", "-p", "\(brokerPort)", "-i", "claw-bench-\(name)", "-q", "1", "-t", topic, "-F", format], output: file.path)
        // Subscribed before anything is published.
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline, !FileManager.default.fileExists(atPath: file.path) { usleep(10_000) }
        usleep(200_000)
        return LineReader(path: file.path)
    }
}

/// The whole lines written to a file so far (a mosquitto_sub's output).
final class LineReader: Sendable {
    let path: String
    private let seen = Mutex((offset: 0, lines: [String]()))

    init(path: String) {
        self.path = path
    }

    var lines: [String] {
        seen.withLock { seen in
            guard let handle = FileHandle(forReadingAtPath: path) else { return seen.lines }
            defer { try? handle.close() }
            try? handle.seek(toOffset: UInt64(seen.offset))
            let data = (try? handle.readToEnd()) ?? Data()
            guard let end = data.lastIndex(of: UInt8(ascii: "\n")) else { return seen.lines }
            seen.offset += end - data.startIndex + 1
            seen.lines += String(decoding: data[data.startIndex...end], as: UTF8.self).split(separator: "\n").map(String.init)
            return seen.lines
        }
    }
}
