import ArgumentParser
import Logging
import ServiceLifecycle

/// `claw-gateway simulate`: stands in for the machine PCs of the config.
struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Stand in for the machine PCs of the config: state, acks, results.",
        discussion: "Each simulated PC connects to the config's broker, says online (with an offline will), acks every control and camera message, and publishes a result after every grab."
    )

    @OptionGroup var options: ConfigOptions

    @Option(name: .customLong("machine"), help: "Simulate only this machine (repeatable); default: every machine of the config.")
    var machines: [String] = []

    @Option(help: "Chance that a grab wins, 0 to 1.")
    var winRate: Double = 0.3

    @Option(help: "How long before each ack, e.g. 20ms; 0s acks at once.")
    var ackDelay: String = "20ms"

    @Option(help: "How long after a grab the result comes.")
    var resultDelay: String = "3s"

    @Option(help: "Go offline after this long (and back after --offline-for), repeatedly.")
    var offlineAfter: String?

    @Option(help: "How long each offline spell lasts.")
    var offlineFor: String = "10s"

    func validate() throws {
        guard (0...1).contains(winRate) else { throw ValidationError("--win-rate must be between 0 and 1.") }
        for (name, value) in [("--ack-delay", ackDelay), ("--result-delay", resultDelay), ("--offline-for", offlineFor)]
            + (offlineAfter.map { [("--offline-after", $0)] } ?? [])
        where ConfigDuration.parse(value) == nil {
            throw ValidationError("\(name) must be a duration such as 500ms, 3s or 1m, not \"\(value)\".")
        }
    }

    func run() async throws {
        let config = try options.load()
        LoggingSystem.bootstrap { label in
            GatewayLogHandler(label: label, level: .info)
        }
        let logger = Logger(label: "claw-simulate")
        let unknown = machines.filter { id in !config.machines.contains { $0.id == id } }
        guard unknown.isEmpty else {
            throw ValidationError("No machine \(unknown.joined(separator: ", ")) in \(options.config).")
        }
        let chosen = machines.isEmpty ? config.machines : config.machines.filter { machines.contains($0.id) }
        let behaviour = MachineSimulator.Behaviour(
            winRate: winRate, ackDelay: ConfigDuration.parse(ackDelay) ?? .zero,
            resultDelay: ConfigDuration.parse(resultDelay) ?? .zero, offlineAfter: offlineAfter.flatMap(ConfigDuration.parse),
            offlineFor: ConfigDuration.parse(offlineFor) ?? .seconds(10))
        var services: [any Service] = []
        for machine in chosen {
            services.append(try MachineSimulator(machine: machine, settings: config.mqtt, behaviour: behaviour, logger: logger))
        }
        logger.info("Simulating machines", metadata: ["machines": .string(chosen.map(\.id).joined(separator: ","))])
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}
