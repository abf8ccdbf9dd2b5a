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

    @Test("--version prints the version")
    func version() throws {
        let result = try GatewayBinary.run(["--version"])
        #expect(result.status == 0)
        #expect(result.output.trimmingCharacters(in: .whitespacesAndNewlines) == "0.1.0")
    }
}
