import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import Synchronization

/// `claw-bench`: what the gateway's daemon does not need to carry. The
/// latency and throughput of the ingress are measured from outside by the
/// comparison harness (docs/BENCHMARKS.md); this measures the rest: memory
/// over a long run of real games, memory with many machines and queued
/// players, and start-up.
@main
struct ClawBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "claw-bench",
        abstract: "Soak, memory and start-up figures of a claw-gateway binary, against a broker it starts on loopback.",
        subcommands: [Soak.self, Memory.self, StartUp.self, ChainBench.self, RecordsBench.self, WalletBench.self]
    )
}

/// Options every scenario shares.
struct GatewayOption: ParsableArguments {
    @Option(help: "The claw-gateway binary; default: the one built beside claw-bench.")
    var gateway: String?

    var binary: String {
        gateway ?? URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
            .appendingPathComponent("claw-gateway").path
    }
}

/// Runs `body` with a client of `connections` keep-alive connections, shut down after.
func withClient(connections: Int, _ body: (HTTPClient) async throws -> Void) async throws {
    var configuration = HTTPClient.Configuration()
    configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: connections)
    let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    do {
        try await body(http)
    } catch {
        try? await http.shutdown()
        throw error
    }
    try await http.shutdown()
}

func mebibytes(_ bytes: Int) -> String {
    String(format: "%.1f MiB", Double(bytes) / 1_048_576)
}

/// Counts by name, shared by the load's tasks.
final class Tally: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    func add(_ name: String) {
        counts.withLock { $0[name, default: 0] += 1 }
    }

    var snapshot: [String: Int] { counts.withLock { $0 } }
    var total: Int { snapshot.values.reduce(0, +) }
}

/// Spreads the load's notifications evenly: each takes the next free slot at `rate` a second.
final class Pacer: Sendable {
    private let gap: Duration
    private let next = Mutex(ContinuousClock.now)

    init(rate: Int) {
        gap = .seconds(1.0 / Double(max(1, rate)))
    }

    func slot() -> ContinuousClock.Instant {
        next.withLock { next in
            // A moment nobody used is not saved up for a burst.
            next = max(next + gap, ContinuousClock.now)
            return next
        }
    }
}

/// Hands out 1, 2, 3, … to the load's tasks.
final class Ticker: Sendable {
    private let value = Atomic<Int>(0)

    func next() -> Int {
        value.add(1, ordering: .relaxed).newValue
    }
}

// MARK: Soak

struct Soak: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Games that end normally for a long time at a steady rate; the gateway's RSS as it goes.",
        discussion: """
            Every machine plays one player after another: join, accept, moves at the machine's share of \
            --rate, a grab, the simulated PC's result a second later, the next player. The default game \
            timers apply, so every game ends with its result. The RSS (VmRSS) is printed every --every.
            """
    )

    @OptionGroup var options: GatewayOption
    @Option(help: "Machines, each with a simulated PC.") var machines = 100
    @Option(help: "Notifications a second, over all machines.") var rate = 1000
    @Option(help: "How long, e.g. 10m.") var duration = "10m"
    @Option(help: "How often the RSS is printed, e.g. 30s.") var every = "30s"
    @Option(help: "Moves in each game before the grab.") var moves = 20

    func run() async throws {
        guard let length = Self.duration(duration), let period = Self.duration(every) else {
            throw ValidationError("--duration and --every take durations such as 10m or 30s.")
        }
        let site = try BenchSite(gateway: options.binary)
        defer { site.stop() }
        try await withClient(connections: machines) { http in try await soak(site, http, length: length, period: period) }
    }

    private func soak(_ site: BenchSite, _ http: HTTPClient, length: Duration, period: Duration) async throws {
        try site.startBroker()
        try site.writeConfig(machines: machines, commandsPerSecond: 100)
        try site.startGateway()
        try await site.waitReady(http)
        try site.startSimulator()
        try await site.waitOnline(http, count: machines)
        guard let pid = site.gatewayPID else { throw BenchError("no gateway") }
        print("soak: \(machines) machines, \(rate) notifications/s, \(duration); \(moves) moves a game; default timers")
        print("elapsed       RSS   answered   games  errors")
        let answers = Tally(), games = Tally()
        let clock = ContinuousClock()
        let end = clock.now + length
        let pacer = Pacer(rate: rate)
        let load = Task {
            await withTaskGroup(of: Void.self) { group in
                for index in 1...machines {
                    group.addTask {
                        await Self.play(site, http, machine: BenchSite.machine(index), moves: moves, pacer: pacer, until: end, answers: answers, games: games)
                    }
                }
            }
        }
        let start = clock.now
        var next = start
        while next <= end {
            try await Task.sleep(until: next, clock: clock)
            let errors = answers.snapshot.filter { !["forwarded", "queued", "offered", "accepted"].contains($0.key) }.values.reduce(0, +)
            print(
                String(
                    format: "%5.0f s  %10@  %9d  %6d  %6d", (clock.now - start).seconds, mebibytes(BenchSite.memory(pid: pid, peak: false) ?? 0),
                    answers.total, games.total, errors))
            next += period
        }
        await load.value
        print(String(format: "%.0f notifications/s answered on average", Double(answers.total) / (clock.now - start).seconds))
        print("answers: \(answers.snapshot.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        print("peak RSS (VmHWM): \(mebibytes(BenchSite.memory(pid: pid, peak: true) ?? 0))")
    }

    /// One machine's players, one game after another, until `end`.
    static func play(
        _ site: BenchSite, _ http: HTTPClient, machine: String, moves: Int, pacer: Pacer, until end: ContinuousClock.Instant,
        answers: Tally, games: Tally
    ) async {
        var serial: Int64 = 0
        var round = 0
        let clock = ContinuousClock()
        func send(_ player: String, _ attach: String) async -> [String: String] {
            try? await Task.sleep(until: pacer.slot(), clock: clock)
            do {
                let response = try await http.execute(site.notification(from: player, to: machine, attach), timeout: .seconds(10))
                let fields = BenchSite.fields(try await response.body.collect(upTo: 1 << 16))
                answers.add(fields["result"] == "rejected" ? fields["code"] ?? "rejected" : fields["result"] ?? "http \(response.status.code)")
                return fields
            } catch {
                answers.add("transport error")
                return [:]
            }
        }
        while clock.now < end {
            round += 1
            let player = "\(machine)-p\(round)"
            var session = await send(player, #"{"command":6}"#)["session"]
            // Queued behind a game still waiting for its result: wait for the offer.
            while session == nil, clock.now < end {
                try? await Task.sleep(for: .milliseconds(250))
                session = await currentSession(site, http, machine: machine, player: player)
            }
            guard let session else { return }
            _ = await send(player, #"{"command":12,"data":"\#(session)"}"#)
            for move in 0..<moves {
                serial += 1
                let direction = ["left", "right", "up", "down"][move % 4]
                _ = await send(player, #"{"command":1,"data":"\#(direction)","serial":\#(serial)}"#)
            }
            serial += 1
            _ = await send(player, #"{"command":2,"serial":\#(serial)}"#)
            games.add("played")
        }
    }

    /// The session `player` was offered on `machine`, read from the machine's API.
    static func currentSession(_ site: BenchSite, _ http: HTTPClient, machine: String, player: String) async -> String? {
        guard let response = try? await http.execute(HTTPClientRequest(url: "\(site.base)/v1/machines/\(machine)"), timeout: .seconds(10)),
            let body = try? await response.body.collect(upTo: 1 << 20)
        else { return nil }
        let text = String(buffer: body)
        guard text.contains(#""player":{"accid":"\#(player)""#), let range = text.range(of: #""session":""#) else { return nil }
        return String(text[range.upperBound...].prefix { $0 != "\"" })
    }

    static func duration(_ text: String) -> Duration? {
        let units: [(String, Double)] = [("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)]
        for (suffix, seconds) in units where text.hasSuffix(suffix) {
            guard let value = Double(text.dropLast(suffix.count)), value > 0 else { return nil }
            return .milliseconds(Int64(value * seconds * 1000))
        }
        return nil
    }
}

// MARK: Memory

struct Memory: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Peak RSS of a gateway with many machines (no PCs online) and many players queued."
    )

    @OptionGroup var options: GatewayOption
    @Option(help: "Machines.") var machines = 1000
    @Option(help: "Players joining, spread over the machines.") var players = 10_000
    @Option(help: "Concurrent connections.") var connections = 8

    func run() async throws {
        let site = try BenchSite(gateway: options.binary)
        defer { site.stop() }
        try await withClient(connections: connections) { http in try await fill(site, http) }
    }

    private func fill(_ site: BenchSite, _ http: HTTPClient) async throws {
        try site.startBroker()
        try site.writeConfig(machines: machines, maxQueue: max(200, players / machines + 1))
        try site.startGateway()
        try await site.waitReady(http)
        guard let pid = site.gatewayPID else { throw BenchError("no gateway") }
        let idle = BenchSite.memory(pid: pid, peak: false) ?? 0
        let answers = Tally()
        let next = Ticker()
        let total = players, machines = machines
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<connections {
                group.addTask {
                    while true {
                        let player = next.next()
                        guard player <= total else { return }
                        let request = site.notification(from: "q\(player)", to: BenchSite.machine(1 + player % machines), #"{"command":6}"#)
                        guard let response = try? await http.execute(request, timeout: .seconds(30)),
                            let body = try? await response.body.collect(upTo: 1 << 16)
                        else {
                            answers.add("transport error")
                            continue
                        }
                        answers.add(BenchSite.fields(body)["result"] ?? "http \(response.status.code)")
                    }
                }
            }
        }
        print("memory: \(machines) machines, \(players) players joined: \(answers.snapshot.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
        print("RSS at start \(mebibytes(idle)), peak (VmHWM) \(mebibytes(BenchSite.memory(pid: pid, peak: true) ?? 0))")
    }
}

// MARK: Start-up

struct StartUp: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "startup",
        abstract: "From spawning `claw-gateway run` to its first 200 on /readyz, on an empty SQLite file."
    )

    @OptionGroup var options: GatewayOption
    @Option(help: "Machines.") var machines = 100
    @Option(help: "Runs; the median is printed.") var runs = 5

    func run() async throws {
        var times: [Duration] = []
        try await withClient(connections: 1) { http in
            for _ in 0..<runs {
                let site = try BenchSite(gateway: options.binary)
                defer { site.stop() }
                try site.startBroker()
                try site.writeConfig(machines: machines)
                let clock = ContinuousClock()
                let start = clock.now
                try site.startGateway()
                try await site.waitReady(http, pollEvery: .milliseconds(1))
                times.append(clock.now - start)
            }
        }
        times.sort()
        print(
            String(
                format: "start-up with %d machines: median %.0f ms (runs: %@)", machines, times[times.count / 2].seconds * 1000,
                times.map { String(format: "%.0f", $0.seconds * 1000) }.joined(separator: ", ")))
    }
}

extension Duration {
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
