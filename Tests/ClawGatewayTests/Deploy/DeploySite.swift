import Foundation
import Logging
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// One site: the secrets and the ACL of deploy/make-site-secrets.sh in
    /// `directory/claw`, and a mosquitto running deploy/mosquitto.conf with
    /// those paths and three free loopback ports in place of its listeners'.
    /// Or, `packaged`, the site as the Debian package sets it up: the logins
    /// of make-site-secrets.sh --no-tls, and deploy/debian/mosquitto.conf with
    /// its loopback listener and (after --tls-only) its arcade listener
    /// uncommented, on free ports. Stopped by PID.
    final class DeploySite {
        /// The repository's deploy/ folder.
        static let deployFolder = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent()  // Deploy
            .deletingLastPathComponent()  // ClawGatewayTests
            .deletingLastPathComponent()  // Tests
            .deletingLastPathComponent()  // the repository
            .appendingPathComponent("deploy")

        /// A listener of deploy/mosquitto.conf, as this site runs it.
        struct Listener: CustomStringConvertible {
            var description: String
            var port: Int
            var tls: TLSSettings?
        }

        let directory: URL
        /// The package's broker (deploy/debian/mosquitto.conf), not deploy/'s.
        let packaged: Bool
        /// `listener 1883 127.0.0.1`.
        let plainPort: Int
        /// `listener 8883 127.0.0.1`, the gateway's.
        let tlsPort: Int
        /// `listener 8883 ARCADE_LAN_ADDRESS`, the PCs', here on 127.0.0.1 too.
        let arcadePort: Int
        /// make-site-secrets.sh --out, in place of /etc/mosquitto/claw.
        var secrets: URL { directory.appendingPathComponent("claw") }
        private var passwords: [String: String] = [:]
        private var broker: ChildProcess?
        private var clients: [SiteClient] = []
        private var processes: [ChildProcess] = []
        /// Tools make-site-secrets.sh finds first on its PATH: wrappers that
        /// log their arguments to `toolLog`, then run the real tool.
        private var wrappers: URL?

        init(packaged: Bool = false) throws {
            self.packaged = packaged
            directory = try TemporaryDirectory.make(prefix: "deploy")
            var ports: [Int] = []
            while ports.count < 3 {
                let port = try FreePort.next()
                if !ports.contains(port) { ports.append(port) }
            }
            plainPort = ports[0]
            tlsPort = ports[1]
            arcadePort = ports[2]
        }

        /// Makes the secrets, starts the broker, runs `body`, and stops the
        /// clients, processes and the broker whatever happens.
        /// - Parameter tools: tools whose calls by make-site-secrets.sh are
        ///   logged (see ``toolCalls``).
        static func with(
            packaged: Bool = false, wrapping tools: [String] = [], _ body: (DeploySite) async throws -> Void
        ) async throws {
            let site = try DeploySite(packaged: packaged)
            do {
                try site.wrap(tools)
                try site.start()
                try await body(site)
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }

        func file(_ relative: String) -> URL { secrets.appendingPathComponent(relative) }

        /// Permission bits of a file under `secrets`, or nil if it is missing.
        func mode(_ relative: String) -> Int? {
            var info = stat()
            guard stat(file(relative).path, &info) == 0 else { return nil }
            return Int(info.st_mode & 0o777)
        }

        /// The site CA, to trust on the TLS listeners.
        var tls: TLSSettings { TLSSettings(caFile: file("tls/ca.crt").path) }

        /// The three listeners (the package's broker: its two).
        var listeners: [Listener] {
            if packaged {
                return [
                    Listener(description: "plain loopback", port: plainPort, tls: nil),
                    Listener(description: "TLS arcade", port: arcadePort, tls: tls),
                ]
            }
            return [
                Listener(description: "plain loopback", port: plainPort, tls: nil),
                Listener(description: "TLS loopback", port: tlsPort, tls: tls),
                Listener(description: "TLS arcade", port: arcadePort, tls: tls),
            ]
        }

        /// Runs deploy/make-site-secrets.sh --out `secrets` with `arguments`.
        func makeSecrets(_ arguments: [String] = ["--host", "localhost", "m1", "m2"]) throws -> (status: Int32, output: String) {
            // The script checks too; this says what is missing before it runs.
            for tool in ["openssl", "mosquitto_passwd"] where Self.find(tool) == nil {
                throw BrokerError(
                    "\(tool) is not installed; these tests need it. Run ./scripts/test (it installs it) or: sudo apt-get install -y mosquitto openssl"
                )
            }
            let log = directory.appendingPathComponent("make-site-secrets-\(UUID().uuidString.prefix(6)).log")
            let script = Self.deployFolder.appendingPathComponent("make-site-secrets.sh").path
            var environment = ProcessInfo.processInfo.environment
            environment["PATH"] = ((wrappers.map { [$0.path] } ?? []) + Self.searchPath).joined(separator: ":")
            let status = try ChildProcess(
                "/bin/bash", [script, "--out", secrets.path] + arguments, output: log, environment: environment
            ).wait()
            return (status, (try? String(contentsOf: log, encoding: .utf8)) ?? "")
        }

        /// Puts a wrapper for each of `tools` first on make-site-secrets.sh's PATH.
        func wrap(_ tools: [String]) throws {
            guard !tools.isEmpty else { return }
            let folder = directory.appendingPathComponent("wrappers")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            for tool in tools {
                guard let real = Self.find(tool) else { throw BrokerError("\(tool) is not installed") }
                let wrapper = folder.appendingPathComponent(tool)
                try "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '\(toolLog.path)'\nexec '\(real.path)' \"$@\"\n"
                    .write(to: wrapper, atomically: true, encoding: .utf8)
                chmod(wrapper.path, 0o755)
            }
            wrappers = folder
        }

        private var toolLog: URL { directory.appendingPathComponent("tools.log") }

        /// The arguments of every call of a wrapped tool, one line per call.
        var toolCalls: [String] {
            ((try? String(contentsOf: toolLog, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }

        /// The `passwords` file: username → password.
        func readPasswords() throws -> [String: String] {
            let text = try String(contentsOf: file("passwords"), encoding: .utf8)
            var result: [String: String] = [:]
            for line in text.split(separator: "\n") where !line.hasPrefix("#") {
                let fields = line.split(separator: " ")
                if fields.count == 2 { result[String(fields[0])] = String(fields[1]) }
            }
            return result
        }

        /// The `max_packet_size` of deploy/mosquitto.conf.
        static func maxPacketSize() throws -> Int {
            let text = try String(contentsOf: deployFolder.appendingPathComponent("mosquitto.conf"), encoding: .utf8)
            guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("max_packet_size ") }),
                let size = Int(line.dropFirst("max_packet_size ".count))
            else { throw BrokerError("deploy/mosquitto.conf has no max_packet_size") }
            return size
        }

        /// deploy/mosquitto.conf with the site's paths and ports moved here.
        func brokerConfig() throws -> String {
            var text = try String(contentsOf: Self.deployFolder.appendingPathComponent("mosquitto.conf"), encoding: .utf8)
            let settings = text.split(separator: "\n").filter { !$0.hasPrefix("#") }
            let sitePaths = ["/etc/", "/var/", "/run/"]
            if let stray = settings.first(where: { line in
                !line.contains("/etc/mosquitto/claw/") && sitePaths.contains { line.contains($0) }
            }) {
                throw BrokerError("deploy/mosquitto.conf has a site path this test does not move: \(stray)")
            }
            let moves = [
                ("/etc/mosquitto/claw", secrets.path),
                ("listener 1883 127.0.0.1", "listener \(plainPort) 127.0.0.1"),
                ("listener 8883 127.0.0.1", "listener \(tlsPort) 127.0.0.1"),
                ("listener 8883 ARCADE_LAN_ADDRESS", "listener \(arcadePort) 127.0.0.1"),
            ]
            for (site, test) in moves {
                guard text.contains(site) else {
                    throw BrokerError("deploy/mosquitto.conf no longer contains \"\(site)\"; update DeployConfigTests to match")
                }
                text = text.replacingOccurrences(of: site, with: test)
            }
            var extra = [
                "", "# Added by DeployConfigTests.",
                "persistence_location \(directory.path)/",
                "log_dest file \(directory.appendingPathComponent("mosquitto.log").path)",
                "log_type all",
            ]
            // As root, mosquitto would drop to the mosquitto user, which cannot
            // write this folder.
            if geteuid() == 0 { extra.append("user root") }
            return text + extra.joined(separator: "\n") + "\n"
        }

        /// The package's broker config, deploy/debian/mosquitto.conf.
        static var packagedBrokerFile: URL { deployFolder.appendingPathComponent("debian/mosquitto.conf") }

        /// deploy/debian/mosquitto.conf with its arcade listener uncommented
        /// (as INSTALL.md says), the site's paths and ports moved here.
        func packagedBrokerConfig() throws -> String {
            var lines = try String(contentsOf: Self.packagedBrokerFile, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
                .map(String.init)
            guard let arcade = lines.firstIndex(of: "#listener 8883 ARCADE_LAN_ADDRESS") else {
                throw BrokerError("deploy/debian/mosquitto.conf has no commented arcade listener; update DeploySite to match")
            }
            // The block: the commented settings under it ("#word", where prose is "# word").
            var index = arcade
            while index < lines.count, lines[index].hasPrefix("#"), !lines[index].hasPrefix("# "), lines[index].count > 1 {
                lines[index].removeFirst()
                index += 1
            }
            var text = lines.joined(separator: "\n")
            let moves = [
                ("/etc/mosquitto/claw", secrets.path),
                ("listener 1883 127.0.0.1", "listener \(plainPort) 127.0.0.1"),
                ("listener 8883 ARCADE_LAN_ADDRESS", "listener \(arcadePort) 127.0.0.1"),
            ]
            for (site, test) in moves {
                guard text.contains(site) else {
                    throw BrokerError("deploy/debian/mosquitto.conf no longer contains \"\(site)\"; update DeploySite to match")
                }
                text = text.replacingOccurrences(of: site, with: test)
            }
            var extra = [
                "", "# Added by the deploy tests.",
                "persistence_location \(directory.path)/",
                "log_dest file \(directory.appendingPathComponent("mosquitto.log").path)",
                "log_type all",
            ]
            if geteuid() == 0 { extra.append("user root") }
            return text + extra.joined(separator: "\n") + "\n"
        }

        /// deploy/debian/gateway.yaml, the package's starter config, with its
        /// broker, HTTP port and database moved here, and the secrets the
        /// package's postinst makes in its environment.
        func starterConfig(httpPort: Int) throws -> (file: URL, environment: [String: String]) {
            var yaml = try String(contentsOf: Self.deployFolder.appendingPathComponent("debian/gateway.yaml"), encoding: .utf8)
            let moves = [
                ("mqtt://127.0.0.1:1883", "mqtt://127.0.0.1:\(plainPort)"),
                ("listen: 127.0.0.1:8080", "listen: 127.0.0.1:\(httpPort)"),
                ("/var/lib/claw-gateway/", directory.path + "/state/"),
            ]
            for (sitePath, testPath) in moves {
                guard yaml.contains(sitePath) else { throw BrokerError("deploy/debian/gateway.yaml no longer uses \(sitePath)") }
                yaml = yaml.replacingOccurrences(of: sitePath, with: testPath)
            }
            try FileManager.default.createDirectory(at: directory.appendingPathComponent("state"), withIntermediateDirectories: true)
            let file = directory.appendingPathComponent("starter.yaml")
            try yaml.write(to: file, atomically: true, encoding: .utf8)
            var environment = ProcessInfo.processInfo.environment
            environment["MQTT_PASSWORD"] = passwords["gateway"]
            environment["CLAW_WEBHOOK_SECRET"] = String(repeating: "5e", count: 32)
            return (file, environment)
        }

        /// deploy/gateway.yaml with its files moved here, and the environment
        /// its `${VAR}`s need.
        /// - Parameter url: the broker URL in place of the site's, if given.
        func gatewayConfig(url: String? = nil) throws -> (file: URL, variables: Set<String>, environment: [String: String]) {
            var yaml = try String(contentsOf: Self.deployFolder.appendingPathComponent("gateway.yaml"), encoding: .utf8)
            // Every ${VAR} outside comments: the ones the unit's EnvironmentFile
            // and the README provide.
            let settings = yaml.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("#") }
            let variables = Set(
                settings.joined(separator: "\n").components(separatedBy: "${").dropFirst()
                    .compactMap { $0.split(separator: "}").first.map(String.init) })
            var moves = [
                ("/etc/claw-gateway/tls/", file("tls").path + "/"),
                ("/var/lib/claw-gateway/", directory.path + "/state/"),
            ]
            if let url { moves.append(("mqtts://127.0.0.1:8883", url)) }
            for (sitePath, testPath) in moves {
                guard yaml.contains(sitePath) else { throw BrokerError("deploy/gateway.yaml no longer uses \(sitePath)") }
                yaml = yaml.replacingOccurrences(of: sitePath, with: testPath)
            }
            let file = directory.appendingPathComponent("gateway.yaml")
            try yaml.write(to: file, atomically: true, encoding: .utf8)
            var environment = ProcessInfo.processInfo.environment
            for name in variables { environment[name] = "test-value-of-\(name)" }
            return (file, variables, environment)
        }

        func start() throws {
            // As the package's postinst makes them, then as an operator adds
            // the arcade listener's certificates.
            let runs = packaged ? [["--no-tls", "m1", "m2"], ["--tls-only", "--host", "localhost"]] : [["--host", "localhost", "m1", "m2"]]
            for arguments in runs {
                let made = try makeSecrets(arguments)
                guard made.status == 0 else {
                    throw BrokerError("deploy/make-site-secrets.sh \(arguments.joined(separator: " ")) failed with status \(made.status):\n\(made.output)")
                }
            }
            passwords = try readPasswords()
            let config = directory.appendingPathComponent("mosquitto.conf")
            try (packaged ? packagedBrokerConfig() : brokerConfig()).write(to: config, atomically: true, encoding: .utf8)
            broker = try ChildProcess(
                try MosquittoBroker.executable().path, ["-c", config.path], output: directory.appendingPathComponent("mosquitto.out"))
            guard listeners.allSatisfy({ FreePort.waitUntilListening($0.port, timeout: 10) }) else {
                let output = (try? String(contentsOf: directory.appendingPathComponent("mosquitto.out"), encoding: .utf8)) ?? ""
                throw BrokerError("mosquitto did not start with \(packaged ? "deploy/debian" : "deploy")/mosquitto.conf:\n\(output)\n\(log)")
            }
        }

        /// SIGHUP, as `systemctl reload mosquitto`: the broker rereads the
        /// password file and the ACL. Clients take the new passwords from now on.
        func reload() throws {
            passwords = try readPasswords()
            broker?.signal(SIGHUP)
        }

        /// An MQTT v5 client of this site's broker, stopped with the site.
        /// - Parameters:
        ///   - user: the username; its password comes from the `passwords` file
        ///     unless `password` is given. nil: anonymous.
        ///   - port: the plain listener unless given.
        ///   - retry: seconds between connection attempts.
        func client(
            _ clientID: String, user: String?, password: String? = nil, port: Int? = nil, tls: TLSSettings? = nil,
            will: MQTTWill? = nil, subscribe topics: [String] = [], retry: Int = 1
        ) throws -> SiteClient {
            var configuration = MQTTClientConfiguration(host: "127.0.0.1", port: port ?? plainPort, clientID: clientID)
            configuration.username = user
            configuration.password = password ?? user.flatMap { passwords[$0] }
            configuration.tls = tls
            configuration.will = will
            configuration.reconnectDelay = retry...max(retry, 2)
            let client = try SiteClient(configuration: configuration, subscribe: topics)
            clients.append(client)
            return client
        }

        /// Disconnects `client` cleanly and waits until the broker has seen it
        /// go, so that the next login with the same username takes nothing over.
        /// (Counts every client's DISCONNECT: the broker may know the client by
        /// another id than it gave.)
        func disconnect(_ client: SiteClient) async throws {
            let gone = log.components(separatedBy: "Received DISCONNECT from ").count
            await client.stop()
            clients.removeAll { $0 === client }
            try await eventually("the broker to see \(client.name) disconnect") {
                log.components(separatedBy: "Received DISCONNECT from ").count > gone
            }
        }

        /// The claw-gateway binary with `arguments`, stopped (SIGTERM) with the site.
        func spawn(_ arguments: [String], environment: [String: String], log name: String) throws -> ChildProcess {
            let process = try ChildProcess(
                try GatewayBinary.url().path, arguments, output: directory.appendingPathComponent(name), environment: environment)
            processes.append(process)
            return process
        }

        /// The broker's log.
        var log: String {
            (try? String(contentsOf: directory.appendingPathComponent("mosquitto.log"), encoding: .utf8)) ?? ""
        }

        /// How many connections the broker refused for their credentials.
        var refusals: Int { log.components(separatedBy: "not authorised").count - 1 }

        func stop() async {
            for process in processes {
                process.signal(SIGTERM)
                if await process.wait(timeout: 10) == nil {
                    process.signal(SIGKILL)
                    process.wait()
                }
            }
            processes = []
            for client in clients { await client.stop() }
            clients = []
            stopBroker()
        }

        private func stopBroker() {
            guard let broker else { return }
            self.broker = nil
            broker.signal(SIGTERM)
            broker.wait()
        }

        deinit {
            stopBroker()
            try? FileManager.default.removeItem(at: directory)
        }

        static let searchPath: [String] = {
            let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
            let standard = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
            return path.split(separator: ":").map(String.init) + standard
        }()

        static func find(_ tool: String) -> URL? {
            searchPath.map { URL(fileURLWithPath: $0).appendingPathComponent(tool) }
                .first { FileManager.default.isExecutableFile(atPath: $0.path) }
        }
    }

    /// An MQTT client that records what it receives.
    final class SiteClient: Sendable {
        let client: MQTTClient
        let name: String
        private let received = Recorder<MQTTMessage>()

        init(configuration: MQTTClientConfiguration, subscribe topics: [String]) throws {
            name = configuration.clientID
            client = try MQTTClient(configuration: configuration, logger: Logger(label: "deploy-test.\(configuration.clientID)"))
            if !topics.isEmpty { client.subscribe(topics, qos: .atLeastOnce) }
            let received = received
            client.onMessage { received.append($0) }
            client.start()
        }

        var isConnected: Bool { client.isConnected }
        var messages: [MQTTMessage] { received.items }

        func payloads(on topic: String) -> [String] {
            messages.filter { $0.topic == topic }.map { String(decoding: $0.payload, as: UTF8.self) }
        }

        /// Subscribes now (the client is connected) and after every reconnect.
        func subscribe(_ topics: [String]) {
            client.subscribe(topics, qos: .atLeastOnce)
        }

        /// Publishes at QoS 1.
        func publish(_ topic: String, _ text: String, retain: Bool = false) throws {
            try publish(topic, bytes: Array(text.utf8), retain: retain)
        }

        /// Publishes at QoS 1.
        func publish(_ topic: String, bytes: [UInt8], retain: Bool = false) throws {
            try client.publish(topic, payload: bytes, qos: .atLeastOnce, retain: retain)
        }

        /// Waits until `payload` has arrived on `topic`.
        func waitFor(_ topic: String, _ payload: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            try await eventually("\(name) to receive \"\(payload)\" on \(topic)", sourceLocation: sourceLocation) {
                payloads(on: topic).contains(payload)
            }
        }

        func stop() async {
            await client.shutdown()
        }
    }
}
