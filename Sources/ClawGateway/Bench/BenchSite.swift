import Foundation
import Logging

/// The processes a benchmark run needs on loopback: a mosquitto, the gateway
/// (this same executable with `run`), optionally the simulator; all killed at
/// the end.
final class BenchSite {
    let directory: URL
    let brokerPort: Int
    let httpPort: Int
    private(set) var processes: [Process] = []
    let executable: String

    static let appKey = "bench-key"
    static let appSecret = "bench-secret"

    init() throws {
        directory = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("claw-bench-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        brokerPort = try Self.freePort()
        httpPort = try Self.freePort()
        executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().path
    }

    var base: String { "http://127.0.0.1:\(httpPort)" }
    var configPath: String { directory.appendingPathComponent("gateway.yaml").path }

    func startBroker() throws {
        let conf = directory.appendingPathComponent("mosquitto.conf")
        var text = "listener \(brokerPort) 127.0.0.1\nallow_anonymous true\npersistence false\nset_tcp_nodelay true\nmax_queued_messages 1000000\n"
        if getuid() == 0 { text = "user root\n" + text }
        try text.write(to: conf, atomically: true, encoding: .utf8)
        let paths = ["/usr/sbin/mosquitto", "/usr/bin/mosquitto", "/usr/local/sbin/mosquitto"]
        guard let mosquitto = paths.first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw BenchError("mosquitto is not installed: apt-get install -y mosquitto")
        }
        try spawn(mosquitto, ["-c", conf.path], log: "mosquitto.log")
        try waitForPort(brokerPort)
    }

    /// Writes a gateway.yaml with `machines` machines `m0001`…, fast limits, both IM providers.
    func writeConfig(machines: Int, maxQueue: Int = 200) throws {
        var yaml = """
            gateway:
              id: bench
              log_level: error
            mqtt:
              url: mqtt://127.0.0.1:\(brokerPort)
            http:
              listen: 127.0.0.1:\(httpPort)
            im:
              netease:
                app_key: \(Self.appKey)
                app_secret: \(Self.appSecret)
                api_base: http://127.0.0.1:9
                reply_timeout: 1s
              generic:
                secret: bench-webhook-secret
            game:
              accept_timeout: 1h
              play_timeout: 1h
              result_timeout: 1h
              max_commands_per_second: 10000
              max_queue: \(maxQueue)
            storage:
              path: \(directory.appendingPathComponent("gateway.sqlite").path)
            machines:

            """
        for index in 1...machines {
            yaml += "  - { id: \(Self.machineID(index)), im_account: acc_\(Self.machineID(index)), cameras: [{ id: \"1\" }] }\n"
        }
        try yaml.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    static func machineID(_ index: Int) -> String {
        "m" + String(repeating: "0", count: max(0, 4 - String(index).count)) + String(index)
    }

    private(set) var gateway: Process?

    @discardableResult
    func startGateway() throws -> Process {
        let process = try spawn(executable, ["run", "--config", configPath], log: "gateway.log")
        gateway = process
        return process
    }

    func startSimulator() throws {
        try spawn(executable, ["simulate", "--config", configPath, "--ack-delay", "0s", "--result-delay", "1s"], log: "simulate.log")
    }

    @discardableResult
    func spawn(_ path: String, _ arguments: [String], log: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        let logURL = directory.appendingPathComponent(log)
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        let handle = try FileHandle(forWritingTo: logURL)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        processes.append(process)
        return process
    }

    /// The last lines a process of the site logged, to say why a run failed.
    func logTail(_ log: String, lines: Int = 20) -> String {
        let text = (try? String(contentsOf: directory.appendingPathComponent(log), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").suffix(lines).joined(separator: "\n")
    }

    func stop() {
        for process in processes.reversed() where process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        processes.removeAll()
        try? FileManager.default.removeItem(at: directory)
    }

    /// Peak resident set size of a process, from /proc.
    static func peakRSS(pid: Int32) -> Int? {
        memory(pid: pid, field: "VmHWM:")
    }

    /// Current resident set size of a process, from /proc.
    static func rss(pid: Int32) -> Int? {
        memory(pid: pid, field: "VmRSS:")
    }

    private static func memory(pid: Int32, field: String) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix(field) {
            return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]).map { $0 * 1024 }
        }
        return nil
    }

    func waitForPort(_ port: Int, timeout: Duration = .seconds(10)) throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if Self.canConnect(port) { return }
            usleep(5000)
        }
        throw BenchError("nothing listens on port \(port) after \(timeout)")
    }

    static func canConnect(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound else { throw BenchError("no free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
