import ArgumentParser

/// `claw-gateway record --config recorder.yaml`: the chain's recorder (SPEC §10).
struct RecordCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "record",
        abstract: "Run a recorder of a chain: write every site's finished games into PostgreSQL, once, and serve the chain's history."
    )

    @Option(name: .long, help: "The recorder.yaml to use.")
    var config: String = "recorder.yaml"

    func run() async throws {
        let config = try ChainServiceCommand.load(self.config) { try RecorderConfig.load(file: $0) }
        try await ChainServiceCommand.run(
            role: "recorder", name: "Recorder", clientID: config.bus.clientID, level: config.recorder.logLevel,
            listen: "\(config.recorder.http.host):\(config.recorder.http.port)",
            metadata: ["db.url": .string(config.recorder.database.description)]
        ) { logger in
            try RecorderApp.build(config: config, logger: logger).services
        }
    }
}
