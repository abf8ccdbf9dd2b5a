import Foundation
import Logging
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// The site deployment files of deploy/, for real: make-site-secrets.sh makes
    /// the CA, certificates and passwords; mosquitto runs deploy/mosquitto.conf
    /// with deploy/acl (site paths and ports moved into a temporary folder); MQTT
    /// clients log in as the gateway, the observer and the machine PCs.
    ///
    /// A denied publish is dropped by the broker without closing the connection,
    /// and a subscription is always granted, its messages filtered one by one. So
    /// "never delivered" is proved with barriers: a later message on the same
    /// connection, which the broker handles in order, instead of a sleep.
    @Suite("deploy/: the site's mosquitto config, ACL and secrets")
    struct DeployConfigTests {
        @Test("make-site-secrets.sh writes the CA, certificates and passwords, and refuses to overwrite them")
        func secrets() throws {
            let site = try DeploySite()
            let made = try site.makeSecrets()
            try #require(made.status == 0, "\(made.output)")
            for file in ["tls/ca.crt", "tls/server.crt", "tls/gateway.crt"] {
                #expect(site.mode(file) == 0o644, "\(file)")
            }
            for secret in ["tls/ca.key", "tls/server.key", "tls/gateway.key", "passwd", "passwords"] {
                #expect(site.mode(secret) == 0o600, "\(secret)")
            }
            let passwords = try site.readPasswords()
            #expect(Set(passwords.keys) == ["gateway", "observer", "m1", "m2"])
            #expect(passwords.values.allSatisfy { $0.count >= 16 && !$0.contains("/") && !$0.contains("+") })
            #expect(Set(passwords.values).count == 4)

            let ca = try Data(contentsOf: site.file("tls/ca.crt"))
            let again = try site.makeSecrets()
            #expect(again.status != 0)
            #expect(again.output.contains("already exists"), "\(again.output)")
            #expect(try Data(contentsOf: site.file("tls/ca.crt")) == ca)
            #expect(try site.readPasswords() == passwords)

            let forced = try site.makeSecrets(["--force", "--host", "localhost", "m1", "m2", "m3"])
            #expect(forced.status == 0, "\(forced.output)")
            #expect(try Data(contentsOf: site.file("tls/ca.crt")) != ca)
            #expect(try Set(site.readPasswords().keys) == ["gateway", "observer", "m1", "m2", "m3"])

            let reserved = try site.makeSecrets(["--force", "observer"])
            #expect(reserved.status != 0)
        }

        @Test("deploy/gateway.yaml passes check-config, with its files moved here and its four variables set")
        func gatewayConfig() throws {
            let site = try DeploySite()
            let made = try site.makeSecrets()
            try #require(made.status == 0, "\(made.output)")
            var yaml = try String(contentsOf: DeploySite.deployFolder.appendingPathComponent("gateway.yaml"), encoding: .utf8)
            // Every ${VAR} outside comments: the ones the unit's EnvironmentFile
            // and the README provide.
            let settings = yaml.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("#") }
            let variables = Set(
                settings.joined(separator: "\n").components(separatedBy: "${").dropFirst()
                    .compactMap { $0.split(separator: "}").first.map(String.init) })
            #expect(variables == ["MQTT_PASSWORD", "NIM_APP_SECRET", "CLAW_WEBHOOK_SECRET", "CLAW_ADMIN_TOKEN"])

            let moves = [
                ("/etc/claw-gateway/tls/", site.file("tls").path + "/"),
                ("/var/lib/claw-gateway/", site.directory.path + "/state/"),
            ]
            for (sitePath, testPath) in moves {
                try #require(yaml.contains(sitePath), "deploy/gateway.yaml no longer uses \(sitePath)")
                yaml = yaml.replacingOccurrences(of: sitePath, with: testPath)
            }
            let file = site.directory.appendingPathComponent("gateway.yaml")
            try yaml.write(to: file, atomically: true, encoding: .utf8)
            var environment = ProcessInfo.processInfo.environment
            for name in variables { environment[name] = "test-value-of-\(name)" }
            let result = try GatewayBinary.run(["check-config", "--config", file.path], environment: environment)
            #expect(result.status == 0, "\(result.error)")
            #expect(result.output.contains("broker mqtts://127.0.0.1:8883 as gateway"), "\(result.output)")
            #expect(result.output.contains("machines: 2"), "\(result.output)")
        }

        @Test("anonymous clients and wrong passwords are refused, on both listeners")
        func refusesStrangers() async throws {
            try await DeploySite.with { site in
                // Refused clients retry only after a minute: one attempt each, so
                // the broker's "not authorised" lines can be counted.
                let anonymous = try site.client("anonymous", user: nil, retry: 60)
                try await eventually("the broker to refuse the anonymous client") { site.refusals == 1 }
                #expect(!anonymous.isConnected && anonymous.client.connectCount == 0)

                let wrong = try site.client("wrong-password", user: "m1", password: "not-the-password", retry: 60)
                try await eventually("the broker to refuse a wrong password") { site.refusals == 2 }
                #expect(!wrong.isConnected && wrong.client.connectCount == 0)

                let ca = site.file("tls/ca.crt").path
                let anonymousTLS = try site.client(
                    "anonymous-tls", user: nil, port: site.tlsPort, tls: TLSSettings(caFile: ca), retry: 60)
                try await eventually("the broker to refuse the anonymous TLS client") { site.refusals == 3 }
                #expect(!anonymousTLS.isConnected && anonymousTLS.client.connectCount == 0)

                // The same listeners let the right passwords in.
                let m1 = try site.client("m1-pc", user: "m1")
                let gateway = try site.client("gateway", user: "gateway", port: site.tlsPort, tls: TLSSettings(caFile: ca))
                try await eventually("m1 and the gateway to log in") { m1.isConnected && gateway.isConnected }
            }
        }

        @Test("a machine PC publishes its own ack, result and state, and nothing else")
        func pcWritesOnlyItsOwnTopics() async throws {
            try await DeploySite.with { site in
                let gateway = try site.client("gateway", user: "gateway", subscribe: ["claw/#"])
                let m1 = try site.client("m1-pc", user: "m1")
                try await eventually("the gateway and m1 to connect") { gateway.isConnected && m1.isConnected }
                // Retained, so the gateway gets it whether its subscription is
                // made before or after: once it has it, the subscription is active.
                try m1.publish("claw/m1/state", "online", retain: true)
                try await gateway.waitFor("claw/m1/state", "online")

                let forged = [
                    "claw/m2/result", "claw/m2/ack", "claw/m2/state", "claw/m2/control", "claw/m1/control",
                    "claw/m1/camera", "claw/m1/queue", "claw/m1/events", "claw/gateway/state",
                ]
                for topic in forged {
                    try m1.publish(topic, "forged by m1", retain: topic.hasSuffix("/state"))
                }
                try m1.publish("claw/m1/ack", "ack of m1")
                // The barrier: m1's connection is handled in order, so anything
                // forged that got through would reach the gateway before this.
                try m1.publish("claw/m1/result", "result of m1")
                try await gateway.waitFor("claw/m1/result", "result of m1")

                #expect(gateway.payloads(on: "claw/m1/ack") == ["ack of m1"])
                let leaked = gateway.messages.filter { String(decoding: $0.payload, as: UTF8.self) == "forged by m1" }.map(\.topic)
                #expect(leaked.isEmpty, "m1 published to \(leaked)")
            }
        }

        @Test("a machine PC reads its own control and camera topics, and nothing of another machine, retained included")
        func pcReadsOnlyItsOwnTopics() async throws {
            try await DeploySite.with { site in
                let gateway = try site.client("gateway", user: "gateway", subscribe: ["claw/#"])
                let m2 = try site.client("m2-pc", user: "m2")
                try await eventually("the gateway and m2 to connect") { gateway.isConnected && m2.isConnected }
                // Retained messages of m2 that m1 must not get when it subscribes;
                // the gateway seeing them means the broker has stored them.
                try m2.publish("claw/m2/state", "online", retain: true)
                try gateway.publish("claw/m2/queue", #"{"machine":"m2"}"#, retain: true)
                try gateway.publish("claw/m1/control", "sentinel", retain: true)
                try await gateway.waitFor("claw/m2/state", "online")
                try await gateway.waitFor("claw/m2/queue", #"{"machine":"m2"}"#)
                try await gateway.waitFor("claw/m1/control", "sentinel")

                let m1 = try site.client("m1-pc", user: "m1", subscribe: ["claw/m2/#", "claw/+/control", "claw/+/camera"])
                // The subscription is granted (mosquitto filters messages, not
                // subscriptions); the retained sentinel says it is active.
                try await m1.waitFor("claw/m1/control", "sentinel")

                try gateway.publish("claw/m2/control", "for m2")
                try gateway.publish("claw/m2/camera", "camera of m2")
                try gateway.publish("claw/m1/camera", "camera of m1")
                // The barrier: the gateway's connection is handled in order.
                try gateway.publish("claw/m1/control", "for m1")
                try await m1.waitFor("claw/m1/control", "for m1")

                #expect(m1.payloads(on: "claw/m1/camera") == ["camera of m1"])
                let topics = Set(m1.messages.map(\.topic))
                #expect(topics == ["claw/m1/control", "claw/m1/camera"], "m1 read \(topics)")
            }
        }

        @Test("the observer reads everything, retained included, and publishes nothing")
        func observerReadsEverything() async throws {
            try await DeploySite.with { site in
                let gateway = try site.client("gateway", user: "gateway", subscribe: ["claw/#"])
                let m1 = try site.client("m1-pc", user: "m1")
                let m2 = try site.client("m2-pc", user: "m2")
                try await eventually("the gateway and the PCs to connect") { gateway.isConnected && m1.isConnected && m2.isConnected }
                try m1.publish("claw/m1/state", "online", retain: true)
                try m2.publish("claw/m2/state", "online", retain: true)
                try gateway.publish("claw/m1/queue", #"{"machine":"m1"}"#, retain: true)
                try gateway.publish("claw/m1/control", "sentinel", retain: true)
                try await gateway.waitFor("claw/m1/state", "online")
                try await gateway.waitFor("claw/m2/state", "online")
                try await gateway.waitFor("claw/m1/queue", #"{"machine":"m1"}"#)
                try await gateway.waitFor("claw/m1/control", "sentinel")

                let observer = try site.client("observer", user: "observer", subscribe: ["claw/#"])
                try await observer.waitFor("claw/m1/state", "online")
                try await observer.waitFor("claw/m2/state", "online")
                try await observer.waitFor("claw/m1/queue", #"{"machine":"m1"}"#)
                #expect(observer.messages.first { $0.topic == "claw/m1/queue" }?.retain == true)

                try m1.publish("claw/m1/ack", "ack of m1")
                try m1.publish("claw/m1/result", "result of m1")
                try m2.publish("claw/m2/result", "result of m2")
                try gateway.publish("claw/m2/control", "for m2")
                try gateway.publish("claw/m2/camera", "camera of m2")
                try gateway.publish("claw/m1/events", #"{"type":"online"}"#)
                try await observer.waitFor("claw/m1/ack", "ack of m1")
                try await observer.waitFor("claw/m1/result", "result of m1")
                try await observer.waitFor("claw/m2/result", "result of m2")
                try await observer.waitFor("claw/m2/control", "for m2")
                try await observer.waitFor("claw/m2/camera", "camera of m2")
                try await observer.waitFor("claw/m1/events", #"{"type":"online"}"#)

                // The observer publishes nothing.
                m1.subscribe(["claw/m1/control"])
                try await m1.waitFor("claw/m1/control", "sentinel")
                try observer.publish("claw/m1/control", "from the observer")
                try observer.publish("claw/m2/state", "offline", retain: true)
                // A barrier on the observer's own connection: the retained state of
                // a new subscription comes after the broker handled the publishes.
                let states = observer.payloads(on: "claw/m1/state").count
                observer.subscribe(["claw/m1/state"])
                try await eventually("the observer's second subscription") { observer.payloads(on: "claw/m1/state").count > states }
                // And a later message to m1 and the gateway from the gateway.
                try gateway.publish("claw/m1/control", "after")
                try await m1.waitFor("claw/m1/control", "after")
                try await gateway.waitFor("claw/m1/control", "after")
                #expect(!m1.payloads(on: "claw/m1/control").contains("from the observer"))
                #expect(!gateway.payloads(on: "claw/m1/control").contains("from the observer"))
                #expect(!gateway.payloads(on: "claw/m2/state").contains("offline"))
                #expect(!observer.payloads(on: "claw/m2/state").contains("offline"))
            }
        }

        @Test("the TLS listener: the site CA works, with or without the gateway's certificate; another CA does not")
        func tls() async throws {
            try await DeploySite.with { site in
                let ca = site.file("tls/ca.crt").path
                let m1 = try site.client("m1-pc", user: "m1", port: site.tlsPort, tls: TLSSettings(caFile: ca))
                try await eventually("m1 to connect over TLS") { m1.isConnected }
                try m1.publish("claw/m1/state", "online over TLS", retain: true)
                let gatewayTLS = TLSSettings(
                    caFile: ca, certFile: site.file("tls/gateway.crt").path, keyFile: site.file("tls/gateway.key").path)
                let gateway = try site.client("gateway", user: "gateway", port: site.tlsPort, tls: gatewayTLS, subscribe: ["claw/#"])
                try await gateway.waitFor("claw/m1/state", "online over TLS")

                let other = try TLSFixture.make(name: "some-other-ca")
                defer { try? FileManager.default.removeItem(at: other.directory) }
                let stranger = try site.client(
                    "wrong-ca", user: "observer", port: site.tlsPort, tls: TLSSettings(caFile: other.caCertificate.path), retry: 60)
                try await eventually("the certificate error to be reported") {
                    let error = stranger.client.lastError?.lowercased() ?? ""
                    return error.contains("certificate") || error.contains("tls")
                }
                #expect(!stranger.isConnected && stranger.client.connectCount == 0, "\(stranger.client.lastError ?? "")")
            }
        }
    }

    /// One site: the secrets of deploy/make-site-secrets.sh in `directory/claw`,
    /// deploy/acl beside them, and a mosquitto running deploy/mosquitto.conf with
    /// those paths and two free loopback ports. Stopped by PID.
    private final class DeploySite {
        /// The repository's deploy/ folder.
        static let deployFolder = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent()  // Deploy
            .deletingLastPathComponent()  // ClawGatewayTests
            .deletingLastPathComponent()  // Tests
            .deletingLastPathComponent()  // the repository
            .appendingPathComponent("deploy")

        let directory: URL
        let plainPort: Int
        let tlsPort: Int
        /// make-site-secrets.sh --out, in place of /etc/mosquitto/claw.
        var secrets: URL { directory.appendingPathComponent("claw") }
        private var passwords: [String: String] = [:]
        private var broker: ChildProcess?
        private var clients: [SiteClient] = []

        init() throws {
            directory = try TemporaryDirectory.make(prefix: "deploy")
            plainPort = try FreePort.next()
            var port = try FreePort.next()
            while port == plainPort { port = try FreePort.next() }
            tlsPort = port
        }

        /// Makes the secrets, starts the broker, runs `body`, and stops the
        /// clients and the broker whatever happens.
        static func with(_ body: (DeploySite) async throws -> Void) async throws {
            let site = try DeploySite()
            do {
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
            environment["PATH"] = Self.searchPath.joined(separator: ":")
            let status = try ChildProcess(
                "/bin/bash", [script, "--out", secrets.path] + arguments, output: log, environment: environment
            ).wait()
            return (status, (try? String(contentsOf: log, encoding: .utf8)) ?? "")
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
                ("listener 8883 0.0.0.0", "listener \(tlsPort) 127.0.0.1"),
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

        func start() throws {
            let made = try makeSecrets()
            guard made.status == 0 else {
                throw BrokerError("deploy/make-site-secrets.sh failed with status \(made.status):\n\(made.output)")
            }
            passwords = try readPasswords()
            try FileManager.default.copyItem(at: Self.deployFolder.appendingPathComponent("acl"), to: file("acl"))
            let config = directory.appendingPathComponent("mosquitto.conf")
            try brokerConfig().write(to: config, atomically: true, encoding: .utf8)
            broker = try ChildProcess(
                try MosquittoBroker.executable().path, ["-c", config.path], output: directory.appendingPathComponent("mosquitto.out"))
            guard FreePort.waitUntilListening(plainPort, timeout: 10), FreePort.waitUntilListening(tlsPort, timeout: 10) else {
                let output = (try? String(contentsOf: directory.appendingPathComponent("mosquitto.out"), encoding: .utf8)) ?? ""
                throw BrokerError("mosquitto did not start with deploy/mosquitto.conf:\n\(output)\n\(log)")
            }
        }

        /// An MQTT v5 client of this site's broker, stopped with the site.
        /// - Parameters:
        ///   - user: the username; its password comes from the `passwords` file
        ///     unless `password` is given. nil: anonymous.
        ///   - port: the plain listener unless given.
        ///   - retry: seconds between connection attempts.
        func client(
            _ clientID: String, user: String?, password: String? = nil, port: Int? = nil, tls: TLSSettings? = nil,
            subscribe topics: [String] = [], retry: Int = 1
        ) throws -> SiteClient {
            var configuration = MQTTClientConfiguration(host: "127.0.0.1", port: port ?? plainPort, clientID: clientID)
            configuration.username = user
            configuration.password = password ?? user.flatMap { passwords[$0] }
            configuration.tls = tls
            configuration.reconnectDelay = retry...max(retry, 2)
            let client = try SiteClient(configuration: configuration, subscribe: topics)
            clients.append(client)
            return client
        }

        /// The broker's log.
        var log: String {
            (try? String(contentsOf: directory.appendingPathComponent("mosquitto.log"), encoding: .utf8)) ?? ""
        }

        /// How many connections the broker refused for their credentials.
        var refusals: Int { log.components(separatedBy: "not authorised").count - 1 }

        func stop() async {
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
    private final class SiteClient: Sendable {
        let client: MQTTClient
        let name: String
        private let received = Recorder<MQTTMessage>()
        private let reader: Task<Void, Never>

        init(configuration: MQTTClientConfiguration, subscribe topics: [String]) throws {
            name = configuration.clientID
            client = try MQTTClient(configuration: configuration, logger: Logger(label: "deploy-test.\(configuration.clientID)"))
            if !topics.isEmpty { client.subscribe(topics, qos: .atLeastOnce) }
            let client = client, received = received
            reader = Task {
                for await message in client.messages {
                    received.append(message)
                }
            }
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
            try client.publish(topic, payload: Array(text.utf8), qos: .atLeastOnce, retain: retain)
        }

        /// Waits until `payload` has arrived on `topic`.
        func waitFor(_ topic: String, _ payload: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            try await eventually("\(name) to receive \"\(payload)\" on \(topic)", sourceLocation: sourceLocation) {
                payloads(on: topic).contains(payload)
            }
        }

        func stop() async {
            await client.shutdown()
            await reader.value
        }
    }
}
