import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle

/// What the chain's services (`route`, `record`) do alike as commands: read
/// their config or exit 78, log as the gateway does, ignore SIGHUP (there is
/// no reload: a stray one must not take them down), and run their services
/// until SIGTERM or SIGINT.
enum ChainServiceCommand {
    /// The config `load` reads from `file`, or its problems on stderr and exit status 78.
    static func load<Config>(_ file: String, _ load: (String) throws -> Config) throws -> Config {
        do {
            return try load(file)
        } catch {
            printError("\(error)")
            throw ExitCode(ExitStatus.configError)
        }
    }

    /// Runs the services `build` makes until a stop signal.
    /// - Parameters:
    ///   - role: `router` or `recorder`: the log's label and its `chain.<role>` metadata.
    ///   - name: how the start and stop lines name the service.
    static func run(
        role: String, name: String, clientID: String, level: Logger.Level, listen: String, metadata: Logger.Metadata = [:],
        build: (Logger) throws -> [any Service]
    ) async throws {
        LoggingSystem.bootstrap { label in GatewayLogHandler(label: label, level: level) }
        var logger = Logger(label: "claw-gateway-\(role)")
        logger[metadataKey: "chain.\(role)"] = .string(clientID)
        signal(SIGHUP, SIG_IGN)
        let services = try build(logger)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        var starting: Logger.Metadata = ["gateway.version": .string(ClawGatewayCommand.version), "http.listen": .string(listen)]
        starting.merge(metadata) { _, new in new }
        logger.info("\(name) starting", metadata: starting)
        try await group.run()
        logger.info("\(name) stopped")
    }
}
