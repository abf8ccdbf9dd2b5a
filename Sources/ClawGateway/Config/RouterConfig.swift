import Foundation
import Logging
import Protocol
import Yams

/// `chain.yaml`, the config of the chain's router (`claw-gateway route`,
/// SPEC §9): where it listens, how it reaches the chain's cluster, and the
/// IM app it verifies copies for (the same `im:` as a site's `gateway.yaml`,
/// read by the same code). Refused as a whole, every problem named by its
/// key, exit status 78, like `gateway.yaml`.
struct RouterConfig: Sendable {
    var router: RouterSettings
    var bus: BusSettings
    var im: IMSettings
}

/// `router:`: the HTTP side, read with the keys and rules of `gateway.yaml`'s
/// `http:` (tokens of 16 bytes at least, `allowed_hosts`, the connection
/// shares), and how long a copy waits for its site's receipt.
struct RouterSettings: Sendable {
    var http: HTTPSettings
    /// A copy whose site's receipt is not back within this is answered 503,
    /// so that the IM service sends it again.
    var receiptTimeout: Duration = .seconds(1)
    var logLevel: Logger.Level = .info
    /// Notifications a player may send to machines nobody owns before the
    /// router stops answering them (`unknown_machine` through the IM API):
    /// the sites' `game.max_commands_per_second` (SPEC §2).
    var maxCommandsPerSecond = 10
    /// `router.ledger_key`: the key the router makes the vouchers of accepts
    /// with (SPEC §9), shared with the recorder and never with a site. Nil:
    /// no vouchers, and the chain's ledger debits no game routed here.
    var ledgerKey: String?
}

/// `bus:`: the chain's cluster, every node of it.
struct BusSettings: Sendable {
    /// Tried in turn: the client moves to the next when one fails.
    var urls: [BrokerURL]
    var username: String?
    var password: String?
    /// Unique per router process: two routers with one id would throw each
    /// other off the cluster in turn.
    var clientID: String
    var topicPrefix: String
    /// For `mqtts://` nodes: the system's CAs, as a site's link.
    var tls: TLSSettings?
}

extension RouterConfig {
    static let keys = ["router", "bus", "im"]
    static let routerKeys = [
        "listen", "read_token", "admin_token", "receipt_timeout", "log_level", "allowed_hosts", "read_timeout",
        "max_connections", "max_connections_per_client", "idle_timeout", "max_commands_per_second", "ledger_key",
        "trusted_proxies",
    ]
    static let busKeys = ["urls", "username", "password", "client_id", "topic_prefix"]

    /// Where the router listens when `router.listen` is not given: every
    /// address, since the IM service and a load balancer reach it from outside.
    static let defaultListen = (host: "0.0.0.0", port: 8080)

    /// Loads and validates `chain.yaml`, or throws every problem in it.
    static func load(file: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigError) -> RouterConfig {
        try ConfigLoader.load(file: file, environment: environment) { $0.readRouter($1) }
    }

    /// Validates YAML text; `file` only names it in messages.
    static func parse(_ text: String, file: String = "chain.yaml", environment: [String: String] = [:]) throws(ConfigError) -> RouterConfig {
        try ConfigLoader.parse(text, file: file, baseDirectory: FileManager.default.currentDirectoryPath, environment: environment) {
            $0.readRouter($1)
        }
    }

    /// `claw-router-<host>-<pid>`: unique per process (two routers on one
    /// host differ by pid), without the characters NATS refuses in a client
    /// id (`.`, space, `*`, `>`).
    static func defaultClientID(host: String = ProcessInfo.processInfo.hostName, pid: Int32 = getpid()) -> String {
        let name = String(host.lowercased().unicodeScalars.map { scalar -> Character in
            ("a"..."z").contains(scalar) || ("0"..."9").contains(scalar) ? Character(scalar) : "-"
        }.prefix(40))
        return "claw-router-\(name.isEmpty ? "host" : name)-\(pid)"
    }

    /// Why `id` cannot be the router's client id, or nil.
    static func clientIDProblem(_ id: String) -> String? {
        if let bad = id.first(where: { ". *>/+#".contains($0) || $0.isNewline }) {
            return "\"\(id)\" contains \"\(bad)\"; the cluster refuses client ids with '.', ' ', '*' or '>' (leave it out for a unique default)"
        }
        return id.utf8.count > 128 ? "is longer than 128 bytes" : nil
    }
}

extension Schema {
    /// The keys of `chain.yaml` and their rules.
    func readRouter(_ root: Node) -> RouterConfig? {
        guard let top = reader.section(root, at: "", keys: RouterConfig.keys) else { return nil }
        let section = top.section("router", keys: RouterConfig.routerKeys)
        var http = section == nil ? HTTPSettings(host: RouterConfig.defaultListen.host, port: RouterConfig.defaultListen.port) : readHTTP(section)
        if section?.has("listen") != true {
            http?.host = RouterConfig.defaultListen.host
            http?.port = RouterConfig.defaultListen.port
        }
        let receiptTimeout = section?.duration("receipt_timeout", default: .seconds(1), atLeast: .milliseconds(100)) ?? .seconds(1)
        let level = section?.choice("log_level", default: Logger.Level.info, from: Logger.Level.allCases.map { ($0.rawValue, $0) }) ?? .info
        let bus = readBus(top.section("bus", keys: RouterConfig.busKeys, required: true))
        let imSection = top.section("im", keys: ["netease", "generic"], required: true)
        let im = readIM(imSection)
        if let imSection, !imSection.has("netease"), !imSection.has("generic") {
            reader.report("im", "configure netease or generic (or both): the router verifies copies with them")
        }
        let perSecond = section?.int("max_commands_per_second", default: 10, in: 1...1000) ?? 10
        let ledgerKey = section.flatMap { token($0, "ledger_key") }
        guard let http, let bus else { return nil }
        return RouterConfig(
            router: RouterSettings(
                http: http, receiptTimeout: receiptTimeout, logLevel: level, maxCommandsPerSecond: perSecond, ledgerKey: ledgerKey),
            bus: bus, im: im)
    }

    /// `bus:` of `chain.yaml`, and of the recorder's `recorder.yaml` (``RecorderConfig``).
    func readBus(_ section: ConfigReader.Section?) -> BusSettings? {
        guard let section else { return nil }
        let urls = ChainSettings.nodes(section, "urls", brokerURL: brokerURL)
        let username = section.string("username")
        let password = section.string("password")
        let clientID = section.nonEmpty("client_id") ?? RouterConfig.defaultClientID()
        if let problem = RouterConfig.clientIDProblem(clientID) { reader.report(section.path("client_id"), problem) }
        let prefix = section.nonEmpty("topic_prefix") ?? Topics.defaultPrefix
        if let problem = topicProblem(prefix) { reader.report(section.path("topic_prefix"), problem) }
        guard !urls.isEmpty else { return nil }
        return BusSettings(
            urls: urls, username: username, password: password, clientID: clientID, topicPrefix: prefix,
            tls: urls[0].usesTLS ? TLSSettings() : nil)
    }
}
