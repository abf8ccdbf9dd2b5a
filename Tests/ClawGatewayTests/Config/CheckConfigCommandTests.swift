import Foundation
import Testing

@Suite("claw-gateway check-config")
struct CheckConfigCommandTests {
    @Test("a valid file prints a summary and exits 0")
    func valid() throws {
        let folder = try TemporaryDirectory.make(prefix: "check")
        let file = folder.appendingPathComponent("gateway.yaml")
        try ConfigLoaderTests.minimal.write(to: file, atomically: true, encoding: .utf8)
        let result = try GatewayBinary.run(["check-config", "--config", file.path])
        #expect(result.status == 0, "\(result.error)")
        #expect(result.output.contains("OK"))
        #expect(result.output.contains("machines: 1"))
        #expect(result.output.contains("broker mqtt://127.0.0.1:1883"))
    }

    /// A newcomer's trip: check-config said nothing of credits or evidence when they were on.
    @Test("the summary says what credits, evidence, prizes and continue will do")
    func summaryOfTheBusiness() throws {
        let folder = try TemporaryDirectory.make(prefix: "check")
        let file = folder.appendingPathComponent("gateway.yaml")
        try (ConfigLoaderTests.minimal + """

            http: { read_token: 0123456789abcdef }
            credits: { price: 2, topup_secret: 0123456789abcdef, max_topup: 500 }
            evidence: { dir: clips, keep: 7d }
            prizes: { low_at: 4 }
            game: { continue: 15s, max_continues: 2 }
            """).write(to: file, atomically: true, encoding: .utf8)
        let result = try GatewayBinary.run(["check-config", "--config", file.path])
        #expect(result.status == 0, "\(result.error)")
        for line in [
            "reads need a read token", "continue 15s (at most 2 in a row)",
            "credits: 2 a game unless a machine says otherwise, wallets kept here", "at most 500 a top-up",
            "evidence: a clip of each camera per game into", "kept 168h", "prizes: low stock at 4", ", price 2",
        ] {
            #expect(result.output.contains(line), "\(line) in \(result.output)")
        }
        let plain = try GatewayBinary.run(["check-config", "--config", { () throws -> String in
            let bare = folder.appendingPathComponent("bare.yaml")
            try ConfigLoaderTests.minimal.write(to: bare, atomically: true, encoding: .utf8)
            return bare.path
        }()])
        #expect(plain.output.contains("reads open") && plain.output.contains("continue off") && !plain.output.contains("credits:"))
    }

    @Test("an invalid file prints every problem and exits 78")
    func invalid() throws {
        let folder = try TemporaryDirectory.make(prefix: "check")
        let file = folder.appendingPathComponent("gateway.yaml")
        try "gateway: { idd: x }\nmqtt: { url: \"http://x\" }\nmachines: [{ id: gateway }]\n"
            .write(to: file, atomically: true, encoding: .utf8)
        let result = try GatewayBinary.run(["check-config", "--config", file.path])
        #expect(result.status == 78)
        #expect(result.error.contains("gateway.idd: unknown key"))
        #expect(result.error.contains("mqtt.url: scheme \"http\" is not supported"))
        #expect(result.error.contains("machines[0].id: \"gateway\" is reserved"))
    }

    @Test("a YAML syntax error names line and column and exits 78")
    func syntax() throws {
        let folder = try TemporaryDirectory.make(prefix: "check")
        let file = folder.appendingPathComponent("gateway.yaml")
        try "gateway:\n  id: [a\n".write(to: file, atomically: true, encoding: .utf8)
        let result = try GatewayBinary.run(["check-config", "--config", file.path])
        #expect(result.status == 78)
        #expect(result.error.contains("gateway.yaml:3:"))
        #expect(result.error.contains("YAML syntax error"))
    }

    @Test("a missing file exits 78")
    func missing() throws {
        let result = try GatewayBinary.run(["check-config", "--config", "/nonexistent/gateway.yaml"])
        #expect(result.status == 78)
        #expect(result.error.contains("cannot be read"))
    }

    /// A newcomer's trip: check-config knew only gateway.yaml and called every key of a router's or recorder's file unknown.
    @Test("the router's and the recorder's sample configs pass as what they are, from their sections")
    func roles() throws {
        let deploy = NATSCluster.deployDirectory
        let secrets = [
            "CLAW_READ_TOKEN": "read-token-0123456789", "CHAIN_PASSWORD_ROUTER": "r", "CHAIN_PASSWORD_RECORDER": "r",
            "NIM_APP_SECRET": "s", "CHAIN_DB_PASSWORD": "p", "CLAW_LEDGER_KEY": "ledger-key-0123456789abcdef",
        ]
        let router = try GatewayBinary.run(["check-config", "--config", deploy.appendingPathComponent("chain.yaml").path], environment: secrets)
        #expect(router.status == 0, "\(router.error)")
        #expect(router.output.contains("a router's chain.yaml") && router.output.contains("client id claw-router-"))
        let recorder = try GatewayBinary.run(["check-config", "--config", deploy.appendingPathComponent("recorder.yaml").path], environment: secrets)
        #expect(recorder.status == 0, "\(recorder.error)")
        #expect(recorder.output.contains("a recorder's recorder.yaml") && recorder.output.contains("database postgres://recorder@db.example.com"))
        // A recorder's file checked as a gateway's on purpose: refused, saying so.
        let forced = try GatewayBinary.run(
            ["check-config", "--role", "gateway", "--config", deploy.appendingPathComponent("recorder.yaml").path], environment: secrets)
        #expect(forced.status == 78 && forced.error.contains("recorder: unknown key") && forced.error.contains("checked as a gateway's config"))
        // And its problems named by their keys, as for a gateway.
        let folder = try TemporaryDirectory.make(prefix: "check")
        let file = folder.appendingPathComponent("recorder.yaml")
        try "recorder: { databse: x }\nbus: { urls: [mqtt://x:1] }\n".write(to: file, atomically: true, encoding: .utf8)
        let bad = try GatewayBinary.run(["check-config", "--config", file.path])
        #expect(bad.status == 78 && bad.error.contains("recorder.databse") && bad.error.contains("checked as a recorder's config"), "\(bad.error)")
    }

    @Test("--version prints the version")
    func version() throws {
        let result = try GatewayBinary.run(["--version"])
        #expect(result.status == 0)
        #expect(result.output.trimmingCharacters(in: .whitespacesAndNewlines) == "0.1.0")
    }
}
