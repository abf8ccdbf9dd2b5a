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
        // In this order, so that a second gateway on the same config fails
        // before it touches anything of the first one (SPEC §13):
        // 1. the storage's lock: one gateway per data;
        // 2. the HTTP port: the socket systemd passed (claw-gateway.socket
        //    holds the port across restarts), which must be http.listen's,
        //    or http.listen bound here;
        // 3. only then storage opened for writing (Gateway.build), and MQTT,
        //    the games and the camera recorders (the service group).
        let lock: InstanceLock
        let listener: HTTPListener
        do throws(StartupError) {
            lock = try InstanceLock.take(beside: config.storage.path)
            listener = try HTTPListener.take(config.http, environment: ProcessInfo.processInfo.environment, pid: getpid())
        } catch {
            printError(error.description)
            throw ExitCode(error.exitStatus)
        }
        HTTPListener.forgetActivation(listener)
        let gateway = try await Gateway.build(
            config: config, logger: logger, exportsMetrics: true, listener: listener, file: options.config)
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: gateway.services,
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger))
        logger.info("Gateway starting", metadata: ["gateway.version": .string(ClawGatewayCommand.version)])
        try await group.run()
        // Held until storage is closed: the group's last service closed it.
        lock.release()
        logger.info("Gateway stopped")
    }
}
