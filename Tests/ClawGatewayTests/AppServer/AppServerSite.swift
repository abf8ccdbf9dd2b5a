import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// A site whose gateway serves the demo's app server (SPEC §8): a mosquitto,
/// the fake NetEase API, `claw-gateway run` and `claw-gateway simulate`.
/// Machines m1 (chatroom 3001, cameras with http and hls on the first) and
/// m2 (chatroom 3002) are rooms; m3 has no chatroom and is not listed.
final class AppServerSite {
    static let adminToken = "app-server-admin-token-0123456789"
    static let rooms: [String: Int64] = ["m1": 3001, "m2": 3002]

    let broker: MosquittoBroker
    let netease: FakeNetEaseAPI
    let directory: URL
    let httpPort: Int
    private(set) var gateway: ChildProcess?
    private(set) var simulator: ChildProcess?

    var base: String { "http://127.0.0.1:\(httpPort)" }
    var config: URL { directory.appendingPathComponent("gateway.yaml") }
    var log: URL { directory.appendingPathComponent("gateway.log") }
    var logText: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

    /// - Parameter onlineCounts: the chatrooms' online counts NetEase gives from the start.
    /// - Parameter extra: top-level sections appended to the file (`credits:`).
    /// - Parameter m1: lines added to machine m1 (its `prize:`).
    /// - Parameter http: more of the `http:` section (`read_token`, which `credits:` needs).
    init(
        game: String = "", sessions: String = "secret", onlineCounts: [Int64: Int] = [:], extra: String = "", m1: String = "",
        http: String = ""
    ) async throws {
        broker = try MosquittoBroker.start()
        netease = try await FakeNetEaseAPI()
        netease.chatrooms.onlineCounts.withLock { $0 = onlineCounts }
        directory = try TemporaryDirectory.make(prefix: "appserver")
        httpPort = try FreePort.next()
        let yaml = """
            gateway:
              id: test
              log_level: debug
            mqtt:
              url: \(broker.url)
            http:
              listen: 127.0.0.1:\(httpPort)
              admin_token: \(Self.adminToken)
            \(http.split(separator: "\n").map { "  \($0)" }.joined(separator: "\n"))
            storage:
              path: data/gateway.sqlite
            \(netease.imSection(replyConcurrency: nil))
            app_server:
              tourist_ttl: 1h
              sessions: \(sessions)
            game:
              accept_timeout: 30s
            \(game.split(separator: "\n").map { "  \($0)" }.joined(separator: "\n"))
            machines:
              - id: m1
                name: Pikachu
                im_account: claw_m1
                chatroom_id: 3001
                cameras:
                  - { id: "1", stream: rtmp://live.example/m1-front, http: http://live.example/m1-front.flv, hls: http://live.example/m1-front.m3u8 }
                  - { id: "2", stream: rtmp://live.example/m1-side }
                \(m1)
              - id: m2
                name: Eevee
                im_account: claw_m2
                chatroom_id: 3002
                cameras:
                  - { id: "1", stream: rtmp://live.example/m2-front }
              - id: m3
                im_account: claw_m3
            \(extra)

            """
        try yaml.write(to: config, atomically: true, encoding: .utf8)
        try startGateway()
        try startSimulator()
        try await eventually("every simulated machine to be online") {
            // The admin token reads too, with or without a read token.
            let list = try? await HTTP.request(.GET, "\(base)/v1/machines", headers: [("Authorization", "Bearer \(Self.adminToken)")])
            return (list?.body.components(separatedBy: #""online":true"#).count ?? 0) == 4
        }
    }

    static func with(
        game: String = "", sessions: String = "secret", onlineCounts: [Int64: Int] = [:], extra: String = "", m1: String = "",
        http: String = "", _ body: (AppServerSite) async throws -> Void
    ) async throws {
        let site = try await AppServerSite(game: game, sessions: sessions, onlineCounts: onlineCounts, extra: extra, m1: m1, http: http)
        do {
            try await body(site)
        } catch {
            await site.stop()
            throw error
        }
        await site.stop()
    }

    func startGateway() throws {
        gateway = try GatewayBinary.start(["run", "--config", config.path], log: log)
    }

    func startSimulator() throws {
        simulator = try GatewayBinary.start(
            ["simulate", "--config", config.path, "--ack-delay", "0s", "--result-delay", "100ms", "--win-rate", "1"],
            log: directory.appendingPathComponent("simulate.log"))
    }

    /// SIGKILL: no clean shutdown.
    func killGateway() {
        gateway?.signal(SIGKILL)
        _ = gateway?.wait()
        gateway = nil
    }

    func stopSimulator() async {
        guard let simulator else { return }
        simulator.signal(SIGTERM)
        if await simulator.wait(timeout: 10) == nil {
            simulator.signal(SIGKILL)
            _ = simulator.wait()
        }
        self.simulator = nil
    }

    func stop() async {
        await stopSimulator()
        if let gateway {
            gateway.signal(SIGTERM)
            if await gateway.wait(timeout: 10) == nil {
                gateway.signal(SIGKILL)
                _ = gateway.wait()
            }
        }
        await netease.stop()
        broker.stop()
    }

    // MARK: Calls

    /// A demo client's call: form-urlencoded, with the demo's headers.
    func post(_ route: String, _ form: String, headers: [(String, String)]? = nil) async throws -> HTTP.Answer {
        let demo = [
            ("Content-Type", "application/x-www-form-urlencoded;charset=utf-8"), ("Demo-Id", "dolls-catcher"), ("appkey", FakeNetEaseAPI.appKey),
        ]
        return try await HTTP.request(.POST, "\(base)/dollsCatcher/\(route)", headers: headers ?? demo, body: Array(form.utf8))
    }

    /// A new tourist's accid, token, and the sid to come back with (its
    /// secret; with `sessions: accid`, the accid).
    func newTourist() async throws -> (accid: String, token: String, sid: String) {
        let answer = try await post("tourist", "")
        let data = answer.json["data"] as? [String: Any]
        let accid = try #require(data?["accid"] as? String)
        return (accid, try #require(data?["imToken"] as? String), data?["sid"] as? String ?? accid)
    }

    /// A signed NetEase copy of `attach` from `player` to m1.
    @discardableResult
    func copy(from player: String, to account: String = "claw_m1", _ attach: String) async throws -> HTTP.Answer {
        let body = NetEaseCopyBody.encode(from: player, to: account, attach: attach, messageID: UUID().uuidString)
        let headers = NetEaseCopyBody.headers(body: body, settings: E2ESite.neteaseSettings, now: Date())
        return try await HTTP.request(.POST, "\(base)/im/netease", headers: headers, body: body)
    }

    /// The waiting list of m1 as the read API shows it.
    func waiting(_ machine: String = "m1") async throws -> [String] {
        let detail = try await HTTP.get("\(base)/v1/machines/\(machine)").json
        return (detail["waiting"] as? [[String: Any]] ?? []).compactMap { $0["accid"] as? String }
    }

    /// The session of the last turn offer sent to `player`.
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
