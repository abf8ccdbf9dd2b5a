import ArgumentParser
import Foundation
import Yams

/// `claw-gateway check-config`: validates a config file of any of the three
/// roles and prints a summary, or every problem and exit status 78.
struct CheckConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check-config",
        abstract: "Validate a config: gateway.yaml (run), chain.yaml (route) or recorder.yaml (record); print a summary, or every problem and exit 78.",
        discussion: """
            The role is the file's own: a top-level `router:` section is a router's chain.yaml, `recorder:` a \
            recorder's recorder.yaml, anything else a gateway's gateway.yaml. --role says which instead.
            """
    )

    /// What a config file is for.
    enum Role: String, ExpressibleByArgument, CaseIterable {
        case gateway, router, recorder
    }

    @OptionGroup var options: ConfigOptions

    @Option(name: .long, help: "The file's role: gateway, router or recorder (default: from its top-level sections).")
    var role: Role?

    func run() async throws {
        let role = role ?? Self.role(of: options.config)
        do throws(ConfigError) {
            switch role {
            case .gateway:
                print(ConfigSummary(config: try ConfigLoader.load(file: options.config), file: options.config).text)
            case .router:
                print(Self.summary(try RouterConfig.load(file: options.config), file: options.config))
            case .recorder:
                print(Self.summary(try RecorderConfig.load(file: options.config), file: options.config))
            }
        } catch {
            printError("\(error.description)\n(checked as a \(role.rawValue)'s config\(self.role == nil ? ", from its top-level sections; --role says otherwise" : ""))")
            throw ExitCode(ExitStatus.configError)
        }
    }

    /// The role a file's top-level sections say; a gateway's when it cannot be read (its problems say why).
    static func role(of file: String) -> Role {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8),
            let top = (try? Yams.load(yaml: text)) as? [String: Any]
        else { return .gateway }
        if top["router"] != nil { return .router }
        if top["recorder"] != nil { return .recorder }
        return .gateway
    }

    static func summary(_ config: RouterConfig, file: String) -> String {
        let router = config.router
        return [
            "\(file): OK (a router's chain.yaml)",
            "http \(router.http.host):\(router.http.port), read token \(router.http.readToken == nil ? "off" : "on"), receipt timeout \(ConfigDuration.format(router.receiptTimeout))",
            summary(config.bus),
            "im: \([config.im.netease.map { _ in "netease" }, config.im.generic.map { _ in "generic" }].compactMap { $0 }.joined(separator: ", "))",
        ].joined(separator: "\n")
    }

    static func summary(_ config: RecorderConfig, file: String) -> String {
        let recorder = config.recorder
        return [
            "\(file): OK (a recorder's recorder.yaml)",
            "http \(recorder.http.host):\(recorder.http.port), read token \(recorder.http.readToken == nil ? "off" : "on")",
            "database \(recorder.database)",
            summary(config.bus),
        ].joined(separator: "\n")
            + (config.prizes.map { "\nprizes: the chain's, a delivered parcel's address forgotten after \(ConfigDuration.format($0.forgetAddress))" } ?? "")
    }

    private static func summary(_ bus: BusSettings) -> String {
        "bus \(bus.urls.map(\.description).joined(separator: ", "))\(bus.username.map { " as \($0)" } ?? ""), client id \(bus.clientID), topics \(bus.topicPrefix)/…"
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
        lines.append(
            "http \(config.http.host):\(config.http.port), admin routes \(config.http.hasAdmin ? "on" : "off"), "
                + "reads \(config.http.readsClosed ? "need a read token" : "open")"
                + (config.http.operators.isEmpty ? "" : ", operators \(config.http.operators.map { "\($0.name) (\($0.role.rawValue))" }.joined(separator: ", "))"))
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
                + "max queue \(game.maxQueue)"
                + (game.continueTimeout > .zero
                    ? ", continue \(ConfigDuration.format(game.continueTimeout)) (at most \(game.maxContinues) in a row)" : ", continue off"))
        lines.append("storage \(config.storage.path)")
        if let chain = config.chain { lines.append("chain: site \(chain.site), \(chain.bus.count) bus node(s)") }
        if let credits = config.credits {
            let wallets = config.chain == nil ? "kept here, top-ups signed with credits.topup_secret" : "the chain's, kept by its recorder"
            lines.append(
                "credits: \(credits.price) a game unless a machine says otherwise, wallets \(wallets), at most \(credits.maxTopup) a top-up"
                    + (credits.welcome > 0 ? ", \(credits.welcome) for a new tourist" : ""))
        }
        if let evidence = config.evidence {
            lines.append(
                "evidence: a clip of each camera per game into \(evidence.dir), kept \(ConfigDuration.format(evidence.keep)), "
                    + "at most \(EvidenceSettings.format(evidence.maxDisk)), keeping \(EvidenceSettings.format(evidence.minFree)) free")
        }
        if let prizes = config.prizes {
            lines.append(
                "prizes: low stock at \(prizes.lowAt), a delivered parcel's address forgotten after \(ConfigDuration.format(prizes.forgetAddress))")
        }
        lines.append("machines: \(config.machines.count)")
        for machine in config.machines {
            let cameras = machine.cameras.map(\.id).joined(separator: ",")
            let board = machine.settings.board
            let guarantee = machine.settings.guaranteeAfter
            lines.append(
                "  \(machine.id) \"\(machine.name)\" im \(machine.imAccount), cameras [\(cameras)], board: game time \(board.gameTime)s, "
                    + "claw \(board.claw.grab)/\(board.claw.top)/\(board.claw.move)/\(board.claw.max), lift \(board.liftHeight), "
                    + "full-power grab \(guarantee == 0 ? "off" : "after \(guarantee) lost")"
                    + (config.credits == nil ? "" : ", price \(machine.price ?? config.credits?.price ?? 0)")
                    + (machine.prize.map { ", prize \($0.id) \"\($0.name)\"\($0.exchange > 0 ? " (or \($0.exchange) credits)" : "")" } ?? ""))
        }
        return lines.joined(separator: "\n")
    }
}
