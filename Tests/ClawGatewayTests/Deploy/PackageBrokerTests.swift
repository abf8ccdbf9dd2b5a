import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// What the Debian package sets up, for real, outside a Debian root
    /// (scripts/check-package installs the package itself into one): the
    /// logins of make-site-secrets.sh --no-tls, the broker config
    /// deploy/debian/mosquitto.conf on a real mosquitto (see ``DeploySite``,
    /// `packaged`), the starter config deploy/debian/gateway.yaml playing a
    /// first game with the simulator, and deploy/with-secrets, which reads the
    /// env file for the postinst and for commands.
    @Suite("deploy/debian: the broker, starter config and secrets the package sets up")
    struct PackageBrokerTests {
        @Test("make-site-secrets.sh --no-tls makes the logins and ACL without openssl; --tls-only adds certificates and changes no login")
        func loginsThenCertificates() throws {
            let site = try DeploySite(packaged: true)
            try site.wrap(["openssl"])
            let logins = try site.makeSecrets(["--no-tls", "m1", "m2"])
            try #require(logins.status == 0, "\(logins.output)")
            #expect(site.toolCalls.isEmpty, "--no-tls ran openssl \(site.toolCalls)")
            #expect(site.mode("passwd") == 0o600 && site.mode("passwords") == 0o600 && site.mode("acl") == 0o644)
            #expect(!FileManager.default.fileExists(atPath: site.file("tls").path))
            let passwords = try site.readPasswords()
            #expect(Set(passwords.keys) == ["gateway", "observer", "m1", "m1-camera", "m2", "m2-camera"])
            #expect(passwords.values.allSatisfy { $0.count >= 16 && !$0.contains("/") && !$0.contains("+") })
            let hashes = try Data(contentsOf: site.file("passwd"))

            let again = try site.makeSecrets(["--no-tls", "m1", "m2"])
            #expect(again.status != 0 && again.output.contains("already exists"), "\(again.output)")
            #expect(try site.readPasswords() == passwords)

            let certificates = try site.makeSecrets(["--tls-only", "--host", "localhost"])
            try #require(certificates.status == 0, "\(certificates.output)")
            #expect(!site.toolCalls.isEmpty)
            for file in ["tls/ca.crt", "tls/server.crt", "tls/gateway.crt"] { #expect(site.mode(file) == 0o644, "\(file)") }
            for key in ["tls/ca.key", "tls/server.key", "tls/gateway.key"] { #expect(site.mode(key) == 0o600, "\(key)") }
            #expect(try site.readPasswords() == passwords)
            #expect(try Data(contentsOf: site.file("passwd")) == hashes)

            // Each mode makes only its half, and says what it will not do.
            let refusals = [
                (["--tls-only"], "already exists"),
                (["--tls-only", "m3"], "--tls-only makes no logins"),
                (["--no-tls", "--force", "--ip", "192.0.2.1", "m1"], "--no-tls makes no certificate"),
                (["--no-tls", "--tls-only"], "make nothing"),
            ]
            for (arguments, reason) in refusals {
                let refused = try site.makeSecrets(arguments)
                #expect(refused.status != 0 && refused.output.contains(reason), "\(arguments): \(refused.output)")
            }
            #expect(try site.readPasswords() == passwords, "a refused run changed nothing")
        }

        @Test("the package's broker: one loopback listener as shipped, no anonymous client, client ids bound, each PC confined to its machine")
        func brokerAsShipped() async throws {
            let shipped = try String(contentsOf: DeploySite.packagedBrokerFile, encoding: .utf8)
            let settings = shipped.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") && !$0.isEmpty }
            #expect(settings.filter { $0.hasPrefix("listener ") } == ["listener 1883 127.0.0.1"])
            for setting in ["per_listener_settings false", "allow_anonymous false", "password_file /etc/mosquitto/claw/passwd", "acl_file /etc/mosquitto/claw/acl"] {
                #expect(settings.contains(setting), "\(setting)")
            }
            // Each listener, the commented arcade one too, binds client ids to logins.
            let lines = shipped.split(separator: "\n").map(String.init)
            for (index, line) in lines.enumerated() where line.hasPrefix("listener ") || line.hasPrefix("#listener ") {
                let next = index + 1 < lines.count ? lines[index + 1] : ""
                #expect(next == (line.hasPrefix("#") ? "#" : "") + "use_username_as_clientid true", "\(line)")
            }

            try await DeploySite.with(packaged: true) { site in
                // No default listener opens beside the two.
                let opened = site.log.split(separator: "\n").filter { $0.contains("listen socket on port") }
                    .compactMap { $0.split(separator: " ").last.flatMap { Int($0.dropLast()) } }
                #expect(opened.sorted() == site.listeners.map(\.port).sorted(), "\(site.log)")

                let anonymous = try site.client("anonymous", user: nil, retry: 60)
                try await eventually("the broker to refuse the anonymous client") { site.refusals == 1 }
                let anonymousArcade = try site.client("anonymous-arcade", user: nil, port: site.arcadePort, tls: site.tls, retry: 60)
                try await eventually("the broker to refuse the anonymous client on the arcade listener") { site.refusals == 2 }
                _ = try site.client("wrong-password", user: "m1", password: "not-the-password", retry: 60)
                try await eventually("the broker to refuse a wrong password") { site.refusals == 3 }
                #expect(anonymous.client.connectCount == 0 && anonymousArcade.client.connectCount == 0)

                let offline = Array("offline".utf8)
                let gateway = try site.client(
                    "claw-gateway-arcade-1", user: "gateway", will: MQTTWill(topic: "claw/gateway/state", payload: offline),
                    subscribe: ["claw/#"])
                let m2 = try site.client("m2-pc", user: "m2", port: site.arcadePort, tls: site.tls)
                let m1 = try site.client("m1-pc", user: "m1", port: site.arcadePort, tls: site.tls)
                try await eventually("the gateway, m1 and m2 to log in") { gateway.isConnected && m1.isConnected && m2.isConnected }
                try gateway.publish("claw/gateway/state", "online", retain: true)
                try await gateway.waitFor("claw/gateway/state", "online")

                // m1 forges m2's result, m2's state and the gateway's; the
                // barrier is m1's own result on the same connection.
                try m1.publish("claw/m2/result", #"{"command":4,"data":"true","serial":1}"#)
                try m1.publish("claw/m2/state", "offline", retain: true)
                try m1.publish("claw/gateway/state", "offline", retain: true)
                try m1.publish("claw/m1/result", "result of m1")
                try await gateway.waitFor("claw/m1/result", "result of m1")
                #expect(gateway.payloads(on: "claw/m2/result").isEmpty)
                #expect(gateway.payloads(on: "claw/m2/state").isEmpty)

                // m1's login under the gateway's client id, on each listener,
                // takes nothing over: no will, no disconnect. (m1's PC goes
                // first: one connection per login, the impostor would replace it.)
                try await site.disconnect(m1)
                for listener in site.listeners {
                    let impostor = try site.client("claw-gateway-arcade-1", user: "m1", port: listener.port, tls: listener.tls)
                    try await eventually("m1 as the gateway's client id on the \(listener) listener to log in") { impostor.isConnected }
                    try await site.disconnect(impostor)
                }
                try gateway.publish("claw/gateway/state", "still online", retain: true)
                try await gateway.waitFor("claw/gateway/state", "still online")
                #expect(gateway.payloads(on: "claw/gateway/state") == ["online", "still online"])
                #expect(gateway.isConnected && gateway.client.connectCount == 1)
            }
        }

        @Test("the starter config, as installed with the package's secrets, plays a first game with the simulator, camera included")
        func firstGame() async throws {
            try await DeploySite.with(packaged: true) { site in
                let httpPort = try FreePort.next()
                let config = try site.starterConfig(httpPort: httpPort)
                // Valid with the two secrets the postinst makes; no admin token needed.
                let checked = try GatewayBinary.run(["check-config", "--config", config.file.path], environment: config.environment)
                try #require(checked.status == 0, "\(checked.error)")
                #expect(checked.output.contains("machines: 2"), "\(checked.output)")

                let observer = try site.client("observer", user: "observer", subscribe: ["claw/#"])
                _ = try site.spawn(["run", "--config", config.file.path], environment: config.environment, log: "gateway.log")
                try await observer.waitFor("claw/gateway/state", "online")
                _ = try site.spawn(
                    ["simulate", "--config", config.file.path, "--passwords", site.file("passwords").path, "--machine", "m1",
                     "--ack-delay", "0s", "--result-delay", "0s"],
                    environment: config.environment, log: "simulate.log")
                try await observer.waitFor("claw/m1/state", "online")
                // The gateway takes m1 as online once its snapshot says so.
                try await eventually("the gateway to publish m1 online") {
                    observer.payloads(on: "claw/m1/queue").contains { $0.contains(#""online":true"#) }
                }

                func notify(_ words: [String]) throws -> String {
                    let sent = try GatewayBinary.run(
                        ["notify", "--config", config.file.path, "--from", "alice", "--to", "m1"] + words, environment: config.environment)
                    return sent.output + sent.error
                }
                #expect(try notify(["join", "Alice"]).contains(#""result":"offered""#))
                #expect(try notify(["accept"]).contains(#""result":"accepted""#))
                for words in [["move", "left"], ["camera", "2"], ["grab"]] {
                    let answer = try notify(words)
                    #expect(answer.contains(#""result":"forwarded""#), "\(words): \(answer)")
                }
                try await eventually("the game to end with the simulated PC's result") {
                    observer.payloads(on: "claw/m1/events").contains {
                        $0.contains(#""type":"game_ended""#) && ($0.contains(#""outcome":"won""#) || $0.contains(#""outcome":"lost""#))
                    }
                }
                #expect(observer.payloads(on: "claw/m1/camera").count == 1, "command 3 reached m1's camera topic")
                #expect(site.refusals == 0)
            }
        }

        @Test("with-secrets reads the env file as systemd does: values as written, nothing in them run, a bad line refused by number")
        func withSecrets() throws {
            let folder = try TemporaryDirectory.make(prefix: "with-secrets")
            defer { try? FileManager.default.removeItem(at: folder) }
            let script = DeploySite.deployFolder.appendingPathComponent("with-secrets").path
            let ran = folder.appendingPathComponent("ran").path
            let envfile = folder.appendingPathComponent("env")
            try """
                # a comment
                ; another
                PLAIN=value
                SUBST=$(touch \(ran))
                TICKS=`touch \(ran)`
                VARIABLE=$HOME
                QUOTED="two words"
                 SPACED = x\u{20}
                EQUALS=a=b
                WINDOWS=crlf\r
                LAST=no newline
                """.write(to: envfile, atomically: true, encoding: .utf8)
            let output = folder.appendingPathComponent("out")
            let status = try ChildProcess(
                "/bin/sh", [script, "--env", envfile.path, "env"], output: output, environment: ["PATH": "/usr/bin:/bin"]
            ).wait()
            #expect(status == 0)
            let variables = Set(try String(contentsOf: output, encoding: .utf8).split(separator: "\n").map(String.init))
            for expected in [
                "PLAIN=value", "SUBST=$(touch \(ran))", "TICKS=`touch \(ran)`", "VARIABLE=$HOME", "QUOTED=two words", "SPACED=x",
                "EQUALS=a=b", "WINDOWS=crlf", "LAST=no newline",
            ] {
                #expect(variables.contains(expected), "\(expected)")
            }
            #expect(!FileManager.default.fileExists(atPath: ran), "a value was run as shell")

            for (index, (text, line)) in [("A=1\nrm -rf \(folder.path)/nothing\n", 2), ("1A=secret-value\n", 1), ("A-B=secret-value\n", 1)]
                .enumerated()
            {
                try text.write(to: envfile, atomically: true, encoding: .utf8)
                let log = folder.appendingPathComponent("refused-\(index)")
                let refused = try ChildProcess(
                    "/bin/sh", [script, "--env", envfile.path, "true"], output: log, environment: ["PATH": "/usr/bin:/bin"]
                ).wait()
                let said = try String(contentsOf: log, encoding: .utf8)
                #expect(refused == 78, "\(text)")
                #expect(said.contains("line \(line)"), "\(said)")
                #expect(!said.contains("rm -rf") && !said.contains("secret-value"), "the refusal quotes the line: \(said)")
            }
            let missing = try ChildProcess(
                "/bin/sh", [script, "--env", folder.appendingPathComponent("none").path, "true"], output: folder.appendingPathComponent("missing"),
                environment: ["PATH": "/usr/bin:/bin"]
            ).wait()
            #expect(missing == 78)
        }
    }
}
