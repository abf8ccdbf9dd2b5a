import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle

/// `claw-gateway simulate`: stands in for the machine PCs of the config.
struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Stand in for the machine PCs of the config: state, acks, results.",
        discussion: """
            Each simulated PC connects to the config's broker, says online (with an offline will), acks every \
            control and camera message, and publishes a result after every grab. Each result has a serial no run \
            uses twice (the start time in seconds, then a count) and is repeated every 2 s until the gateway \
            confirms it on <prefix>/<machine>/result/ack, for up to the config's game.result_timeout.

            By default every PC logs in with the config's mqtt username and password, which suits the local \
            demo broker. Against a site broker (deploy/mosquitto.conf), give --passwords: each PC then logs in \
            as its machine id with its own password, as the real PCs do; that broker allows one connection per \
            username, so PCs sharing the gateway's login would knock each other and the gateway off.

            With --log FILE, every message a PC receives is appended to FILE as one JSON line before the PC acts \
            on it: {"time","machine","topic","command","data","serial","session","player"} (time in UTC with \
            milliseconds; fields the message lacks are left out; a message the PC cannot read has "unreadable" and \
            its length). A restarted simulator appends; several may share one file. scripts/chaos checks it.
            """
    )

    @OptionGroup var options: ConfigOptions

    @Option(name: .customLong("machine"), help: "Simulate only this machine (repeatable); default: every machine of the config.")
    var machines: [String] = []

    @Option(help: "Chance that a grab wins, 0 to 1.")
    var winRate: Double = 0.3

    @Flag(
        inversion: .prefixedNo,
        help: "The first game each machine plays in this run is won, whatever --win-rate says: a first game shows its prize.")
    var firstGameWins = true

    @Option(help: "How long before each ack, e.g. 20ms; 0s acks at once.")
    var ackDelay: String = "20ms"

    @Option(help: "How long after a grab the result comes.")
    var resultDelay: String = "3s"

    @Option(
        help: ArgumentHelp(
            "Chance that a grab faults instead of ending in a result, 0 to 1.",
            discussion: "The board reports claw_rise_timeout on claw/<m>/fault and refuses coins until a reset (1002) brings it home."))
    var faultRate: Double = 0

    @Option(help: "How long a reset (1002) takes: the gantry homes, then the PC says online again.")
    var resetDelay: String = "1s"

    @Option(help: "Go offline after this long (and back after --offline-for), repeatedly.")
    var offlineAfter: String?

    @Option(help: "How long each offline spell lasts.")
    var offlineFor: String = "10s"

    @Option(
        help: ArgumentHelp(
            "Log each PC in as its machine id, with its password from this file.",
            discussion: "One \"username password\" per line, # starts a comment: the passwords file of make-site-secrets.sh.",
            valueName: "file"))
    var passwords: String?

    @Option(
        help: ArgumentHelp(
            "Append every message the PCs receive to this file, one JSON line each.",
            discussion: "Fields: time, machine, topic, command, data, serial, session, player.",
            valueName: "file"))
    var log: String?

    func validate() throws {
        guard (0...1).contains(winRate) else { throw ValidationError("--win-rate must be between 0 and 1.") }
        guard (0...1).contains(faultRate) else { throw ValidationError("--fault-rate must be between 0 and 1.") }
        for (name, value) in [
            ("--ack-delay", ackDelay), ("--result-delay", resultDelay), ("--reset-delay", resetDelay), ("--offline-for", offlineFor),
        ]
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
        var logins: [String: MachineSimulator.Login] = [:]
        if let passwords {
            do {
                logins = try Self.logins(of: chosen.map(\.id), in: passwords)
            } catch {
                printError(error.message)
                throw ExitCode(ExitStatus.configError)
            }
        }
        var receipts: ReceiptLog?
        if let log {
            do {
                receipts = try ReceiptLog(path: log)
            } catch {
                printError(error.message)
                // sysexits.h EX_CANTCREAT: an output file cannot be created.
                throw ExitCode(73)
            }
        }
        let behaviour = MachineSimulator.Behaviour(
            winRate: winRate, firstGameWins: firstGameWins, ackDelay: ConfigDuration.parse(ackDelay) ?? .zero,
            resultDelay: ConfigDuration.parse(resultDelay) ?? .zero, offlineAfter: offlineAfter.flatMap(ConfigDuration.parse),
            offlineFor: ConfigDuration.parse(offlineFor) ?? .seconds(10), faultRate: faultRate,
            resetDelay: ConfigDuration.parse(resetDelay) ?? .zero, resultTimeout: config.game.resultTimeout)
        var services: [any Service] = []
        for machine in chosen {
            services.append(
                try MachineSimulator(machine: machine, settings: config.mqtt, login: logins[machine.id], behaviour: behaviour, receipts: receipts,
                    logger: logger))
        }
        logger.info("Simulating machines", metadata: ["machines": .string(chosen.map(\.id).joined(separator: ","))])
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await group.run()
    }
}

extension SimulateCommand {
    /// Why a passwords file cannot be used; the message never quotes a line,
    /// which would show a password.
    struct PasswordsProblem: Error {
        var message: String
    }

    /// The login of each machine in `machines`: its id and its password in
    /// `file` ("username password" lines, # comments, as make-site-secrets.sh
    /// writes them).
    static func logins(of machines: [String], in file: String) throws(PasswordsProblem) -> [String: MachineSimulator.Login] {
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw PasswordsProblem(message: "Cannot read the passwords file \(file): \(error.localizedDescription)")
        }
        var passwords: [String: String] = [:]
        for (index, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let fields = line.split(whereSeparator: \.isWhitespace)
            guard let first = fields.first, !first.hasPrefix("#") else { continue }
            guard fields.count == 2 else {
                throw PasswordsProblem(
                    message: "\(file), line \(index + 1): expected \"username password\", found \(fields.count) fields. Fix or remove the line.")
            }
            passwords[String(first)] = String(fields[1])
        }
        let missing = machines.filter { passwords[$0] == nil }
        guard missing.isEmpty else {
            throw PasswordsProblem(
                message: "\(file) has no password for machine \(missing.joined(separator: ", ")): each simulated PC logs in as its "
                    + "machine id. Add a line \"\(missing[0]) <password>\" (make-site-secrets.sh --add \(missing.joined(separator: " ")) makes them), "
                    + "or leave the machine out with --machine.")
        }
        return Dictionary(uniqueKeysWithValues: machines.map { ($0, MachineSimulator.Login(username: $0, password: passwords[$0] ?? "")) })
    }
}
