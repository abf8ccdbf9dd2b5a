import Foundation
import Logging
import Protocol
import Yams

/// Reads `gateway.yaml` into a ``GatewayConfig``, or refuses it as a whole
/// with every problem listed (SPEC §6).
enum ConfigLoader {
    /// Loads and validates the file at `file`. Relative paths inside it are
    /// resolved against the file's folder.
    static func load(file: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigError) -> GatewayConfig {
        try load(file: file, environment: environment) { $0.read($1) }
    }

    /// Validates YAML text; `file` only names it in messages.
    static func parse(_ text: String, file: String, baseDirectory: String, environment: [String: String]) throws(ConfigError) -> GatewayConfig {
        try parse(text, file: file, baseDirectory: baseDirectory, environment: environment) { $0.read($1) }
    }

    /// Reads the file at `file` with `read`, another document with the same
    /// rules (`chain.yaml` of the router): every problem listed, or the config.
    static func load<Config>(
        file: String, environment: [String: String] = ProcessInfo.processInfo.environment, as read: (Schema, Node) -> Config?
    ) throws(ConfigError) -> Config {
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw ConfigError(file: file, problems: [ConfigProblem(path: file, message: "cannot be read: \(error.localizedDescription)")])
        }
        let folder = URL(fileURLWithPath: file).deletingLastPathComponent().path
        return try parse(text, file: file, baseDirectory: folder, environment: environment, as: read)
    }

    /// Validates YAML text with `read`; `file` only names it in messages.
    static func parse<Config>(
        _ text: String, file: String, baseDirectory: String, environment: [String: String], as read: (Schema, Node) -> Config?
    ) throws(ConfigError) -> Config {
        let root: Node?
        do {
            root = try Yams.compose(yaml: text)
        } catch {
            throw ConfigError(file: file, problems: [syntaxProblem(error, file: file)])
        }
        let reader = ConfigReader(environment: environment)
        let schema = Schema(reader: reader, baseDirectory: baseDirectory)
        guard let root else {
            throw ConfigError(file: file, problems: [ConfigProblem(path: file, message: "is empty; see gateway.yaml in the repository for a complete example")])
        }
        let config = read(schema, root)
        guard reader.problems.isEmpty, let config else {
            throw ConfigError(file: file, problems: reader.problems)
        }
        return config
    }

    private static func syntaxProblem(_ error: any Error, file: String) -> ConfigProblem {
        switch error {
        case YamlError.scanner(let context, let problem, let mark, _),
            YamlError.parser(let context, let problem, let mark, _),
            YamlError.composer(let context, let problem, let mark, _):
            let detail = context.map { "\(problem) \($0.text)" } ?? problem
            return ConfigProblem(path: "\(file):\(mark.line):\(mark.column)", message: "YAML syntax error: \(detail)")
        case YamlError.duplicatedKeysInMapping(let duplicates, let context):
            return ConfigProblem(
                path: "\(file):\(context.mark.line):\(context.mark.column)",
                message: "duplicate key\(duplicates.count == 1 ? "" : "s") \(duplicates.joined(separator: ", "))")
        default:
            return ConfigProblem(path: file, message: "YAML syntax error: \(error)")
        }
    }
}

/// The keys of `gateway.yaml` and their rules; the router's `chain.yaml`
/// reads its sections with the same ones (``RouterConfig``).
struct Schema {
    let reader: ConfigReader
    let baseDirectory: String

    func read(_ root: Node) -> GatewayConfig? {
        guard let top = reader.section(root, at: "", keys: ["gateway", "mqtt", "http", "im", "game", "storage", "machines", "chain", "app_server", "credits", "evidence", "prizes", "operators"]) else {
            return nil
        }
        let gateway = readGateway(top.section("gateway", keys: ["id", "log_level", "stats_interval"], required: true))
        let mqtt = readMQTT(top.section("mqtt", keys: ["url", "client_id", "username", "password", "keepalive", "topic_prefix", "tls"], required: true), gatewayID: gateway?.id)
        let httpSection = top.section("http", keys: ["listen", "admin_token", "read_token", "allowed_hosts", "read_timeout", "max_connections", "max_connections_per_client", "idle_timeout", "trusted_proxies"])
        var http = readHTTP(httpSection)
        let operators = readOperators(top.list("operators"), http: http)
        http?.operators = operators
        // A `read` operator closes the read API as the read token does (SPEC §16).
        if http?.readsClosed != true {
            requireReadToken(in: httpSection, at: "http", top: top, needing: Self.sectionsNeedingReadToken)
        }
        let im = readIM(top.section("im", keys: ["netease", "generic"]))
        let gameSection = top.section("game", keys: ["accept_timeout", "play_timeout", "result_timeout", "ack_timeout", "coins_per_game", "max_queue", "max_commands_per_second", "relay_acks", "command_events", "suspect_after", "offline_grace", "command_max_age", "settings", "continue", "max_continues"])
        let game = readGame(gameSection)
        let storage = StorageSettings(path: resolve(top.section("storage", keys: ["path"])?.nonEmpty("path") ?? "data/gateway.sqlite"))
        let defaults = MachineSettings.read(
            gameSection?.section("settings", keys: MachineSettings.keys), over: MachineSettings())
        let credits = top.section("credits", keys: CreditsSettings.keys).flatMap { CreditsSettings.read($0, inChain: top.has("chain")) }
        let prizes = top.section("prizes", keys: PrizeSettings.keys).map(PrizeSettings.read)
        let machines = readMachines(
            top.list("machines", required: true), topicPrefix: mqtt?.topicPrefix, settings: defaults,
            credits: top.has("credits") ? (credits?.price ?? 0) : nil, prizes: prizes)
        let chain = top.section("chain", keys: ChainSettings.keys).flatMap { ChainSettings.read($0, brokerURL: brokerURL) }
        let appServer = top.section("app_server", keys: AppServerSettings.keys).flatMap {
            AppServerSettings.read($0, netease: im.netease, machines: machines ?? [])
        }
        if top.has("credits") {
            if appServer?.sessions == .accid {
                reader.report(
                    "app_server.sessions",
                    "must be secret with credits: with accid, whoever knows an account id (every chatroom shows them) spends its credits")
            }
        }
        let evidence = top.section("evidence", keys: EvidenceSettings.keys).flatMap { EvidenceSettings.read($0, resolve: resolve) }
        if top.has("evidence"), let machines {
            for (m, machine) in machines.enumerated() {
                for (c, camera) in machine.cameras.enumerated() {
                    if let stream = camera.stream, let problem = EvidenceSettings.streamProblem(stream) {
                        reader.report("machines[\(m)].cameras[\(c)].stream", problem)
                    }
                }
            }
        }
        guard let gateway, let mqtt, let http, let machines else { return nil }
        guard chain != nil || !top.has("chain") else { return nil }
        guard evidence != nil || !top.has("evidence") else { return nil }
        guard credits != nil || !top.has("credits") else { return nil }
        return GatewayConfig(
            gateway: gateway, mqtt: mqtt, http: http, im: im, game: game, storage: storage, machines: machines, chain: chain,
            appServer: appServer, credits: credits, evidence: evidence, prizes: prizes)
    }

    /// The sections whose routes serve what is a player's own (SPEC §11):
    /// with any of them the HTTP API needs a read token, so that no one who
    /// merely reaches the port reads it. `Host` does not stand in for a
    /// token: it only keeps other sites' pages out of a visitor's browser
    /// (DNS rebinding); a script sends any `Host` it likes. `video:` (SPEC
    /// §17, the players' own feeds) joins this list when it is built.
    static let sectionsNeedingReadToken: [(key: String, serves: String)] = [
        ("credits", "the players' wallets"),
        ("evidence", "the games' clips"),
    ]

    /// `<path>.read_token` is required when `top` has any of `needing`
    /// (``sectionsNeedingReadToken`` for a gateway). A token that is there
    /// but refused (too short, an unset `${VAR}`) is reported where it is read.
    func requireReadToken(
        in section: ConfigReader.Section?, at path: String, top: ConfigReader.Section, needing all: [(key: String, serves: String)]
    ) {
        let needing = all.filter { top.has($0.key) }
        guard !needing.isEmpty, section?.has("read_token") != true else { return }
        let sections = needing.map { "\($0.key): (\($0.serves))" }.joined(separator: " and ")
        reader.report(
            "\(path).read_token",
            "is required with \(sections); without it they are open to anyone who reaches the port (the Host check keeps other sites' pages out of a browser, not a script out); set it, e.g. read_token: ${CLAW_READ_TOKEN} with the output of openssl rand -hex 16")
    }

    private func readGateway(_ section: ConfigReader.Section?) -> GatewaySettings? {
        guard let section else { return nil }
        let id = section.nonEmpty("id", required: true)
        let level = section.choice("log_level", default: Logger.Level.info, from: Logger.Level.allCases.map { ($0.rawValue, $0) })
        let stats = section.duration("stats_interval", default: .seconds(3), zeroTurnsOff: true, atLeast: .seconds(1))
        return id.map { GatewaySettings(id: $0, logLevel: level, statsInterval: stats) }
    }

    private func readMQTT(_ section: ConfigReader.Section?, gatewayID: String?) -> MQTTSettings? {
        guard let section else { return nil }
        let url = section.nonEmpty("url", required: true).flatMap { brokerURL($0, at: section.path("url")) }
        let clientID = section.nonEmpty("client_id") ?? "claw-gateway-\(gatewayID ?? "gateway")"
        if clientID.utf8.count > 65535 { reader.report(section.path("client_id"), "is too long") }
        let prefix = section.nonEmpty("topic_prefix") ?? Topics.defaultPrefix
        if let problem = topicProblem(prefix) { reader.report(section.path("topic_prefix"), problem) }
        var tls: TLSSettings?
        if let tlsSection = section.section("tls", keys: ["ca_file", "cert_file", "key_file"]) {
            tls = TLSSettings(
                caFile: existingFile(tlsSection, "ca_file"),
                certFile: existingFile(tlsSection, "cert_file"),
                keyFile: existingFile(tlsSection, "key_file"))
            if tlsSection.has("cert_file") != tlsSection.has("key_file") {
                reader.report(tlsSection.path, "cert_file and key_file go together: give both or neither")
            }
            if let url, !url.usesTLS {
                reader.report(tlsSection.path, "is set but mqtt.url uses mqtt://; write mqtts:// to use TLS")
            }
        }
        let username = section.string("username")
        let password = section.string("password")
        let keepalive = section.int("keepalive", default: 30, in: 5...65535)
        guard let url else { return nil }
        return MQTTSettings(
            url: url, clientID: clientID, username: username, password: password, keepalive: keepalive,
            topicPrefix: prefix, tls: tls)
    }

    func readHTTP(_ section: ConfigReader.Section?) -> HTTPSettings? {
        let listen = section?.nonEmpty("listen") ?? "127.0.0.1:8080"
        guard let (host, port) = hostAndPort(listen) else {
            reader.report(section?.path("listen") ?? "http.listen", "\"\(listen)\" is not host:port, e.g. 127.0.0.1:8080")
            return nil
        }
        var settings = HTTPSettings(host: host, port: port)
        if let section {
            settings.adminToken = token(section, "admin_token")
            settings.readToken = token(section, "read_token")
            settings.allowedHosts = allowedHosts(section)
            settings.readTimeout = section.duration("read_timeout", default: settings.readTimeout)
            settings.maxConnections = section.int("max_connections", default: settings.maxConnections, in: 1...100_000)
            // A share larger than the whole would never apply: capped at max_connections.
            settings.maxConnectionsPerClient = section.int(
                "max_connections_per_client", default: min(settings.maxConnectionsPerClient, settings.maxConnections),
                in: 1...settings.maxConnections)
            settings.idleTimeout = section.duration("idle_timeout", default: settings.idleTimeout, atLeast: .seconds(1))
            settings.trustedProxies = trustedProxies(section)
        }
        return settings
    }

    /// `trusted_proxies`: addresses and CIDR blocks, IPv4 or IPv6.
    private func trustedProxies(_ section: ConfigReader.Section) -> TrustedProxies {
        var networks: [IPNetwork] = []
        for (path, node) in section.list("trusted_proxies") ?? [] {
            guard let text = reader.string(node, at: path) else { continue }
            if let network = IPNetwork(text) {
                networks.append(network)
            } else if let parts = IPNetwork.parts(text) {
                let block = IPNetwork(covering: parts.address, prefix: parts.prefix)
                reader.report(
                    path,
                    "\"\(text.debugEscaped)\" has address bits set past /\(parts.prefix): write \(block) for the block, or the address alone")
            } else {
                reader.report(
                    path,
                    "\"\(text.debugEscaped)\" is not an IP address or a CIDR block (write e.g. 127.0.0.1, 10.0.0.0/8 or 2001:db8::/32)")
            }
        }
        return TrustedProxies(networks: networks)
    }

    /// The shortest token accepted: 16 bytes (128 bits if random) cannot be guessed over HTTP.
    static let minimumTokenLength = 16

    /// A Bearer token or a shared key: absent, or at least ``minimumTokenLength`` bytes.
    func token(_ section: ConfigReader.Section, _ key: String) -> String? {
        guard let value = section.nonEmpty(key) else { return nil }
        guard value.utf8.count >= Self.minimumTokenLength else {
            reader.report(
                section.path(key),
                "is \(value.utf8.count) byte\(value.utf8.count == 1 ? "" : "s") long; a token needs \(Self.minimumTokenLength) at least (e.g. the output of openssl rand -hex 16)")
            return nil
        }
        return value
    }

    /// Host names as a browser writes them in `Host`: no scheme, port, path or wildcard.
    private func allowedHosts(_ section: ConfigReader.Section) -> [String] {
        var hosts: [String] = []
        for (path, node) in section.list("allowed_hosts") ?? [] {
            guard let host = reader.string(node, at: path) else { continue }
            let name = host.lowercased()
            let characters = name.unicodeScalars.allSatisfy {
                ("a"..."z").contains($0) || ("0"..."9").contains($0) || "-.:[]".unicodeScalars.contains($0)
            }
            // What a Host header of this name reads as must be the name itself: no port.
            guard characters, let bare = AccessPolicy.hostName(ofHostHeader: name), name == bare || name == "[\(bare)]" else {
                reader.report(path, "\"\(host.debugEscaped)\" is not a host name (write e.g. arcade-7.example.com, without scheme or port)")
                continue
            }
            hosts.append(bare)
        }
        return hosts
    }

    func readIM(_ section: ConfigReader.Section?) -> IMSettings {
        var settings = IMSettings()
        let replyKeys = ["reply_timeout", "reply_concurrency"]
        if let netease = section?.section("netease", keys: ["app_key", "app_secret", "api_base", "callback_path", "max_clock_skew"] + replyKeys) {
            let appKey = netease.nonEmpty("app_key", required: true)
            let appSecret = netease.nonEmpty("app_secret", required: true)
            let apiBase = netease.nonEmpty("api_base") ?? "https://api.netease.im/nimserver"
            if !isHTTPURL(apiBase) { reader.report(netease.path("api_base"), "\"\(apiBase)\" must be an http:// or https:// URL") }
            let callbackPath = netease.nonEmpty("callback_path") ?? "/im/netease"
            if !callbackPath.hasPrefix("/") || callbackPath.contains(" ") || callbackPath.hasPrefix("/v1/") {
                reader.report(netease.path("callback_path"), "must start with / and not be under /v1/")
            }
            if let appKey, let appSecret {
                settings.netease = NetEaseSettings(
                    appKey: appKey, appSecret: appSecret, apiBase: apiBase, callbackPath: callbackPath,
                    maxClockSkew: netease.duration("max_clock_skew", default: .seconds(300)),
                    replyTimeout: netease.duration("reply_timeout", default: .seconds(5)),
                    replyConcurrency: netease.int("reply_concurrency", default: 8, in: 1...256))
            }
        }
        if let generic = section?.section("generic", keys: ["secret", "outbound_url", "max_clock_skew"] + replyKeys) {
            let secret = generic.nonEmpty("secret", required: true)
            let outbound = generic.nonEmpty("outbound_url")
            if let outbound, !isHTTPURL(outbound) {
                reader.report(generic.path("outbound_url"), "\"\(outbound)\" must be an http:// or https:// URL")
            }
            if let secret {
                settings.generic = GenericSettings(
                    secret: secret, outboundURL: outbound,
                    maxClockSkew: generic.duration("max_clock_skew", default: .seconds(300)),
                    replyTimeout: generic.duration("reply_timeout", default: .seconds(5)),
                    replyConcurrency: generic.int("reply_concurrency", default: 8, in: 1...256))
            }
        }
        return settings
    }

    private func readGame(_ section: ConfigReader.Section?) -> GameSettings {
        var game = GameSettings()
        guard let section else { return game }
        game.acceptTimeout = section.duration("accept_timeout", default: game.acceptTimeout)
        game.playTimeout = section.duration("play_timeout", default: game.playTimeout)
        game.resultTimeout = section.duration("result_timeout", default: game.resultTimeout)
        game.ackTimeout = section.duration("ack_timeout", default: game.ackTimeout)
        game.coinsPerGame = section.int("coins_per_game", default: game.coinsPerGame, in: 1...1000)
        game.maxQueue = section.int("max_queue", default: game.maxQueue, in: 1...100_000)
        game.maxCommandsPerSecond = section.int("max_commands_per_second", default: game.maxCommandsPerSecond, in: 1...10_000)
        game.relayAcks = section.bool("relay_acks", default: game.relayAcks)
        game.commandEvents = section.bool("command_events", default: game.commandEvents)
        game.suspectAfter = section.int("suspect_after", default: game.suspectAfter, in: 0...1000)
        game.offlineGrace = section.duration("offline_grace", default: game.offlineGrace, zeroTurnsOff: true)
        game.commandMaxAge = section.duration("command_max_age", default: game.commandMaxAge)
        game.continueTimeout = section.duration("continue", default: game.continueTimeout, zeroTurnsOff: true)
        game.maxContinues = section.int("max_continues", default: game.maxContinues, in: 1...100)
        return game
    }

    /// - Parameter credits: the price of a game on a machine with no
    ///   `price:` of its own; nil when games are free (no `credits:`).
    private func readMachines(
        _ items: [(path: String, node: Node)]?, topicPrefix: String?, settings defaults: MachineSettings, credits: Int64?,
        prizes: PrizeSettings?
    ) -> [MachineConfig]? {
        guard let items else { return nil }
        if items.isEmpty { reader.report("machines", "must list at least one machine") }
        var machines: [MachineConfig] = []
        var idsSeen: [String: String] = [:]
        var accountsSeen: [String: String] = [:]
        for (path, node) in items {
            guard let section = reader.section(node, at: path, keys: ["id", "name", "im_account", "cameras", "camera_topic", "chatroom_id", "settings", "price", "prize"]),
                let id = section.string("id", required: true)
            else { continue }
            if let problem = machineIDProblem(id) {
                reader.report(section.path("id"), problem)
            } else if let first = idsSeen[id] {
                reader.report(section.path("id"), "\"\(id)\" is already the id of \(first)")
            }
            idsSeen[id] = idsSeen[id] ?? path
            let account = section.nonEmpty("im_account") ?? id
            if let first = accountsSeen[account] {
                reader.report(section.path("im_account"), "\"\(account)\" is already the im_account of \(first)")
            }
            accountsSeen[account] = accountsSeen[account] ?? path
            let cameraTopic = section.nonEmpty("camera_topic")
            if let cameraTopic, let problem = topicProblem(cameraTopic) {
                reader.report(section.path("camera_topic"), problem)
            }
            let ownPrice = CreditsSettings.price(section)
            if ownPrice != nil, credits == nil {
                reader.report(section.path("price"), "needs a credits: section: without it every game is free")
            }
            machines.append(MachineConfig(
                id: id, name: section.nonEmpty("name") ?? id, imAccount: account,
                cameras: readCameras(section.list("cameras") ?? []), cameraTopic: cameraTopic,
                chatroomID: AppServerSettings.chatroomID(section),
                settings: MachineSettings.read(section.section("settings", keys: MachineSettings.keys), over: defaults),
                price: credits.map { ownPrice ?? $0 },
                prize: section.section("prize", keys: MachinePrize.keys).flatMap {
                    MachinePrize.read($0, credits: credits != nil, settings: prizes)
                }))
        }
        // A notification's `to` may be an id or an im_account: neither may name two machines.
        for machine in machines where machine.imAccount != machine.id {
            if let other = machines.firstIndex(where: { $0.id == machine.imAccount }) {
                let index = machines.firstIndex { $0.id == machine.id } ?? 0
                reader.report(
                    "machines[\(index)].im_account",
                    "\"\(machine.imAccount)\" is the id of machines[\(other)]; an account may not name another machine")
            }
        }
        return machines
    }

    private func readCameras(_ items: [(path: String, node: Node)]) -> [CameraConfig] {
        var cameras: [CameraConfig] = []
        for (path, node) in items {
            guard let section = reader.section(node, at: path, keys: ["id", "stream", "http", "hls"]),
                let id = section.nonEmpty("id", required: true)
            else { continue }
            if cameras.contains(where: { $0.id == id }) {
                reader.report(section.path("id"), "camera \"\(id)\" is listed twice for this machine")
                continue
            }
            cameras.append(
                CameraConfig(id: id, stream: section.nonEmpty("stream"), http: section.nonEmpty("http"), hls: section.nonEmpty("hls")))
        }
        return cameras
    }

    // MARK: Rules

    /// Why `id` cannot name a machine in a topic, or nil if it can.
    private func machineIDProblem(_ id: String) -> String? {
        if id.isEmpty { return "must not be empty" }
        if id == Topics.reservedMachineID { return "\"gateway\" is reserved for the gateway's own topics" }
        if let bad = id.unicodeScalars.first(where: { "/+#".unicodeScalars.contains($0) || $0.properties.generalCategory == .control }) {
            let shown = bad.properties.generalCategory == .control ? "a control character" : "\"\(bad)\""
            return "\"\(id.debugEscaped)\" contains \(shown); machine ids go into MQTT topics, use letters, digits, - and _"
        }
        return nil
    }

    /// Why `topic` cannot be published to, or nil if it can.
    func topicProblem(_ topic: String) -> String? {
        if topic.contains("+") || topic.contains("#") { return "\"\(topic)\" contains a wildcard (+ or #)" }
        if topic.hasPrefix("/") || topic.hasSuffix("/") || topic.contains("//") { return "\"\(topic)\" has an empty level" }
        if topic.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) { return "contains a control character" }
        return nil
    }

    func brokerURL(_ text: String, at path: String) -> BrokerURL? {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            reader.report(path, "\"\(text)\" is not a URL; write mqtt://host:port or mqtts://host:port")
            return nil
        }
        guard scheme == "mqtt" || scheme == "mqtts" else {
            reader.report(path, "scheme \"\(scheme)\" is not supported; use mqtt:// or mqtts://")
            return nil
        }
        guard let host = components.host, !host.isEmpty else {
            reader.report(path, "\"\(text)\" has no host")
            return nil
        }
        if !(components.path.isEmpty || components.path == "/") || components.query != nil {
            reader.report(path, "\"\(text)\" must not have a path or query")
        }
        let port = components.port ?? (scheme == "mqtts" ? 8883 : 1883)
        guard (1...65535).contains(port) else {
            reader.report(path, "port \(port) is out of range")
            return nil
        }
        let bareHost = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return BrokerURL(host: bareHost, port: port, usesTLS: scheme == "mqtts")
    }

    private func hostAndPort(_ text: String) -> (String, Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port)
        else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    private func isHTTPURL(_ text: String) -> Bool {
        guard let url = URLComponents(string: text), let scheme = url.scheme?.lowercased(), let host = url.host else { return false }
        return (scheme == "http" || scheme == "https") && !host.isEmpty
    }

    private func existingFile(_ section: ConfigReader.Section, _ key: String) -> String? {
        guard let value = section.nonEmpty(key) else { return nil }
        let path = resolve(value)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else {
            reader.report(section.path(key), "file \(path) does not exist")
            return path
        }
        guard FileManager.default.isReadableFile(atPath: path) else {
            reader.report(section.path(key), "file \(path) cannot be read")
            return path
        }
        return path
    }

    private func resolve(_ path: String) -> String {
        path.hasPrefix("/") ? path : URL(fileURLWithPath: baseDirectory).appendingPathComponent(path).standardizedFileURL.path
    }
}

extension String {
    /// The string with control characters shown as escapes, for messages.
    var debugEscaped: String {
        String(String(reflecting: self).dropFirst().dropLast())
    }
}
