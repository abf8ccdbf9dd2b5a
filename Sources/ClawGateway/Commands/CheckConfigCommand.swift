import ArgumentParser

/// `claw-gateway check-config`: validates a config file and prints a summary,
/// or every problem and exit status 78.
struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validate gateway.yaml: print a summary, or every problem and exit 78."
    )

    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let config = try options.load()
        print(ConfigSummary(config: config, file: options.config).text)
    }
}

/// A few lines an operator reads to see what a config will do.
struct ConfigSummary {
    let config: GatewayConfig
    let file: String

    var text: String {
        var lines = ["\(file): OK"]
        lines.append("gateway \(config.gateway.id), log level \(config.gateway.logLevel.rawValue)")
        let auth = config.mqtt.username.map { " as \($0)" } ?? ""
        lines.append("broker \(config.mqtt.url)\(auth), client id \(config.mqtt.clientID), topics \(config.mqtt.topicPrefix)/…")
        lines.append("http \(config.http.host):\(config.http.port), admin routes \(config.http.adminToken == nil ? "off" : "on")")
        var providers: [String] = []
        if let netease = config.im.netease {
            providers.append("netease (app key \(netease.appKey), callback \(netease.callbackPath), replies via \(netease.apiBase))")
        }
        if let generic = config.im.generic {
            providers.append("generic (replies \(generic.outboundURL.map { "to \($0)" } ?? "logged"))")
        }
        lines.append("im: \(providers.isEmpty ? "none (players cannot reach the gateway)" : providers.joined(separator: ", "))")
        let game = config.game
        lines.append(
            "game: accept \(ConfigDuration.format(game.acceptTimeout)), play \(ConfigDuration.format(game.playTimeout)), "
                + "result \(ConfigDuration.format(game.resultTimeout)), ack \(ConfigDuration.format(game.ackTimeout)), "
                + "max queue \(game.maxQueue)")
        lines.append("storage \(config.storage.path)")
        lines.append("machines: \(config.machines.count)")
        for machine in config.machines {
            let cameras = machine.cameras.map(\.id).joined(separator: ",")
            lines.append("  \(machine.id) \"\(machine.name)\" im \(machine.imAccount), cameras [\(cameras)]")
        }
        return lines.joined(separator: "\n")
    }
}
