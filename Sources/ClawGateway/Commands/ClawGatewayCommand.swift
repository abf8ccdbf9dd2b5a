import ArgumentParser
import Foundation

/// `claw-gateway`: the command line of SPEC §7.
@main
struct ClawGatewayCommand: AsyncParsableCommand {
    static let version = "0.1.0"

    static let configuration = CommandConfiguration(
        commandName: "claw-gateway",
        abstract: "Bridges IM notifications from players' apps to claw machines over MQTT.",
        version: version,
        subcommands: [RunCommand.self, CheckConfigCommand.self, SimulateCommand.self, NotifyCommand.self, BridgeConfigCommand.self, RouteCommand.self, RecordCommand.self]
    )
}

/// `--config FILE`, shared by every subcommand.
struct ConfigOptions: ParsableArguments {
    @Option(name: .long, help: "The gateway.yaml to use.")
    var config: String = "gateway.yaml"

    /// The config, or the problems printed to stderr and exit status 78 (EX_CONFIG).
    func load() throws -> GatewayConfig {
        do {
            return try ConfigLoader.load(file: config)
        } catch {
            printError(error.description)
            throw ExitCode(ExitStatus.configError)
        }
    }
}

enum ExitStatus {
    /// sysexits.h EX_CONFIG: the configuration is unusable.
    static let configError: Int32 = 78
    /// sysexits.h EX_UNAVAILABLE: a service the command needs did not answer.
    static let unavailable: Int32 = 69
}

func printError(_ text: String) {
    var standardError = StandardError()
    print(text, to: &standardError)
}

private struct StandardError: TextOutputStream {
    mutating func write(_ string: String) {
        FileHandle.standardError.write(Data(string.utf8))
    }
}
