import Foundation
import Synchronization
import Testing

/// A real mosquitto broker for one test: its own config on a free loopback
/// port, started as a child process and stopped by PID.
///
/// There is no fallback: if mosquitto is not installed the test fails and
/// says how to install it.
final class MosquittoBroker {
    let port: Int
    let directory: URL
    private let configFile: URL
    private var process: ChildProcess?

    /// - Parameter config: lines added to the generated config after the
    ///   listener (TLS, password and ACL files, …); with none, anonymous
    ///   clients are allowed.
    init(port: Int? = nil, config: String? = nil) throws {
        self.port = try port ?? FreePort.next()
        directory = try TemporaryDirectory.make(prefix: "mosquitto")
        configFile = directory.appendingPathComponent("mosquitto.conf")
        let settings = config ?? "allow_anonymous true"
        let text = """
            user root
            per_listener_settings false
            persistence false
            log_dest file \(directory.appendingPathComponent("mosquitto.log").path)
            log_type all
            listener \(self.port) 127.0.0.1
            \(settings)

            """
        try text.write(to: configFile, atomically: true, encoding: .utf8)
    }

    /// Starts a broker with `config` and waits until it accepts connections.
    static func start(config: String? = nil) throws -> MosquittoBroker {
        let broker = try MosquittoBroker(config: config)
        try broker.start()
        return broker
    }

    var url: String { "mqtt://127.0.0.1:\(port)" }
    var pid: Int32? { process?.pid }

    func start() throws {
        precondition(process == nil, "broker already running")
        process = try ChildProcess(try Self.executable().path, ["-c", configFile.path])
        guard FreePort.waitUntilListening(port, timeout: 10) else {
            stop()
            throw BrokerError("mosquitto did not start listening on port \(port). Its log:\n\(log)")
        }
    }

    /// SIGTERM by PID and wait for it to exit.
    func stop() {
        signal(SIGTERM)
    }

    /// SIGKILL by PID: the broker vanishes without a goodbye.
    func kill() {
        signal(SIGKILL)
    }

    func restart() throws {
        stop()
        try start()
    }

    private func signal(_ number: Int32) {
        guard let process else { return }
        self.process = nil
        process.signal(number)
        process.wait()
    }

    var log: String {
        (try? String(contentsOf: directory.appendingPathComponent("mosquitto.log"), encoding: .utf8)) ?? ""
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(at: directory)
    }

    static func executable() throws -> URL {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let candidates = path.split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/local/sbin", "/sbin"]
        for folder in candidates {
            let file = URL(fileURLWithPath: folder).appendingPathComponent("mosquitto")
            if FileManager.default.isExecutableFile(atPath: file.path) { return file }
        }
        throw BrokerError(
            "mosquitto is not installed, and these tests need a real broker. Run ./scripts/test (it installs it) or: sudo apt-get install -y mosquitto mosquitto-clients libmosquitto-dev"
        )
    }
}

struct BrokerError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

enum FreePort {
    /// A TCP port on 127.0.0.1 that nothing listens on right now, below the
    /// kernel's ephemeral range. Port 0 would take one from that range, which
    /// every outgoing connection of every test draws from too: a gateway,
    /// broker or node restarted on its port could find it taken, for the
    /// moment of its restart, as the local port of someone's connection
    /// ("Address already in use"). The chaos scripts, which run beside the
    /// tests, pick from the 12000 ports just under the range; the tests from
    /// the 12000 under those. Each port is handed out once per test process.
    static func next() throws -> Int {
        let low = ephemeralLow
        let range = max(1024, low - 24000)..<max(1025, low - 12000)
        for _ in 0..<2000 {
            let port = Int.random(in: range)
            guard handedOut.withLock({ $0.insert(port).inserted }) else { continue }
            if canBind(port) { return port }
        }
        throw BrokerError("could not find a free port in \(range)")
    }

    private static let handedOut = Mutex<Set<Int>>([])

    /// The first port of the kernel's ephemeral range.
    private static let ephemeralLow: Int = {
        let text = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
        return text.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32768
    }()

    private static func canBind(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    static func isListening(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    static func waitUntilListening(_ port: Int, timeout: Double) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if isListening(port) { return true }
            usleep(20_000)
        }
        return false
    }
}

enum TemporaryDirectory {
    static func make(prefix: String) throws -> URL {
        let url = FileManager.default.temporaryDirectory
            .appendingPathComponent("claw-\(prefix)-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }
}
