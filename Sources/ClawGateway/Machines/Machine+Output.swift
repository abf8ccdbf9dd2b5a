import Foundation
import Logging
import Protocol

/// What a machine sends out: commands to its PC, the snapshot and events to
/// subscribers, replies to players; and the timers that make it send them.
extension Machine {
    /// Publishes a command to the PC at QoS 0, never retained; false when the
    /// broker is out of reach (the command is dropped, not queued).
    func publishToMachine(_ message: WireMessage, on topic: String) -> Bool {
        do {
            try environment.publisher.publish(topic, payload: message.encoded(), qos: .atMostOnce, retain: false)
            return true
        } catch {
            logger.warning(
                "Command not published", metadata: ["mqtt.topic": .string(topic), "mqtt.error": .string(error.message)])
            return false
        }
    }

    /// Publishes one event on `claw/<m>/events`, numbered and stamped.
    func emit(_ type: EventType, _ state: inout MachineState, _ fill: (inout GameEvent) -> Void = { _ in }) {
        state.eventSeq += 1
        var event = GameEvent(
            type: type, seq: state.eventSeq, ts: Timestamp.string(environment.clock.wallNow()), machine: id)
        fill(&event)
        GatewayMetrics.record(event)
        guard !state.stopped else { return }
        do {
            try environment.publisher.publish(topics.events, payload: event.encoded(), qos: .atMostOnce, retain: false)
        } catch where error.code == .notConnected {
            // Events are a live stream; while the broker is away there is no one to tell.
        } catch {
            logger.warning("Event not published", metadata: ["event.type": .string(type.rawValue), "error": .string(error.message)])
        }
    }

    /// Sorted keys: the same state always publishes the same bytes.
    static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    func snapshot(_ state: MachineState) -> QueueSnapshot {
        QueueSnapshot(
            machine: id, seq: state.snapshotSeq, state: state.status, online: state.online, paused: state.paused,
            player: state.turn.map { turn in
                CurrentPlayer(
                    accid: turn.player.accid, nick: turn.player.nick, session: turn.session,
                    deadline: Timestamp.string(environment.clock.wallTime(at: turn.deadline)))
            },
            waiting: state.waiting.map { WaitingPlayer(accid: $0.accid, nick: $0.nick) })
    }

    /// The retained snapshot, QoS 1. While the broker is away it is skipped:
    /// the gateway republishes every snapshot when it reconnects.
    func publishSnapshot(_ state: MachineState) {
        guard !state.stopped else { return }
        do {
            let payload = try Self.encoder.encode(snapshot(state))
            try environment.publisher.publish(topics.queue, payload: Array(payload), qos: .atLeastOnce, retain: true)
        } catch let error as MQTTError where error.code == .notConnected {
            logger.debug("Snapshot not published while disconnected")
        } catch {
            logger.warning("Snapshot not published", metadata: ["error": .string("\(error)")])
        }
    }

    func reply(_ player: String, _ message: WireMessage) {
        environment.players.send(message, to: player, from: config)
    }

    func reply(_ player: String, error: WireError, serial: Int64? = nil) {
        reply(player, WireMessage(.error, data: error.code.rawValue, serial: serial, message: error.message))
    }

    /// Answers a refused request with command 9 and records the drop.
    func reject(player: String, command: CommandCode?, serial: Int64?, _ error: WireError, _ state: inout MachineState) {
        reply(player, error: error, serial: serial)
        emit(.dropped, &state) {
            $0.player = player
            $0.command = command?.description
            $0.playerSerial = serial
            $0.reason = error.code.rawValue
        }
        logger.debug(
            "Request refused",
            metadata: [
                "player.accid": .string(player), "wire.command": .string(command?.description ?? "?"),
                "wire.error": .string(error.code.rawValue),
            ])
    }

    /// Sends command 8 to every waiting player whose position is not what it was.
    func tellPositions(_ state: inout MachineState, before: [String]) {
        var previous: [String: Int] = [:]
        for (index, accid) in before.enumerated() { previous[accid] = index }
        let length = state.waiting.count
        for (index, entry) in state.waiting.enumerated() where previous[entry.accid] != index {
            reply(entry.accid, WireMessage(.queuePosition, data: String(index + 1), length: length))
        }
    }

    // MARK: Timers

    /// Keeps exactly one timer task running for the deadline of the current turn.
    func armTurnTimer(_ state: inout MachineState) {
        let deadline = state.stopped ? nil : state.turn?.deadline
        guard state.timer?.deadline != deadline else { return }
        state.timer?.task.cancel()
        state.timer = nil
        guard let deadline else { return }
        state.timerGeneration += 1
        let generation = state.timerGeneration
        let clock = environment.clock
        let task = Task { [self] in
            do {
                try await clock.sleep(deadline)
            } catch {
                return
            }
            turnTimerFired(generation: generation)
        }
        state.timer = TurnTimer(generation: generation, deadline: deadline, task: task)
    }

    /// Starts the ack sweeper if acks are pending and none runs.
    func watchAcks(_ state: inout MachineState) {
        guard state.ackSweeper == nil, !state.acks.isEmpty, !state.stopped else { return }
        state.ackSweeper = Task { [self] in await sweepAcks() }
    }

    /// Reports every ack that has not come within `ack_timeout`, oldest first,
    /// sleeping until the next one is due; ends when none is pending.
    private func sweepAcks() async {
        let timeout = settings.ackTimeout
        while true {
            let next: Duration? = state.withLock { state in
                let now = environment.clock.now()
                while let (serial, pending) = state.acks.oldest() {
                    let due = pending.sentAt + timeout
                    guard due <= now else { return due }
                    _ = state.acks.remove(serial)
                    emit(.ackTimeout, &state) {
                        $0.player = pending.player
                        $0.command = pending.command.description
                        $0.serial = serial
                        $0.playerSerial = pending.playerSerial
                    }
                    logger.warning(
                        "Ack timed out",
                        metadata: ["mqtt.serial": .stringConvertible(serial), "wire.command": .string(pending.command.description)])
                }
                state.ackSweeper = nil
                return nil
            }
            guard let next else { return }
            do {
                try await environment.clock.sleep(next)
            } catch {
                return
            }
        }
    }
}
