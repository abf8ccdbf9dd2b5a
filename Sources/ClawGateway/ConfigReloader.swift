import Foundation
import Logging
import Protocol
import ServiceLifecycle
import Synchronization
import UnixSignals

/// `systemctl reload claw-gateway` (SIGHUP): reads `gateway.yaml` again and
/// applies what can change while games go on (SPEC §13).
///
/// A file with any problem is refused whole: every problem logged as
/// `check-config` prints it, and the running configuration stays. Otherwise
/// the arcade takes the machines and the game's settings
/// (``Arcade/reload(_:)``), the new machines' topics are subscribed, the
/// chain's directory and the dashboards learn the machines, keys that need a
/// restart are logged as such, and `config_reloaded` goes out on
/// `claw/gateway/events`. When a removed machine's last game is over it
/// leaves (``Arcade/departures``): its topics are unsubscribed and the
/// directory and the dashboards learn it.
final class ConfigReloader: Service, Sendable {
    /// The file read again on SIGHUP; nil listens for no signal (tests call ``reload(_:)``).
    let file: String?
    let arcade: Arcade
    let mqtt: MQTTClient
    let feed: ArcadeFeed
    let chainLink: ChainLink?
    let clock: GameClock
    let logger: Logger
    private let state: Mutex<(running: GatewayConfig, eventSeq: Int64)>

    init(
        file: String?, running: GatewayConfig, arcade: Arcade, mqtt: MQTTClient, feed: ArcadeFeed, chainLink: ChainLink?,
        clock: GameClock, logger: Logger
    ) {
        self.file = file
        self.arcade = arcade
        self.mqtt = mqtt
        self.feed = feed
        self.chainLink = chainLink
        self.clock = clock
        self.logger = logger
        state = Mutex((running, 0))
    }

    /// The configuration the gateway runs with, as the last reload left it.
    var running: GatewayConfig { state.withLock { $0.running } }

    func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                for await machine in arcade.departures { departed(machine) }
            }
            if let file {
                let hangups = await UnixSignalsSequence(trapping: .sighup)
                group.addTask { [self] in
                    for await _ in hangups { reload(file: file) }
                }
            }
            try? await gracefulShutdown()
            group.cancelAll()
        }
    }

    /// What one reload did.
    enum Outcome: Sendable {
        case applied(ConfigReloaded)
        case refused(ConfigError)
    }

    /// Reads `file` and applies it, or refuses it whole.
    @discardableResult
    func reload(file: String) -> Outcome {
        logger.notice("Reloading the configuration", metadata: ["config.file": .string(file)])
        do {
            return reload(try ConfigLoader.load(file: file))
        } catch {
            return refuse(error)
        }
    }

    /// Applies a config read and validated (what SIGHUP does after reading the file).
    @discardableResult
    func reload(_ file: GatewayConfig) -> Outcome {
        let before = running
        let change = ConfigChange(running: before, file: file)
        let machines: Arcade.Change
        do {
            machines = try arcade.reload(change.applied)
        } catch {
            return refuse(
                ConfigError(
                    file: self.file ?? "gateway.yaml",
                    problems: [ConfigProblem(path: "machines", message: "a new machine's state cannot be read from storage: \(error)")]))
        }
        let seq = state.withLock { state in
            state.running = change.applied
            state.eventSeq += 1
            return state.eventSeq
        }
        let added = arcade.machines.filter { machines.added.contains($0.id) }
        mqtt.subscribe(added.flatMap(\.subscriptions).map(\.topic), qos: .atLeastOnce)
        // Its retained snapshot, as every machine's after a connect.
        for machine in added { machine.republish(connection: mqtt.connection) }
        chainLink?.setDirectory(arcade.machines.map(\.config))
        if !machines.added.isEmpty || !machines.removed.isEmpty { feed.arcadeChanged() }
        for key in change.needsRestart {
            logger.warning("Changed in the file, applied at the next start", metadata: ["config.key": .string(key)])
        }
        for id in machines.stillLeaving {
            logger.warning(
                "A machine put back while it still finishes its last game stays out: reload again once it is gone",
                metadata: ["machine.id": .string(id)])
        }
        logger.notice(
            "Configuration reloaded",
            metadata: [
                "machines.added": .string(machines.added.joined(separator: ",")),
                "machines.removed": .string(machines.removed.joined(separator: ",")),
                "machines.changed": .string(machines.changed.joined(separator: ",")),
                "config.needs_restart": .string(change.needsRestart.joined(separator: ",")),
            ])
        GatewayMetrics.reloadsApplied.increment()
        let now = clock.wallNow()
        let event = ConfigReloaded(
            seq: seq, ts: Timestamp.string(now), added: machines.added, removed: machines.removed,
            changed: machines.changed, needsRestart: change.needsRestart, stillLeaving: machines.stillLeaving)
        // Every reload is in the audit trail, as `system` (SPEC §16): the machines before, and what it changed.
        let trail = AuditDraft.system(.reload, target: AuditTarget.config).entry(
            before: AuditValue(["machines": before.machines.map(\.id)]), after: AuditValue(event), at: now)
        _ = arcade.writer.submit([.audit(trail)], machine: -1)
        do {
            try mqtt.publish(arcade.topics.gatewayEvents, payload: JSONCoding.encode(event), qos: .atLeastOnce, retain: false, expiry: nil)
        } catch {
            logger.warning("Event config_reloaded not published", metadata: error.shape.metadata())
        }
        return .applied(event)
    }

    private func refuse(_ error: ConfigError) -> Outcome {
        for problem in error.problems {
            logger.error("Config problem", metadata: ["config.key": .string(problem.path), "config.problem": .string(problem.message)])
        }
        logger.error(
            "Reload refused: the file has problems; the running configuration stays",
            metadata: ["config.file": .string(error.file), "config.problems": .stringConvertible(error.problems.count)])
        GatewayMetrics.reloadsRefused.increment()
        return .refused(error)
    }

    /// A removed machine's last game is over and it left the arcade.
    private func departed(_ machine: Machine) {
        mqtt.unsubscribe(machine.subscriptions.map(\.topic))
        chainLink?.setDirectory(arcade.machines.map(\.config))
        feed.arcadeChanged()
        logger.notice("Machine gone", metadata: ["machine.id": .string(machine.id)])
    }
}
