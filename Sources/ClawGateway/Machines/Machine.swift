import Foundation
import Logging
import Protocol
import Synchronization

/// One claw machine's game (SPEC §3): its queue, whose turn it is, the game
/// timers, the commands forwarded to its PC and the acks and results coming
/// back.
///
/// All of it is one ``MachineState`` behind a lock. Every entry point is a
/// named transition that runs under the lock from start to end, including the
/// MQTT publishes and the storage write it causes, so that what subscribers
/// see, what players are told and what is recorded happen in one order.
/// Nothing under the lock waits on the network: publishing hands the message
/// to libmosquitto, replies go to the player channel's own delivery.
final class Machine: Sendable {
    let config: MachineConfig
    let settings: GameSettings
    let topics: MachineTopics
    let environment: MachineEnvironment
    let logger: Logger
    let state: Mutex<MachineState>

    /// Reads the machine's queue back from storage (see ``GameStore/restore(machine:now:)``).
    /// The machine counts as offline until its PC's `state` says otherwise.
    init(config: MachineConfig, settings: GameSettings, topics: Topics, environment: MachineEnvironment)
        throws(StorageError)
    {
        self.config = config
        self.settings = settings
        self.topics = MachineTopics(config, topics)
        self.environment = environment
        var logger = environment.logger
        logger[metadataKey: "machine.id"] = .string(config.id)
        self.logger = logger
        let wall = environment.clock.wallNow()
        let restored = try environment.store.restore(machine: config.id, now: wall)
        if !restored.closedGames.isEmpty || !restored.requeuedOffers.isEmpty {
            logger.notice(
                "Games open at the last stop settled",
                metadata: [
                    "games.closed_no_result": .string(restored.closedGames.joined(separator: ",")),
                    "queue.requeued": .string(restored.requeuedOffers.joined(separator: ",")),
                ])
        }
        for entry in restored.queue {
            environment.players.remember(player: entry.accid, provider: entry.provider)
        }
        state = Mutex(MachineState(restored: restored, firstSerial: Int64(wall.timeIntervalSince1970 * 1000)))
    }

    var id: String { config.id }

    // MARK: Entry points

    /// A player's request for this machine, already decoded and checked
    /// against the machine's cameras. A refusal is answered to the player
    /// (command 9) here.
    func handle(_ request: PlayerRequest, from player: String, provider: String) -> RequestOutcome {
        transition { state, change in
            do throws(WireError) {
                switch request.command {
                case .join(let nick):
                    return try join(player, nick: nick, provider: provider, &state, &change)
                case .leave:
                    return try leave(player, &state, &change)
                case .accept(let session):
                    return try accept(player, session: session, &state, &change)
                case .decline(let session):
                    return try decline(player, session: session, &state, &change)
                case .move, .grab, .camera:
                    // A control command without a serial is refused while decoding.
                    return try control(request.command, serial: request.serial ?? 0, from: player, &state, &change)
                }
            } catch {
                reject(player: player, command: request.command.code, serial: request.serial, error, &state)
                return .rejected(error)
            }
        }
    }

    /// Answers a notification refused before it reached the game (a bad
    /// payload for this machine) the same way the game refuses requests.
    func refuse(player: String, command: CommandCode?, serial: Int64?, _ error: WireError) {
        state.withLock { state in
            reject(player: player, command: command, serial: serial, error, &state)
        }
    }

    /// The PC's (or camera switch's) command 5 on `claw/<m>/ack`.
    func handleAck(_ payload: [UInt8]) {
        guard let message = inbound(payload, expecting: .ack, on: topics.ack), let serial = message.serial else { return }
        state.withLock { state in
            settleAck(serial: serial, data: message.data, &state)
        }
    }

    /// The PC's command 4 on `claw/<m>/result`.
    func handleResult(_ payload: [UInt8]) {
        guard let message = inbound(payload, expecting: .result, on: topics.result) else { return }
        guard let data = message.data, let won = Bool(data) else {
            logger.warning("Result without data true or false ignored", metadata: ["mqtt.payload": .string(Self.text(payload))])
            return
        }
        transition { state, change in
            finishWithResult(won: won, data: data, &state, &change)
        }
    }

    /// The PC's retained presence on `claw/<m>/state`.
    func handlePresence(_ payload: [UInt8]) {
        let text = Self.text(payload).trimmingCharacters(in: .whitespacesAndNewlines)
        guard let presence = Presence(rawValue: text) else {
            logger.warning("Machine state neither online nor offline ignored", metadata: ["mqtt.payload": .string(text)])
            return
        }
        transition { state, change in
            switch presence {
            case .online: goOnline(&state, &change)
            case .offline: goOffline(&state, &change)
            }
        }
    }

    /// Publishes the retained snapshot as it is, e.g. after a reconnect.
    func republish() {
        state.withLock { state in publishSnapshot(state) }
    }

    /// Ends the machine's timers; nothing is published after this.
    func stop() {
        state.withLock { state in
            state.stopped = true
            state.timer?.task.cancel()
            state.timer = nil
            state.ackSweeper?.cancel()
            state.ackSweeper = nil
        }
    }

    /// The machine's state now, as its retained snapshot shows it (also what
    /// the read API and the metrics read).
    func currentSnapshot() -> QueueSnapshot {
        state.withLock { state in snapshot(state) }
    }

    // MARK: Admin

    /// Stops offering turns; the queue and a game in progress go on.
    @discardableResult
    func pause() -> Bool {
        transition { state, change in
            guard !state.paused else { return false }
            state.paused = true
            change.snapshotChanged = true
            emit(.paused, &state)
            return true
        }
    }

    @discardableResult
    func resume() -> Bool {
        transition { state, change in
            guard state.paused else { return false }
            state.paused = false
            change.snapshotChanged = true
            emit(.resumed, &state)
            return true
        }
    }

    /// Ends the current turn as `skipped`; false when nobody holds the machine.
    @discardableResult
    func skip() -> Bool {
        transition { state, change in
            guard let turn = state.turn else { return false }
            emit(.skipped, &state) { $0.player = turn.player.accid; $0.session = turn.session }
            endTurn(.skipped, &state, &change)
            return true
        }
    }

    /// Takes a player out of the queue, or ends their turn as `skipped`.
    @discardableResult
    func remove(player: String) -> Bool {
        transition { state, change in
            if let turn = state.turn, turn.player.accid == player {
                emit(.removed, &state) { $0.player = player; $0.session = turn.session }
                endTurn(.skipped, &state, &change)
                return true
            }
            guard let index = state.waiting.firstIndex(where: { $0.accid == player }) else { return false }
            state.waiting.remove(at: index)
            change.store.append(.dequeue(accid: player))
            emit(.removed, &state) { $0.player = player }
            return true
        }
    }

    // MARK: Helpers

    private func inbound(_ payload: [UInt8], expecting code: CommandCode, on topic: String) -> WireMessage? {
        do throws(WireError) {
            let message = try WireMessage.decode(payload)
            guard message.code == code else {
                logger.warning(
                    "Unexpected command on machine topic ignored",
                    metadata: ["mqtt.topic": .string(topic), "mqtt.payload": .string(Self.text(payload))])
                return nil
            }
            return message
        } catch {
            logger.warning(
                "Undecodable message on machine topic ignored",
                metadata: ["mqtt.topic": .string(topic), "mqtt.payload": .string(Self.text(payload)), "error": .string(error.message)])
            return nil
        }
    }

    static func text(_ payload: [UInt8]) -> String {
        String(decoding: payload.prefix(512), as: UTF8.self)
    }
}

/// A machine's topics, worked out once.
struct MachineTopics: Sendable {
    let control, camera, ack, result, state, queue, events: String

    init(_ machine: MachineConfig, _ topics: Topics) {
        control = topics.machine(machine.id, .control)
        camera = machine.cameraTopic ?? topics.machine(machine.id, .camera)
        ack = topics.machine(machine.id, .ack)
        result = topics.machine(machine.id, .result)
        state = topics.machine(machine.id, .state)
        queue = topics.machine(machine.id, .queue)
        events = topics.machine(machine.id, .events)
    }
}
