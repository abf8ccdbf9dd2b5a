import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle

/// `claw-gateway route --config chain.yaml`: the chain's front door (SPEC §9).
struct RouteCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "route",
        abstract: "Run a router of a chain: verify the IM service's copies and pass each to the site that owns its machine."
    )

    @Option(name: .long, help: "The chain.yaml to use.")
    var config: String = "chain.yaml"

    func run() async throws {
        let config: RouterConfig
        do {
            config = try RouterConfig.load(file: self.config)
        } catch {
            printError(error.description)
            throw ExitCode(ExitStatus.configError)
        }
        LoggingSystem.bootstrap { label in
            GatewayLogHandler(label: label, level: config.router.logLevel)
        }
        var logger = Logger(label: "claw-gateway-route")
        logger[metadataKey: "chain.router"] = .string(config.bus.clientID)
        // There is no reload: a stray SIGHUP must not take the router down.
        signal(SIGHUP, SIG_IGN)
        let app = try ChainRouterApp.build(config: config, logger: logger)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: app.services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        logger.info(
            "Router starting",
            metadata: [
                "gateway.version": .string(ClawGatewayCommand.version),
                "http.listen": .string("\(config.router.http.host):\(config.router.http.port)"),
            ])
        try await group.run()
        logger.info("Router stopped")
    }
}
