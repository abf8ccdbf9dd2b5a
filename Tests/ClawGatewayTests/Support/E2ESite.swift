import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// A whole site on this machine: a mosquitto, the fake NetEase API, the
/// `claw-gateway run` process and, optionally, `claw-gateway simulate` for
/// the machine PCs. Everything talks over real sockets.
final class E2ESite {
    static let webhookSecret = "test-webhook-secret"

    let broker: MosquittoBroker
    let netease: FakeNetEaseAPI
    let site: TestSite
    private(set) var gateway: ChildProcess?
    private(set) var simulator: ChildProcess?
    private var simulatorArguments: [String] = []
    /// False when the fake API was handed in, shared with other sites: its owner stops it.
    private let ownsNetEase: Bool
    /// A command the gateway is started through (its path and arguments follow), e.g. into a mount namespace.
    private let launcher: [String]

    var base: String { "http://127.0.0.1:\(site.httpPort)" }
    /// `http.read_token`, which the site's own reads send; `credits:` and `evidence:` need one.
    let readToken: String?

    init(
        game: String = "", simulate: Bool = true, adminToken: String? = nil, readToken: String? = nil, logLevel: String = "debug", http: String = "",
        keepalive: Int = 30, gateway: String = "", simulatorArguments: [String] = ["--ack-delay", "0s", "--result-delay", "100ms", "--win-rate", "1"],
        machines: [String] = ["m1", "m2"], extra: String = "", netease: FakeNetEaseAPI? = nil, cameraBase: String = "rtmp://example",
        machineExtra: String = "", launcher: (TestSite) -> [String] = { _ in [] }
    ) async throws {
        broker = try MosquittoBroker.start()
        self.readToken = readToken
        ownsNetEase = netease == nil
        if let netease {
            self.netease = netease
        } else {
            self.netease = try await FakeNetEaseAPI()
        }
        let netease = self.netease
        let site = try TestSite(
            broker: broker, machines: machines, game: game,
            extra: """
                \(netease.imSection(genericSecret: Self.webhookSecret))
                \(extra)

                """, adminToken: adminToken, logLevel: logLevel, http: (readToken.map { "read_token: \($0)\n" } ?? "") + http, keepalive: keepalive,
            gateway: gateway, cameraBase: cameraBase, machineExtra: machineExtra)
        self.site = site
        self.launcher = launcher(site)
        try startGateway()
        self.simulatorArguments = simulatorArguments
        if simulate {
            try restartSimulator()
            try await eventually("every simulated machine to be online") {
                let list = try? await HTTP.get("\(base)/v1/machines", bearer: readToken)
                return (list?.body.components(separatedBy: #""online":true"#).count ?? 0) == machines.count + 1
            }
        }
    }

    /// Runs `body` on a new site and stops every process afterwards, also when `body` throws.
    static func with(
        game: String = "", simulate: Bool = true, adminToken: String? = nil, readToken: String? = nil, logLevel: String = "debug",
        http: String = "", keepalive: Int = 30, gateway: String = "", extra: String = "", _ body: (E2ESite) async throws -> Void
    ) async throws {
        let site = try await E2ESite(
            game: game, simulate: simulate, adminToken: adminToken, readToken: readToken, logLevel: logLevel, http: http,
            keepalive: keepalive, gateway: gateway, extra: extra)
        do {
            try await body(site)
        } catch {
            await site.stop()
            throw error
        }
        await site.stop()
    }

    func restartSimulator() throws {
        simulator = try GatewayBinary.start(
            ["simulate", "--config", site.config.path] + simulatorArguments,
            log: site.directory.appendingPathComponent("simulate.log"))
    }

    func startGateway() throws {
        guard let program = launcher.first else {
            gateway = try GatewayBinary.start(["run", "--config", site.config.path], log: site.log)
            return
        }
        gateway = try ChildProcess(
            program, Array(launcher.dropFirst()) + [try GatewayBinary.url().path, "run", "--config", site.config.path], output: site.log)
    }

    func waitReady() async throws {
        try await eventually("the gateway to be ready") { (try? await HTTP.get("\(base)/readyz"))?.status == 200 }
    }

    /// SIGKILL: no clean shutdown, no offline published by the gateway itself.
    func killGateway() {
        gateway?.signal(SIGKILL)
        _ = gateway?.wait()
        gateway = nil
    }

    /// Starts the gateway as systemd starts it through `claw-gateway.socket`:
    /// `socket` (held by the test, as systemd holds it) is descriptor 3, and
    /// LISTEN_FDS and LISTEN_PID (set by a shell that then becomes the
    /// gateway, so that the pid is the gateway's) say so.
    func startGateway(passing socket: CInt) throws {
        var environment = ProcessInfo.processInfo.environment
        environment["LISTEN_FDS"] = "1"
        gateway = try ChildProcess(
            "/bin/sh", ["-c", #"LISTEN_PID=$$; export LISTEN_PID; exec "$0" "$@""#, try GatewayBinary.url().path, "run", "--config", site.config.path],
            output: site.log, environment: environment, passing: socket)
    }

    /// SIGTERM, as systemd stops the service, and the exit waited for.
    func stopGateway() async {
        gateway?.signal(SIGTERM)
        _ = await gateway?.wait(timeout: 10)
        gateway = nil
    }

    func stop() async {
        for process in [simulator, gateway].compactMap({ $0 }) {
            process.signal(SIGTERM)
            if await process.wait(timeout: 10) == nil {
                process.signal(SIGKILL)
                _ = process.wait()
            }
        }
        if ownsNetEase { await netease.stop() }
        broker.stop()
    }

    // MARK: Players

    /// A NetEase message copy, signed the way NetEase signs it.
    @discardableResult
    func copy(
        from player: String, to account: String = "claw_m1", _ attach: String, messageID: String = UUID().uuidString,
        curTime: Date = Date(), tamper: (inout [(String, String)], inout [UInt8]) -> Void = { _, _ in }
    ) async throws -> HTTP.Answer {
        var body = NetEaseCopyBody.encode(from: player, to: account, attach: attach, messageID: messageID)
        var headers = NetEaseCopyBody.headers(body: body, settings: Self.neteaseSettings, now: curTime)
        tamper(&headers, &body)
        return try await postCopy(body: body, headers: headers)
    }

    func postCopy(body: [UInt8], headers: [(String, String)]) async throws -> HTTP.Answer {
        try await HTTP.request(.POST, "\(base)/im/netease", headers: headers, body: body)
    }

    static func signedCopyHeaders(_ body: [UInt8]) -> [(String, String)] {
        NetEaseCopyBody.headers(body: body, settings: neteaseSettings, now: Date())
    }

    static var neteaseSettings: NetEaseSettings {
        NetEaseSettings(
            appKey: FakeNetEaseAPI.appKey, appSecret: FakeNetEaseAPI.appSecret, apiBase: "", callbackPath: "/im/netease",
            maxClockSkew: .seconds(300), replyTimeout: .seconds(1), replyConcurrency: 1)
    }

    /// A generic webhook notification, signed with the site's secret.
    @discardableResult
    func generic(
        body: [UInt8], timestamp: String = String(Int64(Date().timeIntervalSince1970)), secret: String = E2ESite.webhookSecret,
        headers extra: [(String, String)]? = nil
    ) async throws -> HTTP.Answer {
        try await Self.postGeneric(base: base, body: body, timestamp: timestamp, secret: secret, headers: extra)
    }

    /// A signed generic notification to the gateway at `base`; usable from any task.
    static func postGeneric(
        base: String, body: [UInt8], timestamp: String = String(Int64(Date().timeIntervalSince1970)),
        secret: String = E2ESite.webhookSecret, headers extra: [(String, String)]? = nil
    ) async throws -> HTTP.Answer {
        let signature = Signatures.genericSignature(secret: secret, timestamp: timestamp, body: body)
        let headers = extra ?? [
            ("Content-Type", "application/json"), (GenericEnvelope.timestampHeader, timestamp),
            (GenericEnvelope.signatureHeader, signature),
        ]
        return try await HTTP.request(.POST, "\(base)/v1/notifications", headers: headers, body: body)
    }

    @discardableResult
    func generic(from player: String, to machine: String = "m1", _ attach: String) async throws -> HTTP.Answer {
        try await generic(body: GenericEnvelope.encode(from: player, to: machine, attach: attach))
    }

    /// The session of the machine's current turn, as the read API shows it.
    func currentSession(of machine: String = "m1") async throws -> String {
        let player = try await HTTP.get("\(base)/v1/machines/\(machine)", bearer: readToken).json["player"] as? [String: Any]
        return try #require(player?["session"] as? String, "\(machine) has no current turn")
    }

    /// What the fake NetEase API delivered to `player`, decoded.
    func told(_ player: String) -> [WireMessage] {
        netease.attachments(to: player).compactMap { try? WireMessage.decode(Array($0.utf8)) }
    }

    /// The 9s `player` was sent that answer no request: their turn changed without them.
    func notices(to player: String) -> [WireMessage] {
        told(player).filter { $0.code == .error && $0.serial == nil }
    }

    /// The session of the last turn offer the fake NetEase API delivered to `player`.
    func offeredSession(to player: String) async throws -> String {
        var session: String?
        try await eventually("a turn offer to \(player)") {
            session = netease.attachments(to: player).compactMap { try? WireMessage.decode(Array($0.utf8)) }
                .last { $0.code == .turnOffer }?.data
            return session != nil
        }
        return session ?? ""
    }
}
