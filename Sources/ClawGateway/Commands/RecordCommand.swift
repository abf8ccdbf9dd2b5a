import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle

/// `claw-gateway record --config recorder.yaml`: the chain's recorder (SPEC §10).
struct RecordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Run a recorder of a chain: write every site's finished games into PostgreSQL, once, and serve the chain's history."
    )

    @Option(name: .long, help: "The recorder.yaml to use.")
    var config: String = "recorder.yaml"

    func run() async throws {
        let config: RecorderConfig
        do {
            config = try RecorderConfig.load(file: self.config)
        } catch {
            printError(error.description)
            throw ExitCode(ExitStatus.configError)
        }
        LoggingSystem.bootstrap { label in
            GatewayLogHandler(label: label, level: config.recorder.logLevel)
        }
        var logger = Logger(label: "claw-gateway-record")
        logger[metadataKey: "chain.recorder"] = .string(config.bus.clientID)
        // There is no reload: a stray SIGHUP must not take the recorder down.
        signal(SIGHUP, SIG_IGN)
        let app = try RecorderApp.build(config: config, logger: logger)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: app.services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        logger.info(
            "Recorder starting",
            metadata: [
                "gateway.version": .string(ClawGatewayCommand.version),
                "http.listen": .string("\(config.recorder.http.host):\(config.recorder.http.port)"),
                "db.url": .string(config.recorder.database.description),
            ])
        try await group.run()
        logger.info("Recorder stopped")
    }
}
