import Foundation
import ArgumentParser
import Logging
import ServiceLifecycle

/// `claw-gateway run`: the daemon.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run the gateway: MQTT, the game of every machine, the HTTP ingress and API."
    )

    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let config = try options.load()
        LoggingSystem.bootstrap { label in
            GatewayLogHandler(label: label, level: config.gateway.logLevel)
        }
        var logger = Logger(label: "claw-gateway")
        logger[metadataKey: "gateway.id"] = .string(config.gateway.id)
        // SIGHUP reloads gateway.yaml (SPEC §13, ConfigReloader); one that
        // comes before the reloader listens must not take the gateway down.
        signal(SIGHUP, SIG_IGN)
        // A file size limit (RLIMIT_FSIZE) must fail the write, which storage
        // reports and recovers from, rather than kill the process.
        signal(SIGXFSZ, SIG_IGN)
        // Started by claw-gateway.socket: systemd holds the port across
        // restarts and passes it (SPEC §13); otherwise http.listen is bound.
        let listener = HTTPListener.activated(environment: ProcessInfo.processInfo.environment, pid: getpid())
        if let listener { HTTPListener.forgetActivation(listener) }
        let gateway = try await Gateway.build(
            config: config, logger: logger, exportsMetrics: true, listener: listener, file: options.config)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: gateway.services,
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        logger.info("Gateway starting", metadata: ["gateway.version": .string(ClawGatewayCommand.version)])
        try await group.run()
        logger.info("Gateway stopped")
    }
}
