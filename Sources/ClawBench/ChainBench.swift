import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import Protocol
import Synchronization

// MARK: Chain

/// `claw-bench chain`: the figures of a chain of arcades (SPEC §9) on this
/// box, against the chain `scripts/chain` runs: a copy's time through a
/// router and the cluster to the site's receipt against the same copy posted
/// to the site itself; the copies a second one router routes; and the time
/// the chain takes to recover from a `kill -9` of the cluster node the
/// router is connected to.
struct ChainBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chain",
        abstract: "Latency, throughput and failover of a chain (routers, NATS cluster, sites) that scripts/chain runs.",
        discussion: """
            Uses the chain running from --state (its chain.env and pids, written by scripts/chain), or, when none \
            runs there, starts one with `scripts/chain --detach --bench` (the claw-gateway beside claw-bench, no \
            build) and stops it at the end. A chain started without --bench limits each player to 10 commands a \
            second, which would refuse most of the load: the bench says so and stops.

            A player holds a turn on every machine (joined and accepted on its site); every copy is a move. A \
            router answers 200 only once the site's receipt is back, and the site publishes the move to the PC \
            before its receipt: the router's answer time is the whole path. The node kill is real: the bench \
            sends SIGKILL to the nats-server the router is connected to, then starts it again with \
            `scripts/chain node N`.
            """
    )

    @OptionGroup var options: GatewayOption
    @Option(help: "The chain's state folder (scripts/chain's CLAW_CHAIN_DIR).") var state = ".chain"
    @Option(help: "scripts/chain, to start a chain and a killed node again.") var script = "scripts/chain"
    @Option(help: "Moves timed on each path, one at a time.") var samples = 2000
    @Option(help: "Moves sent on each path before timing.") var warmup = 200
    @Option(help: "Concurrent keep-alive connections of the throughput phase.") var connections = 16
    @Option(help: "How long the throughput phase lasts on each path, e.g. 10s.") var duration = "10s"
    @Flag(help: "Leave out the node kill.") var noKill = false

    func run() async throws {
        guard let length = Soak.duration(duration) else { throw ValidationError("--duration takes a duration such as 10s.") }
        var startedHere = false
        if !ChainProcesses.running(state: state) {
            print("chain: none runs from \(state)/; starting one: \(script) --detach --bench")
            let binDirectory = URL(fileURLWithPath: options.binary).deletingLastPathComponent().path
            try ChainProcesses.script(script, ["--detach", "--bench"], state: state, bin: binDirectory)
            startedHere = true
        }
        do {
            let chain = try ChainLayout(state: state)
            guard chain.bench else {
                throw BenchError(
                    "the chain in \(state)/ was started without --bench: its players may send 10 commands a second. "
                        + "Stop it (\(script) down) and run this again: the bench starts its own.")
            }
            try await withClient(connections: connections + 4) { http in
                try await measure(chain, http, length: length)
            }
        } catch {
            if startedHere { try? ChainProcesses.script(script, ["down"], state: state) }
            throw error
        }
        if startedHere { try ChainProcesses.script(script, ["down"], state: state) }
    }

    private func measure(_ chain: ChainLayout, _ http: HTTPClient, length: Duration) async throws {
        let router = chain.routers[0]
        let serials = Ticker()
        var players: [ChainPlayer] = []
        for site in chain.sites {
            for machine in site.machines {
                players.append(try await ChainPlayer.start(http, chain: chain, site: site, machine: machine, serials: serials))
            }
        }
        print("chain: \(chain.sites.count) sites (\(chain.sites.map { "\($0.name): \($0.machines.joined(separator: " "))" }.joined(separator: "; "))), "
            + "\(chain.routers.count) routers, 3 NATS nodes; a player in a game on every machine")

        // Latency: one move at a time, the direct path and the chain's in turn, so both see the same noise.
        let first = players[0]
        print("\nlatency: \(samples) moves on \(first.machine) one at a time on each path (after \(warmup) warm-up), "
            + "from sending the request to its answer")
        var direct: [Duration] = [], routed: [Duration] = []
        let answers = Tally()
        for index in 0..<(warmup + samples) {
            let viaSite = try await first.move(http, base: first.site.url, answers: answers)
            let viaRouter = try await first.move(http, base: router, answers: answers)
            // Only moves that reached the PC are timed; the others are counted below.
            guard index >= warmup else { continue }
            if viaSite.answer == "forwarded" { direct.append(viaSite.time) }
            if viaRouter.answer == "forwarded" { routed.append(viaRouter.time) }
        }
        print("path".padding(toLength: 44, withPad: " ", startingAt: 0) + "p50 µs    p99 µs   mean µs   timed")
        print(Self.row("direct: POST to the site's gateway", direct))
        print(Self.row("chain: router → cluster → site → receipt", routed))
        print("answers: \(answers.line)")

        // Throughput: one router, many connections, moves spread over every machine of both sites.
        print("\nthroughput: \(connections) keep-alive connections send moves back to back for \(duration), "
            + "spread over \(players.count) machines on \(chain.sites.count) sites")
        print("path                              copies/s   answered 200 forwarded   other answers")
        let groups = ChainProcesses.groups(state: state)
        for (label, base) in [("direct: each site's gateway", nil as String?), ("chain: one router", router)] {
            let cpu = CPUSample(groups)
            let result = await Self.load(http, players: players, base: base, connections: connections, length: length)
            let used = cpu.cores()
            print(
                label.padding(toLength: 32, withPad: " ", startingAt: 0)
                    + String(format: "%9.0f   %22d   ", Double(result.forwarded) / result.elapsed.seconds, result.forwarded)
                    + (result.others.line.isEmpty ? "none" : result.others.line))
            print("    CPU (cores): " + used.map { String(format: "%@ %.2f", $0.name, $0.cores) }.joined(separator: ", "))
        }

        if !noKill {
            try await failover(chain, http, players: players)
        }

        // Each game ends with a grab, so the machines are free for the next run.
        for player in players { await player.grab(http) }
    }

    /// One row of the latency table.
    static func row(_ label: String, _ times: [Duration]) -> String {
        let sorted = times.sorted()
        guard !sorted.isEmpty else { return label + ": no samples" }
        func micros(_ duration: Duration) -> Double { duration.seconds * 1_000_000 }
        let mean = sorted.map(micros).reduce(0, +) / Double(sorted.count)
        return label.padding(toLength: 40, withPad: " ", startingAt: 0)
            + String(
                format: "%10.0f%10.0f%10.0f%8d", micros(sorted[sorted.count / 2]), micros(sorted[min(sorted.count - 1, sorted.count * 99 / 100)]), mean,
                sorted.count)
    }

    /// Back-to-back moves on `connections` tasks for `length`, to `base`
    /// (a router), or with `base` nil to each player's own site.
    static func load(_ http: HTTPClient, players: [ChainPlayer], base: String?, connections: Int, length: Duration) async
        -> (forwarded: Int, others: Tally, elapsed: Duration)
    {
        let answers = Tally()
        let clock = ContinuousClock()
        let start = clock.now
        let end = start + length
        await withTaskGroup(of: Void.self) { group in
            for task in 0..<connections {
                let player = players[task % players.count]
                group.addTask {
                    while clock.now < end {
                        _ = try? await player.move(http, base: base ?? player.site.url, answers: answers)
                    }
                }
            }
        }
        let elapsed = clock.now - start
        var counts = answers.snapshot
        let forwarded = counts.removeValue(forKey: "forwarded") ?? 0
        let others = Tally()
        for (name, count) in counts { for _ in 0..<count { others.add(name) } }
        return (forwarded, others, elapsed)
    }

    // MARK: Failover

    /// SIGKILL to the node router 1 is connected to, while a move goes to a
    /// machine of each site through router 1 every 100 ms and its `/readyz`
    /// is read every 100 ms; then the node is started again.
    private func failover(_ chain: ChainLayout, _ http: HTTPClient, players: [ChainPlayer]) async throws {
        let routerID = chain.routerClientIDs[0]
        guard let node = await chain.node(holding: routerID, http) else {
            throw BenchError("no cluster node lists \(routerID) in /connz; is router 1 connected?")
        }
        guard let pid = ChainProcesses.pid(state: state, name: "chain-\(node)") else { throw BenchError("no PID for chain-\(node) in \(state)/pids") }
        let leader = await chain.metaLeader(http)
        var sharing: [String] = []
        for site in chain.sites where await chain.node(holding: "claw-site-\(site.name)", http) == node { sharing.append("\(site.name)'s link") }
        for (index, id) in chain.routerClientIDs.enumerated().dropFirst() where await chain.node(holding: id, http) == node {
            sharing.append("router \(index + 1)")
        }
        print("\nfailover: kill -9 chain-\(node) (pid \(pid)), the node router 1 is connected to"
            + (sharing.isEmpty ? "" : ", with \(sharing.joined(separator: ", "))")
            + "; JetStream's meta leader: \(leader ?? "unknown")"
            + "; a move through router 1 to a machine of each site every 100 ms, router 1's /readyz every 100 ms")
        let probes = chain.sites.compactMap { site in players.first { $0.site.name == site.name } }
        let clock = ContinuousClock()
        let killed = clock.now
        guard kill(pid, SIGKILL) == 0 else { throw BenchError("cannot kill pid \(pid): \(String(cString: strerror(errno)))") }
        let timeline = ChainTimeline()
        let router = chain.routers[0]
        let give = Duration.seconds(60)
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                while clock.now - killed < give, !timeline.readyAgain {
                    let status = (try? await http.execute(HTTPClientRequest(url: router + "/readyz"), timeout: .seconds(2)))?.status.code
                    timeline.readiness(ok: status == 200, at: clock.now - killed)
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            for probe in probes {
                group.addTask {
                    while clock.now - killed < give, !timeline.delivered(probe.site.name) {
                        let answer = (try? await probe.move(http, base: router, answers: Tally(), timeout: .seconds(3)))?.answer
                        timeline.answer(site: probe.site.name, answer ?? "transport error", at: clock.now - killed)
                        try? await Task.sleep(for: .milliseconds(100))
                    }
                }
            }
        }
        print(timeline.report(sites: probes.map(\.site.name)))
        print("starting chain-\(node) again: \(script) node \(node)")
        try ChainProcesses.script(script, ["node", "\(node)"], state: state)
    }
}

/// What scripts/chain wrote into its state folder's chain.env: where every part listens.
struct ChainLayout {
    struct Site {
        var name: String
        var url: String
        var machines: [String]
    }

    var routers: [String]
    var routerClientIDs: [String]
    var nodeMonitors: [String]
    var sites: [Site]
    var secret: String
    var bench: Bool

    init(state: String) throws {
        let path = state + "/chain.env"
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw BenchError("no \(path): start the chain with scripts/chain") }
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            values[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        func list(_ key: String) -> [String] { (values[key] ?? "").split(separator: " ").map(String.init) }
        routers = list("CHAIN_ROUTERS")
        routerClientIDs = list("CHAIN_ROUTER_CLIENT_IDS")
        nodeMonitors = list("CHAIN_NODE_MONITORS")
        secret = values["CHAIN_SECRET"] ?? ""
        bench = values["CHAIN_BENCH"] == "1"
        sites = list("CHAIN_SITES").map { name in
            let key = "CHAIN_SITE_" + name.replacingOccurrences(of: "-", with: "_")
            return Site(name: name, url: values[key + "_URL"] ?? "", machines: list(key + "_MACHINES"))
        }
        guard !routers.isEmpty, routers.count == routerClientIDs.count, !sites.isEmpty, sites.allSatisfy({ !$0.machines.isEmpty }) else {
            throw BenchError("\(path) names no routers or no sites: was the chain started by a scripts/chain whose build has a router?")
        }
    }

    /// The node leading JetStream's meta group, from the first node that answers `/jsz`.
    func metaLeader(_ http: HTTPClient) async -> String? {
        for monitor in nodeMonitors {
            guard let response = try? await http.execute(HTTPClientRequest(url: "\(monitor)/jsz"), timeout: .seconds(2)),
                let body = try? await response.body.collect(upTo: 1 << 20),
                let object = try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any],
                let leader = (object["meta_cluster"] as? [String: Any])?["leader"] as? String
            else { continue }
            return leader
        }
        return nil
    }

    /// Which node (1, 2, 3) holds the MQTT client `id`, from the nodes' `/connz`.
    func node(holding id: String, _ http: HTTPClient) async -> Int? {
        for (index, monitor) in nodeMonitors.enumerated() {
            guard let response = try? await http.execute(HTTPClientRequest(url: "\(monitor)/connz?mqtt_client=\(id)"), timeout: .seconds(2)),
                let body = try? await response.body.collect(upTo: 1 << 20),
                let object = try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any]
            else { continue }
            if let count = object["num_connections"] as? Int, count > 0 { return index + 1 }
        }
        return nil
    }
}

/// A bench player holding a turn on one machine, sending signed generic
/// notifications (SPEC §5) with the chain's one secret.
struct ChainPlayer: Sendable {
    var site: ChainLayout.Site
    var machine: String
    var secret: String
    var serials: Ticker
    var player: String { "bench-\(machine)" }

    /// Joins on the site itself and accepts the turn: the game the moves need.
    static func start(_ http: HTTPClient, chain: ChainLayout, site: ChainLayout.Site, machine: String, serials: Ticker) async throws -> ChainPlayer {
        let player = ChainPlayer(site: site, machine: machine, secret: chain.secret, serials: serials)
        // A game this player left running in an earlier run ends with a grab; its result frees the machine.
        await player.grab(http)
        var session = try await player.send(http, base: site.url, #"{"command":6}"#)["session"]
        let deadline = ContinuousClock.now + .seconds(30)
        while session == nil, ContinuousClock.now < deadline {
            // Queued behind a game waiting for its result: the offer comes with the result.
            try await Task.sleep(for: .milliseconds(250))
            session = await player.offeredSession(http)
        }
        guard let session else { throw BenchError("\(player.player) was offered no turn on \(machine) within 30 s") }
        let accepted = try await player.send(http, base: site.url, #"{"command":12,"data":"\#(session)"}"#)
        guard accepted["result"] == "accepted" else {
            throw BenchError("\(player.player) could not accept its turn on \(machine): \(accepted)")
        }
        return player
    }

    /// One move to `base`; its answer counted in `answers` by result (or
    /// error code, or HTTP status); returns the answer and how long it took.
    @discardableResult
    func move(_ http: HTTPClient, base: String, answers: Tally, timeout: Duration = .seconds(10)) async throws -> (answer: String, time: Duration) {
        let direction = ["left", "right", "up", "down"][serials.next() % 4]
        let request = notification(base: base, #"{"command":1,"data":"\#(direction)","serial":\#(serials.next())}"#)
        let clock = ContinuousClock()
        let start = clock.now
        do {
            let response = try await http.execute(request, timeout: .seconds(timeout.components.seconds))
            let body = try await response.body.collect(upTo: 1 << 16)
            let elapsed = clock.now - start
            let fields = BenchSite.fields(body)
            let answer =
                response.status == .ok
                ? (fields["result"] == "rejected" ? fields["code"] ?? "rejected" : fields["result"] ?? "http 200")
                : "http \(response.status.code)"
            answers.add(answer)
            return (answer, elapsed)
        } catch {
            answers.add("transport error")
            throw error
        }
    }

    /// The session the site offers this player on its machine, from the read API.
    func offeredSession(_ http: HTTPClient) async -> String? {
        guard let response = try? await http.execute(HTTPClientRequest(url: "\(site.url)/v1/machines/\(machine)"), timeout: .seconds(10)),
            let body = try? await response.body.collect(upTo: 1 << 20),
            let object = try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any],
            let turn = object["player"] as? [String: Any], turn["accid"] as? String == player
        else { return nil }
        return turn["session"] as? String
    }

    func grab(_ http: HTTPClient) async {
        _ = try? await send(http, base: site.url, #"{"command":2,"serial":\#(serials.next())}"#)
    }

    func send(_ http: HTTPClient, base: String, _ attach: String) async throws -> [String: String] {
        let response = try await http.execute(notification(base: base, attach), timeout: .seconds(10))
        return BenchSite.fields(try await response.body.collect(upTo: 1 << 16))
    }

    /// A signed generic notification from this player to its machine.
    func notification(base: String, _ attach: String) -> HTTPClientRequest {
        BenchSite.notification(base: base, secret: secret, from: player, to: machine, attach)
    }
}

/// What happened after the kill, as the probes saw it.
final class ChainTimeline: Sendable {
    private struct State {
        var readyOK = true
        var firstNotReady: Duration?
        var readyAgain: Duration?
        var firstDelivered: [String: Duration] = [:]
        var lastFailure: [String: Duration] = [:]
        var answers: [String: [String: Int]] = [:]
    }

    private let state = Mutex(State())

    var readyAgain: Bool { state.withLock { $0.readyAgain != nil } }

    func delivered(_ site: String) -> Bool { state.withLock { $0.firstDelivered[site] != nil } }

    func readiness(ok: Bool, at time: Duration) {
        state.withLock { state in
            if !ok, state.firstNotReady == nil { state.firstNotReady = time }
            if ok, state.firstNotReady != nil, state.readyAgain == nil { state.readyAgain = time }
            // Ready throughout the first 30 s: the router never noticed.
            if ok, state.firstNotReady == nil, time > .seconds(30) { state.readyAgain = time }
        }
    }

    func answer(site: String, _ answer: String, at time: Duration) {
        state.withLock { state in
            state.answers[site, default: [:]][answer, default: 0] += 1
            if answer == "forwarded" {
                if state.firstDelivered[site] == nil { state.firstDelivered[site] = time }
            } else {
                state.lastFailure[site] = time
            }
        }
    }

    func report(sites: [String]) -> String {
        state.withLock { state in
            func seconds(_ duration: Duration?) -> String { duration.map { String(format: "%.1f s", $0.seconds) } ?? "not within 60 s" }
            var lines: [String] = []
            if let down = state.firstNotReady {
                lines.append("router 1 /readyz: 503 from \(seconds(down)) after the kill, 200 again at \(seconds(state.readyAgain))")
            } else {
                lines.append("router 1 /readyz: 200 throughout")
            }
            for site in sites {
                let answers = (state.answers[site] ?? [:]).sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
                lines.append("\(site): first move delivered again (200 forwarded) \(seconds(state.firstDelivered[site])) after the kill; answers until then: \(answers)")
            }
            return lines.joined(separator: "\n")
        }
    }
}

/// The processes of a chain that scripts/chain started: its PID file, its
/// commands, and the CPU each part uses.
enum ChainProcesses {
    static func pids(state: String) -> [(name: String, pid: pid_t)] {
        let text = (try? String(contentsOfFile: state + "/pids", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ")
            guard parts.count == 2, let pid = pid_t(parts[1]) else { return nil }
            return (String(parts[0]), pid)
        }
    }

    static func pid(state: String, name: String) -> pid_t? {
        pids(state: state).first { $0.name == name }?.pid
    }

    static func running(state: String) -> Bool {
        pids(state: state).contains { kill($0.pid, 0) == 0 && ticks($0.pid) != nil }
    }

    /// The chain's processes by part: routers, site gateways, NATS nodes, site brokers, simulators.
    static func groups(state: String) -> [(name: String, pids: [pid_t])] {
        let all = pids(state: state)
        return [("router-1", "router-1"), ("router-2", "router-2"), ("gateways", "gateway-"), ("NATS", "chain-"), ("mosquittos", "mosquitto-"),
            ("simulators", "simulate-")].map { label, prefix in
            (label, all.filter { $0.name.hasPrefix(prefix) }.map(\.pid))
        }
    }

    /// utime + stime of a live process, in clock ticks.
    static func ticks(_ pid: pid_t) -> Int? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the name: state is field 3 of stat(5), utime 14, stime 15.
        guard fields.count > 12, fields[0] != "Z", let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        return user + system
    }

    /// Runs scripts/chain with the chain's state folder and waits for it;
    /// throws with its output when it fails. Its output goes to a file, not
    /// a pipe: the processes it leaves running would hold a pipe open. It
    /// starts with no signal blocked or ignored, whatever this process does
    /// with its own, so that the chain stops on SIGTERM.
    static func script(_ path: String, _ arguments: [String], state: String, bin: String? = nil) throws {
        let log = NSTemporaryDirectory() + "claw-bench-chain-\(getpid()).log"
        defer { unlink(log) }
        var environment = ["CLAW_CHAIN_DIR": state]
        if let bin { environment["CLAW_CHAIN_BIN"] = bin }
        let pid = try Spawn.start([path] + arguments, Spawn.Files(output: log, truncate: true), environment: environment)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1, errno == EINTR {}
        guard status == 0 else {
            let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            throw BenchError("\(path) \(arguments.joined(separator: " ")) failed (status \(status)):\n\(output)")
        }
    }
}

/// CPU time of the chain's parts between its start and `cores()`.
struct CPUSample {
    let groups: [(name: String, pids: [pid_t])]
    let start: [pid_t: Int]
    let clock = ContinuousClock()
    let began: ContinuousClock.Instant

    init(_ groups: [(name: String, pids: [pid_t])]) {
        self.groups = groups
        var start: [pid_t: Int] = [:]
        for pid in groups.flatMap(\.pids) { start[pid] = ChainProcesses.ticks(pid) }
        self.start = start
        began = clock.now
    }

    /// Each part's CPU use over the window, in cores.
    func cores() -> [(name: String, cores: Double)] {
        let seconds = (clock.now - began).seconds
        let hertz = Double(sysconf(Int32(_SC_CLK_TCK)))
        return groups.filter { !$0.pids.isEmpty }.map { group in
            let used = group.pids.reduce(0) { total, pid in
                guard let before = start[pid], let after = ChainProcesses.ticks(pid) else { return total }
                return total + after - before
            }
            return (group.name, Double(used) / hertz / seconds)
        }
    }
}

extension Tally {
    /// `name count, …`, by name.
    var line: String {
        snapshot.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
    }
}
