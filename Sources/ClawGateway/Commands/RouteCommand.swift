import ArgumentParser

/// `claw-gateway route --config chain.yaml`: the chain's front door (SPEC §9).
struct RouteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "route",
        abstract: "Run a router of a chain: verify the IM service's copies and pass each to the site that owns its machine."
    )

    @Option(name: .long, help: "The chain.yaml to use.")
    var config: String = "chain.yaml"

    func run() async throws {
        let config = try ChainServiceCommand.load(self.config) { try RouterConfig.load(file: $0) }
        try await ChainServiceCommand.run(
            role: "router", name: "Router", clientID: config.bus.clientID, level: config.router.logLevel,
            listen: "\(config.router.http.host):\(config.router.http.port)"
        ) { logger in
            try ChainRouterApp.build(config: config, logger: logger).services
        }
    }
}
