import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// A chain of arcades on this machine for one test (SPEC §9): the three-node
/// NATS cluster of deploy/chain/, two sites (each its own mosquitto bridged to
/// the cluster, `claw-gateway run` and `claw-gateway simulate`), two routers
/// (`claw-gateway route`), and one fake NetEase API that sites and routers
/// all reply through, as the one IM app of a chain does.
///
/// Every node's URL list starts with node 1 except router 2's, which starts
/// with node 2: killing node 1 cuts both site links and router 1 at once.
/// Everything is started by the harness and stopped by PID; the temporary
/// folders are removed.
final class ChainHarness {
    /// One arcade: its broker (with the bridge `bridge-config` prints), its
    /// gateway, its simulated PCs (which log every message they receive) and
    /// a subscriber to its machines' events.
    final class Site {
        let name: String
        let user: String
        let broker: MosquittoBroker
        let site: TestSite
        private(set) var machines: [String]
        private(set) var gateway: ChildProcess?
        private(set) var simulator: ChildProcess?
        private(set) var events: TestSubscriber?
        /// The site's `http.read_token`, once `credits:` needs one (``setCredits(price:)``).
        var readToken: String?

        var base: String { "http://127.0.0.1:\(site.httpPort)" }
        var receiptLog: URL { site.directory.appendingPathComponent("receipts.jsonl") }
        var accounts: [String] { machines.map { "claw_\($0)" } }

        init(name: String, machines: [String], cluster: NATSCluster, netease: FakeNetEaseAPI) async throws {
            self.name = name
            user = "site-\(name)"
            self.machines = machines
            // The site's broker needs the bridge that `bridge-config` prints
            // from the site's gateway.yaml, which names the broker: its port
            // is chosen first, the broker started once the bridge is known.
            let port = try FreePort.next()
            site = try TestSite(
                broker: try MosquittoBroker(port: port), machines: machines,
                game: "play_timeout: 90s\ncommand_events: true", extra: Self.sections(name, cluster: cluster, netease: netease),
                logLevel: "info")
            let bridge = try GatewayBinary.run(["bridge-config", "--config", site.config.path])
            guard bridge.status == 0 else {
                throw BrokerError("claw-gateway bridge-config failed (\(bridge.status)): \(bridge.error)\(bridge.output)")
            }
            broker = try MosquittoBroker(port: port, config: "allow_anonymous true\n" + bridge.output)
            try broker.start()
            events = try await TestSubscriber(broker: broker, topics: ["claw/+/events"])
        }

        /// The `im:` and `chain:` sections: the chain's one app, this site's login.
        private static func sections(_ name: String, cluster: NATSCluster, netease: FakeNetEaseAPI) -> String {
            let user = "site-\(name)"
            return """
                \(netease.imSection())
                chain:
                  site: \(name)
                  bus: [\(cluster.mqttURLs.joined(separator: ", "))]
                  username: \(user)
                  password: \(NATSCluster.passwords[user] ?? "")

                """
        }

        func startGateway() throws {
            precondition(gateway == nil, "gateway already running")
            gateway = try GatewayBinary.start(["run", "--config", site.config.path], log: site.log)
        }

        /// Every simulated PC acks at once and wins, 2 s after the grab: a
        /// result that a test can see arrive while the cluster is down.
        func startSimulator() throws {
            precondition(simulator == nil, "simulator already running")
            simulator = try GatewayBinary.start(
                [
                    "simulate", "--config", site.config.path, "--ack-delay", "0s", "--result-delay", "2s", "--win-rate", "1",
                    "--log", receiptLog.path,
                ], log: site.directory.appendingPathComponent("simulate.log"))
        }

        /// Ready (its chain link up) with every machine's PC online.
        func waitReady(timeout: Duration = .seconds(30)) async throws {
            let base = base, count = machines.count
            try await eventually("\(name) to be ready with its chain link", timeout: timeout) {
                (try? await HTTP.get("\(base)/readyz"))?.status == 200
            }
            try await eventually("\(name)'s \(count) machines to be online", timeout: timeout) {
                let list = try? await HTTP.get("\(base)/v1/machines", bearer: readToken)
                return (list?.body.components(separatedBy: #""online":true"#).count ?? 0) == count + 1
            }
        }

        /// SIGKILL to the simulated PCs: their broker's wills say `offline`.
        func killSimulator() {
            simulator?.signal(SIGKILL)
            simulator?.wait()
            simulator = nil
        }

        /// SIGSTOP: the gateway is there but says nothing, as behind a cut link.
        func freeze() { gateway?.signal(SIGSTOP) }
        func thaw() { gateway?.signal(SIGCONT) }

        /// Adds a machine to the site's gateway.yaml; the gateway and the
        /// simulator read it when they are restarted.
        func addMachine(_ id: String) throws {
            var yaml = try String(contentsOf: site.config, encoding: .utf8)
            yaml += """
                  - id: \(id)
                    name: Machine \(id)
                    im_account: claw_\(id)

                """
            try yaml.write(to: site.config, atomically: true, encoding: .utf8)
            machines.append(id)
        }

        /// SIGTERM to the gateway and the simulator, then starts both again.
        func restart() async throws {
            await Self.stop(simulator)
            await Self.stop(gateway)
            simulator = nil
            gateway = nil
            try startGateway()
            try startSimulator()
        }

        /// One series of the gateway's `/metrics`, e.g. `claw_chain_link_silences_total`.
        func metric(_ series: String) async -> Double? {
            guard let text = try? await HTTP.get("\(base)/metrics", bearer: readToken).body else { return nil }
            return (try? PrometheusText(text))?.samples[series]
        }

        // MARK: What reached the PCs

        /// One line of the simulator's receipt log: a message a PC received.
        struct Receipt: Sendable {
            var machine: String
            var command: Int
            var data: String?
            var serial: Int64?
            var session: String?
            var player: String?
            var at: Date
        }

        /// Everything the site's PCs received, in the order they logged it.
        var receipts: [Receipt] {
            let text = (try? String(contentsOf: receiptLog, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { line in
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                    let machine = object["machine"] as? String, let command = object["command"] as? Int,
                    let at = (object["time"] as? String).flatMap(Timestamp.date)
                else { return nil }
                return Receipt(
                    machine: machine, command: command, data: object["data"] as? String,
                    serial: (object["serial"] as? Int).map(Int64.init), session: object["session"] as? String,
                    player: object["player"] as? String, at: at)
            }
        }

        /// The site's `command` events: which gateway serial carried which player's serial.
        var commandEvents: [GameEvent] {
            (events?.messages ?? []).filter { $0.topic.hasSuffix("/events") }.compactMap {
                try? JSONDecoder().decode(GameEvent.self, from: Data($0.payload))
            }.filter { $0.type == .command }
        }

        /// What the PCs received of each player's commands, by player and
        /// the player's serial: the PC's word, matched to the player's serial
        /// by the gateway's command events. Read once, for many lookups.
        func deliveries() -> [String: [Int64: [Receipt]]] {
            var received: [String: [Receipt]] = [:]
            for receipt in receipts {
                guard let serial = receipt.serial else { continue }
                received["\(receipt.machine)/\(serial)/\(receipt.session ?? "")", default: []].append(receipt)
            }
            var result: [String: [Int64: [Receipt]]] = [:]
            for event in commandEvents {
                guard let player = event.player, let playerSerial = event.playerSerial, let serial = event.serial else { continue }
                result[player, default: [:]][playerSerial, default: []] +=
                    received["\(event.machine)/\(serial)/\(event.session ?? "")"] ?? []
            }
            return result
        }

        func stop() async {
            thaw()
            await events?.stop()
            events = nil
            await Self.stop(simulator)
            await Self.stop(gateway)
            simulator = nil
            gateway = nil
            broker.stop()
            try? FileManager.default.removeItem(at: site.directory)
        }

        static func stop(_ process: ChildProcess?) async {
            guard let process else { return }
            process.signal(SIGCONT)
            process.signal(SIGTERM)
            if await process.wait(timeout: 10) == nil {
                process.signal(SIGKILL)
                process.wait()
            }
        }
    }

    /// One `claw-gateway route`, its chain.yaml and log in its own folder.
    final class Router {
        let number: Int
        let port: Int
        let directory: URL
        private(set) var process: ChildProcess?

        var base: String { "http://127.0.0.1:\(port)" }
        var clientID: String { "claw-router-\(number)" }
        var config: URL { directory.appendingPathComponent("chain.yaml") }
        var log: URL { directory.appendingPathComponent("route.log") }
        var logText: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

        init(number: Int, urls: [String], netease: FakeNetEaseAPI) throws {
            self.number = number
            port = try FreePort.next()
            directory = try TemporaryDirectory.make(prefix: "router")
            let yaml = """
                router:
                  listen: 127.0.0.1:\(port)
                  receipt_timeout: 1s
                  ledger_key: \(ChainHarness.ledgerKey)
                bus:
                  urls: [\(urls.joined(separator: ", "))]
                  username: router
                  password: \(NATSCluster.passwords["router"] ?? "")
                  client_id: \(clientID)
                  topic_prefix: claw
                \(netease.imSection())

                """
            try yaml.write(to: config, atomically: true, encoding: .utf8)
        }

        func start() throws {
            precondition(process == nil, "router already running")
            process = try GatewayBinary.start(["route", "--config", config.path], log: log)
        }

        /// Ready, and its directory names every site reachable with all its machines.
        func waitReady(for sites: [Site], timeout: Duration = .seconds(30)) async throws {
            let base = base
            try await eventually("router \(number) to be ready", timeout: timeout) {
                guard let process, process.isRunning else {
                    throw BrokerError("router \(number) exited (\(process?.exitStatus ?? -1)). Its log:\n\(logText)")
                }
                return (try? await HTTP.get("\(base)/readyz"))?.status == 200
            }
            let wanted = sites.map { ($0.name, Set($0.machines)) }
            try await eventually("router \(number) to see every site reachable with its machines", timeout: timeout) {
                let listed = await self.sites()
                return wanted.allSatisfy { name, machines in
                    listed[name].map { $0.reachable && machines.isSubset(of: $0.machines) } ?? false
                }
            }
        }

        /// `GET /v1/sites`, by site: reachable or not, and the machine ids.
        func sites() async -> [String: (reachable: Bool, machines: Set<String>)] {
            guard let answer = try? await HTTP.get("\(base)/v1/sites"), answer.status == 200 else { return [:] }
            var result: [String: (reachable: Bool, machines: Set<String>)] = [:]
            for entry in answer.json["sites"] as? [[String: Any]] ?? [] {
                guard let name = entry["site"] as? String else { continue }
                let machines = (entry["machines"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
                result[name] = (entry["reachable"] as? Bool ?? false, Set(machines))
            }
            return result
        }

        /// SIGKILL: the router dies without a goodbye.
        func kill() {
            process?.signal(SIGKILL)
            process?.wait()
            process = nil
        }

        func stop() async {
            await Site.stop(process)
            process = nil
        }
    }

    let cluster: NATSCluster
    let netease: FakeNetEaseAPI
    let sites: [Site]
    let routers: [Router]

    /// The node every site link and router 1 dial first.
    static let firstNode = 0

    private init(cluster: NATSCluster, netease: FakeNetEaseAPI, sites: [Site], routers: [Router]) {
        self.cluster = cluster
        self.netease = netease
        self.sites = sites
        self.routers = routers
    }

    /// Starts the cluster, `arcade-1` (machines m1, m2) and `arcade-2` (m3,
    /// m4), and two routers, and waits until both routers route to both sites.
    static func start() async throws -> ChainHarness {
        // Fails with how to install them when nats-server or mosquitto is missing.
        _ = try MosquittoBroker.executable()
        let cluster = try await NATSCluster.start()
        let netease = try await FakeNetEaseAPI()
        var sites: [Site] = []
        var routers: [Router] = []
        do {
            for (name, machines) in [("arcade-1", ["m1", "m2"]), ("arcade-2", ["m3", "m4"])] {
                sites.append(try await Site(name: name, machines: machines, cluster: cluster, netease: netease))
            }
            let urls = cluster.mqttURLs
            routers = [
                try Router(number: 1, urls: urls, netease: netease),
                try Router(number: 2, urls: Array(urls[1...] + urls[..<1]), netease: netease),
            ]
            for site in sites {
                try site.startGateway()
                try site.startSimulator()
            }
            for site in sites { try await site.waitReady() }
            // The routers start once every site's directory is retained on
            // the cluster: one subscribing on another node while a directory
            // is being published can miss it until the site connects again.
            for router in routers { try router.start() }
            for router in routers { try await router.waitReady(for: sites) }
        } catch {
            let chain = ChainHarness(cluster: cluster, netease: netease, sites: sites, routers: routers)
            await chain.stop(reporting: true)
            throw error
        }
        return ChainHarness(cluster: cluster, netease: netease, sites: sites, routers: routers)
    }

    /// Runs `body` on a new chain and stops every process afterwards, also when `body` throws.
    static func with(_ body: (ChainHarness) async throws -> Void) async throws {
        let chain = try await start()
        do {
            try await body(chain)
        } catch {
            await chain.stop(reporting: true)
            throw error
        }
        await chain.stop(reporting: false)
    }

    /// Stops every process by PID and removes the folders. With `reporting`,
    /// prints the tail of each log first: a failed chain test is read from
    /// them. With `CLAW_CHAIN_LOGS=<folder>` in the environment, every
    /// gateway's, router's and node's log is copied there first.
    func stop(reporting: Bool) async {
        if reporting {
            for site in sites {
                print("--- \(site.name) gateway log (tail) ---\n\(site.site.logText.suffix(6000))")
            }
            for router in routers {
                print("--- router \(router.number) log (tail) ---\n\(router.logText.suffix(6000))")
            }
        }
        if let keep = ProcessInfo.processInfo.environment["CLAW_CHAIN_LOGS"] {
            for router in routers { try? FileManager.default.copyItem(atPath: router.log.path, toPath: "\(keep)/router-\(router.number).log") }
            for site in sites { try? FileManager.default.copyItem(atPath: site.site.log.path, toPath: "\(keep)/\(site.name).log") }
            for index in cluster.nodes.indices { try? cluster.log(index).write(toFile: "\(keep)/node-\(index + 1).log", atomically: true, encoding: .utf8) }
        }
        for router in routers {
            await router.stop()
            try? FileManager.default.removeItem(at: router.directory)
        }
        for site in sites { await site.stop() }
        await netease.stop()
        for index in cluster.nodes.indices { cluster.stop(index) }
    }

    // MARK: Players

    /// A NetEase copy, signed as NetEase signs it, to router `router`'s callback.
    @discardableResult
    func copy(
        via router: Int = 0, from player: String, to account: String, _ attach: String,
        messageID: String = UUID().uuidString
    ) async throws -> HTTP.Answer {
        try await Self.postCopy(base: routers[router].base, from: player, to: account, attach: attach, messageID: messageID)
    }

    /// The same, from any task.
    static func postCopy(
        base: String, from player: String, to account: String, attach: String, messageID: String, timeout: Duration = .seconds(10)
    ) async throws -> HTTP.Answer {
        let body = NetEaseCopyBody.encode(from: player, to: account, attach: attach, messageID: messageID)
        return try await HTTP.request(.POST, "\(base)/im/netease", headers: E2ESite.signedCopyHeaders(body), body: body, timeout: timeout)
    }

    /// What the fake NetEase API delivered to `player`, decoded.
    func replies(to player: String) -> [WireMessage] {
        netease.attachments(to: player).compactMap { try? WireMessage.decode(Array($0.utf8)) }
    }

    /// Whether `player` was told `code` (command 9) for their command `serial`.
    func told(_ player: String, _ code: String, serial: Int64) -> Bool {
        replies(to: player).contains { $0.code == .error && $0.data == code && $0.serial == serial }
    }

    /// The session of the last turn offer `player` was sent.
    func offeredSession(to player: String, timeout: Duration = .seconds(10)) async throws -> String {
        var session: String?
        try await eventually("a turn offer to \(player)", timeout: timeout) {
            session = replies(to: player).last { $0.code == .turnOffer }?.data
            return session != nil
        }
        return session ?? ""
    }

    /// Which node holds the MQTT connection of `clientID`, from the nodes' own monitoring.
    func node(holding clientID: String) async -> Int? {
        await ChainSuites.ChainLinkTests.nodeHolding(clientID, in: cluster)
    }
}

/// Copies sent at a steady pace while a test breaks the chain: one every
/// `every`, taking the lanes (a player and a machine each) in turn and the
/// routers in turn, each with its own serial and `msgidServer`, each answer
/// recorded with when it was sent.
final class CopyStream: Sendable {
    struct Lane: Sendable {
        var site: Int
        var player: String
        var account: String
    }

    struct Sent: Sendable {
        var lane: Lane
        var router: Int
        var serial: Int64
        var sentAt: Date
        /// When the answer came (or the request failed).
        var answeredAt: Date
        /// 0 when no HTTP answer came.
        var status: Int
        var body: String
    }

    private let sent = Recorder<Sent>()
    private let stopped = Recorder<Bool>()
    private let task: Task<Void, Never>

    init(lanes: [Lane], routers: [(number: Int, base: String)], every: Duration = .milliseconds(200)) {
        let sent = sent, stopped = stopped
        task = Task {
            await withTaskGroup(of: Void.self) { group in
                let clock = ContinuousClock()
                let start = clock.now
                var index = 0
                while stopped.items.isEmpty {
                    let lane = lanes[index % lanes.count]
                    let router = routers[(index / lanes.count) % routers.count]
                    let serial = Int64(index + 1)
                    group.addTask {
                        let attach = #"{"command":1,"data":"\#(serial % 2 == 0 ? "left" : "right")","serial":\#(serial)}"#
                        let sentAt = Date()
                        var record = Sent(
                            lane: lane, router: router.number, serial: serial, sentAt: sentAt, answeredAt: sentAt, status: 0, body: "")
                        do {
                            let answer = try await ChainHarness.postCopy(
                                base: router.base, from: lane.player, to: lane.account, attach: attach, messageID: UUID().uuidString)
                            record.status = answer.status
                            record.body = answer.body
                        } catch {
                            record.body = "\(error)"
                        }
                        record.answeredAt = Date()
                        sent.append(record)
                    }
                    index += 1
                    // The pace of the stream, not a wait for a result.
                    try? await clock.sleep(until: start.advanced(by: every * index))
                }
            }
        }
    }

    /// What has been answered so far.
    var answered: [Sent] { sent.items }

    /// Stops sending, waits for the copies in flight to be answered, and returns every copy sent.
    func stop() async -> [Sent] {
        stopped.append(true)
        await task.value
        return sent.items.sorted { $0.serial < $1.serial }
    }
}
