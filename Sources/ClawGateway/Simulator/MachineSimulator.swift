import Foundation
import Logging
import Protocol
import ServiceLifecycle
import NIOConcurrencyHelpers

/// Stands in for one machine's PC (and camera switch): says `online` on its
/// retained `state` with an `offline` will, acknowledges every control and
/// camera message, and reports a result some time after each grab, echoing
/// the grab's `session` as a PC should (SPEC §2, "Sessions"). Each result
/// has a serial no run of the simulator uses twice (its start time, then a
/// count) and is repeated every 2 s until the gateway confirms it on
/// `result/ack`, for up to `result_timeout` (SPEC §4). A grab may
/// fault instead (`faultRate`): the board reports it on `claw/<m>/fault` and
/// refuses coins until a reset (1002) has brought it home (SPEC §12).
///
/// It logs in as the machine's own PC when given a ``Login`` (a site broker:
/// deploy/mosquitto.conf binds each client id to its username, so PCs that
/// shared the gateway's login would knock each other and the gateway off);
/// without one, with the config's `mqtt` credentials (the local demo broker).
struct MachineSimulator: Service {
    /// A PC's broker login: its machine id and its password.
    struct Login: Sendable {
        var username: String
        var password: String
    }

    struct Behaviour: Sendable {
        var winRate = 0.3
        /// The first grab of the run wins, whatever ``winRate`` says: a first
        /// game shows a win and its prize (README, "A first game").
        var firstGameWins = false
        var ackDelay: Duration = .milliseconds(20)
        var resultDelay: Duration = .seconds(3)
        /// Go offline (a clean `offline`) after this long online, for `offlineFor`; nil stays online.
        var offlineAfter: Duration?
        var offlineFor: Duration = .seconds(10)
        /// Chance that a grab faults (``faultCode``) instead of ending in a result.
        var faultRate = 0.0
        /// How long a reset takes before the PC says `online` again.
        var resetDelay: Duration = .seconds(1)
        /// How long a result not confirmed is repeated: `game.result_timeout`.
        var resultTimeout: Duration = .seconds(20)
    }

    /// The fault the simulated board reports: the claw did not come back up.
    static let faultCode = "claw_rise_timeout"

    let machine: MachineConfig
    let topics: MachineTopics
    let client: MQTTClient
    let behaviour: Behaviour
    /// Where every message received is written down, if anywhere.
    let receipts: ReceiptLog?
    let logger: Logger
    /// The board reported a fault and has not been reset since.
    private let faulted = NIOLockedValueBox(false)
    /// A grab has been played in this run.
    private let grabbed = NIOLockedValueBox(false)
    /// The results not confirmed yet, by serial; and the next serial.
    private let results: NIOLockedValueBox<Results>

    private struct Results: Sendable {
        var next: Int64
        var unconfirmed: [Int64: (payload: [UInt8], until: ContinuousClock.Instant)] = [:]
    }
    /// What is to be done later (an ack, a result), for ``run()``'s task group to
    /// carry out: no task outlives the simulator.
    private let later: (stream: AsyncStream<Later>, continuation: AsyncStream<Later>.Continuation)

    private struct Later: Sendable {
        var delay: Duration
        var action: @Sendable () -> Void
    }

    /// - Parameters:
    ///   - login: the PC's own credentials; nil uses those of `settings`.
    ///   - receipts: the log of what this PC receives (`simulate --log`).
    init(
        machine: MachineConfig, settings: MQTTSettings, login: Login? = nil, behaviour: Behaviour, receipts: ReceiptLog? = nil,
        logger: Logger
    ) throws(MQTTError) {
        let topics = MachineTopics(machine, Topics(prefix: settings.topicPrefix))
        var configuration = MQTTClientConfiguration(
            settings: settings,
            will: MQTTWill(topic: topics.state, payload: Array(Presence.offline.rawValue.utf8)))
        // A broker that binds client ids to usernames replaces this one.
        configuration.clientID = "claw-sim-\(machine.id)-\(UInt32.random(in: 0...UInt32.max))"
        if let login {
            configuration.username = login.username
            configuration.password = login.password
        }
        var logger = logger
        logger[metadataKey: "machine.id"] = .string(machine.id)
        self.machine = machine
        self.topics = topics
        self.client = try MQTTClient(configuration: configuration, logger: logger)
        self.behaviour = behaviour
        self.receipts = receipts
        self.logger = logger
        later = AsyncStream.makeStream()
        results = NIOLockedValueBox(Results(next: Self.firstResultSerial(startedAt: Date())))
    }

    /// The first result serial of a simulator started at `date`: its start
    /// time in seconds, then a count of a million a second, so that no run
    /// reuses a serial of an earlier one (SPEC §4) without keeping a file.
    static func firstResultSerial(startedAt date: Date) -> Int64 {
        Int64(date.timeIntervalSince1970) * 1_000_000 + 1
    }

    func run() async throws {
        let client = client, topics = topics
        client.onConnected { Self.say(.online, client: client, topics: topics) }
        client.onMessage { [self] message in handle(message) }
        client.subscribe(Array(Set([topics.control, topics.camera])), qos: .atMostOnce)
        // QoS 1: a confirmation published while this PC is away must not be lost to it.
        client.subscribe([topics.resultAck], qos: .atLeastOnce)
        client.start()
        await withTaskGroup(of: Void.self) { group in
            if let offlineAfter = behaviour.offlineAfter {
                group.addTask { await flap(every: offlineAfter) }
            }
            group.addTask { [later] in
                await withDiscardingTaskGroup { timers in
                    for await next in later.stream {
                        timers.addTask {
                            guard (try? await Task.sleep(for: next.delay)) != nil else { return }
                            next.action()
                        }
                    }
                }
            }
            try? await gracefulShutdown()
            Self.say(.offline, client: client, topics: topics)
            await client.shutdown()
            later.continuation.finish()
            group.cancelAll()
        }
    }

    /// One message for the PC, on the client's thread.
    private func handle(_ message: MQTTMessage) {
        if message.topic == topics.resultAck {
            confirmed(message)
            return
        }
        receipts?.record(
            machine: machine.id, topic: message.topic == topics.camera ? "camera" : "control", payload: message.payload)
        guard let command = try? WireMessage.decode(message.payload), let serial = command.serial else {
            logger.warning("Simulator ignored a message it cannot read", metadata: ["mqtt.topic": .string(message.topic)])
            return
        }
        logger.info(
            "Simulated machine received",
            metadata: ["mqtt.topic": .string(message.topic), "mqtt.payload": .string(String(decoding: message.payload, as: UTF8.self))])
        after(behaviour.ackDelay) { [client, topics] in
            _ = try? client.publish(topics.ack, payload: WireMessage(.ack, data: "ok", serial: serial).encoded(), qos: .atLeastOnce)
        }
        switch command.code {
        case .grab where Double.random(in: 0..<1) < behaviour.faultRate:
            faulted.withLockedValue { $0 = true }
            after(behaviour.resultDelay) { [self] in reportFault("The claw did not rise within its time") }
        case .addCoins where faulted.withLockedValue({ $0 }):
            // A faulted board takes no game: it says so again.
            after(behaviour.ackDelay) { [self] in reportFault("The board refuses to start: reset it first") }
        case .reset:
            after(behaviour.resetDelay) { [self] in
                faulted.withLockedValue { $0 = false }
                logger.notice("Simulated machine reset: the gantry is home")
                // A fresh online: the gateway takes the machine back into play.
                Self.say(.online, client: client, topics: topics)
            }
        case .grab:
            let first = grabbed.withLockedValue { grabbed in
                defer { grabbed = true }
                return !grabbed
            }
            let won = (first && behaviour.firstGameWins) || Double.random(in: 0..<1) < behaviour.winRate
            let session = command.session
            after(behaviour.resultDelay) { [self] in report(won: won, session: session) }
        default:
            break
        }
    }

    /// Publishes a result with the next serial, and repeats it until it is confirmed.
    private func report(won: Bool, session: String?) {
        let (serial, payload) = results.withLockedValue { results in
            let serial = results.next
            results.next += 1
            let payload = WireMessage(.result, data: String(won), serial: serial, session: session).encoded()
            results.unconfirmed[serial] = (payload, .now + behaviour.resultTimeout)
            return (serial, payload)
        }
        logger.info("Simulated machine reports a result", metadata: ["game.won": .stringConvertible(won), "mqtt.serial": "\(serial)"])
        _ = try? client.publish(topics.result, payload: payload, qos: .atLeastOnce)
        repeatResult(serial)
    }

    /// Publishes result `serial` again every 2 s while it is not confirmed, up to `result_timeout`.
    private func repeatResult(_ serial: Int64) {
        after(.seconds(ResultConfirmation.repeatSeconds)) { [self] in
            let payload = results.withLockedValue { results -> [UInt8]? in
                guard let pending = results.unconfirmed[serial] else { return nil }
                guard ContinuousClock.now < pending.until else {
                    results.unconfirmed[serial] = nil
                    return nil
                }
                return pending.payload
            }
            guard let payload else { return }
            logger.info("Simulated machine repeats a result not confirmed", metadata: ["mqtt.serial": "\(serial)"])
            _ = try? client.publish(topics.result, payload: payload, qos: .atLeastOnce)
            repeatResult(serial)
        }
    }

    /// The gateway's `result/ack`: that result is on disk; it is not repeated again.
    private func confirmed(_ message: MQTTMessage) {
        guard !message.retain, let confirmation = ResultConfirmation.decode(message.payload) else {
            logger.warning("Simulator ignored a result confirmation it cannot read", metadata: ["mqtt.topic": .string(message.topic)])
            return
        }
        let known = results.withLockedValue { $0.unconfirmed.removeValue(forKey: confirmation.serial) != nil }
        if known {
            logger.info("Simulated machine's result confirmed", metadata: ["mqtt.serial": "\(confirmation.serial)"])
        }
    }

    private func reportFault(_ text: String) {
        logger.warning("Simulated machine reports a fault", metadata: ["machine.fault": .string(Self.faultCode)])
        let report = JSONCoding.encode(MachineFaultReport(code: Self.faultCode, text: text))
        _ = try? client.publish(topics.fault, payload: report, qos: .atLeastOnce)
    }

    /// Goes offline and back, to show what players and operators see.
    private func flap(every period: Duration) async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: period)
                Self.say(.offline, client: client, topics: topics)
                logger.notice("Simulated machine offline")
                try await Task.sleep(for: behaviour.offlineFor)
                Self.say(.online, client: client, topics: topics)
                logger.notice("Simulated machine online")
            } catch {
                return
            }
        }
    }

    private func after(_ delay: Duration, _ action: @escaping @Sendable () -> Void) {
        guard delay > .zero else { return action() }
        later.continuation.yield(Later(delay: delay, action: action))
    }

    private static func say(_ presence: Presence, client: MQTTClient, topics: MachineTopics) {
        _ = try? client.publish(topics.state, payload: Array(presence.rawValue.utf8), qos: .atLeastOnce, retain: true)
    }
}
