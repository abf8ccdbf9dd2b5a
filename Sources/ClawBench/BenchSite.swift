import AsyncHTTPClient
import Foundation
import NIOCore
import Protocol
import Synchronization

/// The processes one benchmark needs on loopback: a mosquitto on a free
/// port, `claw-gateway run` on a config written for the scenario, and
/// optionally `claw-gateway simulate` for the machine PCs. Everything is
/// stopped by PID at the end, and the work folder removed.
final class BenchSite: Sendable {
    let gateway: String
    let bench: Workbench
    let brokerPort: Int
    let httpPort: Int
    static let secret = "bench-webhook-secret"
    private let gateway_ = Mutex<pid_t?>(nil)

    var gatewayPID: pid_t? { gateway_.withLock { $0 } }
    var directory: URL { bench.directory }

    init(gateway: String) throws {
        self.gateway = gateway
        bench = try Workbench(prefix: "claw-bench")
        brokerPort = try Loopback.freePort()
        httpPort = try Loopback.freePort()
    }

    var base: String { "http://127.0.0.1:\(httpPort)" }
    var configPath: String { directory.appendingPathComponent("gateway.yaml").path }

    /// mosquitto with no persistence, logging to a file of ours.
    func startBroker() throws {
        try bench.startBroker(port: brokerPort)
    }

    /// A gateway.yaml with `machines` machines `m0001`…, the generic
    /// webhook (replies logged, not sent) and the default game timers.
    func writeConfig(machines: Int, maxQueue: Int = 200, commandsPerSecond: Int = 20) throws {
        let game = """
            game:
              max_queue: \(maxQueue)
              max_commands_per_second: \(commandsPerSecond)
            """
        let yaml = Self.siteYAML(
            id: "bench", brokerPort: brokerPort, httpPort: httpPort, storage: directory.appendingPathComponent("gateway.sqlite").path,
            extra: game, machines: machines)
        try yaml.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    static func machine(_ index: Int) -> String {
        "m" + String(repeating: "0", count: max(0, 4 - String(index).count)) + String(index)
    }

    func startGateway() throws {
        let pid = try spawn("gateway", gateway, ["run", "--config", configPath])
        gateway_.withLock { $0 = pid }
    }

    /// PCs that ack at once and report a result a second after each grab.
    func startSimulator() throws {
        try spawn("simulate", gateway, ["simulate", "--config", configPath, "--ack-delay", "0s", "--result-delay", "1s"])
    }

    @discardableResult
    private func spawn(_ name: String, _ path: String, _ arguments: [String]) throws -> pid_t {
        try bench.spawn(name, [path] + arguments)
    }

    /// The last lines a process of the site logged, to say why a run failed.
    func logTail(_ name: String, lines: Int = 20) -> String { bench.logTail(name, lines: lines) }

    /// SIGTERM to each, newest first; SIGKILL after 10 s.
    func stop() { bench.stop() }

    /// Resident set size of a process from /proc, in bytes: `VmRSS` or the peak `VmHWM`.
    static func memory(pid: pid_t, peak: Bool) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        let field = peak ? "VmHWM:" : "VmRSS:"
        for line in status.split(separator: "\n") where line.hasPrefix(field) {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]).map { $0 * 1024 }
        }
        return nil
    }

    // MARK: HTTP

    /// A signed generic notification (SPEC §5) to this gateway.
    func notification(from player: String, to machine: String, _ attach: String) -> HTTPClientRequest {
        Self.notification(base: base, secret: Self.secret, from: player, to: machine, attach)
    }

    /// A signed generic notification (SPEC §5) to the gateway or router at `base`.
    static func notification(base: String, secret: String, from player: String, to machine: String, _ attach: String) -> HTTPClientRequest {
        let body = JSONObjectWriter.object(["from": player, "to": machine, "attach": attach])
        let timestamp = String(Int64(Date().timeIntervalSince1970))
        var request = HTTPClientRequest(url: base + "/v1/notifications")
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "X-Claw-Timestamp", value: timestamp)
        request.headers.add(name: "X-Claw-Signature", value: Signatures.genericSignature(secret: secret, timestamp: timestamp, body: body))
        request.body = .bytes(ByteBuffer(bytes: body))
        return request
    }

    /// The head of a site's gateway.yaml, up to `machines:`, and the
    /// machines `m0001`… with one camera each.
    static func siteYAML(id: String, brokerPort: Int, httpPort: Int, storage: String, extra: String, machines: Int) -> String {
        var yaml = """
            gateway:
              id: \(id)
              log_level: warning
            mqtt:
              url: mqtt://127.0.0.1:\(brokerPort)
            http:
              listen: 127.0.0.1:\(httpPort)
            im:
              generic:
                secret: \(secret)
            storage:
              path: \(storage)
            \(extra)
            machines:

            """
        for index in 1...machines {
            yaml += "  - { id: \(machine(index)), cameras: [{ id: \"1\" }] }\n"
        }
        return yaml
    }

    /// The answer's fields, as text.
    static func fields(_ body: ByteBuffer) -> [String: String] {
        var fields: [String: String] = [:]
        for field in (try? JSONObjectReader.fields(in: body.readableBytesView)) ?? [] {
            switch field.value {
            case .string(let text): fields[field.key] = text
            case .number(let number): fields[field.key] = number.text
            default: break
            }
        }
        return fields
    }

    func waitReady(_ http: HTTPClient, pollEvery: Duration = .milliseconds(20)) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let response = try? await http.execute(HTTPClientRequest(url: base + "/readyz"), timeout: .seconds(1)),
                response.status == .ok
            {
                return
            }
            try await Task.sleep(for: pollEvery)
        }
        throw BenchError("the gateway did not become ready; its log:\n" + logTail("gateway"))
    }

    /// Until the simulated PCs have every machine online.
    func waitOnline(_ http: HTTPClient, count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            let response = try await http.execute(HTTPClientRequest(url: base + "/v1/machines"), timeout: .seconds(10))
            let body = String(buffer: try await response.body.collect(upTo: 1 << 24))
            if body.components(separatedBy: #""online":true"#).count - 1 >= count { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw BenchError("the simulated machines did not come online; the simulator's log:\n" + logTail("simulate"))
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
