import CMosquitto
import Foundation
import Logging

// The client's own thread: connecting, the network loop, and what the
// callbacks noted. The callbacks run inside libmosquitto's calls and only
// post notes to the client's mailbox; every call made holding the client's
// lock (``MQTTClient/driving(_:)``) takes the notes into ``MQTTClient/Core``
// before letting go, and the loop thread acts on what they leave pending
// after it has let go, so that hooks and handlers may publish.
extension MQTTClient {
    private var isStopping: Bool {
        core.withLock { !$0.isRunning }
    }

    /// Connect, run the network loop until the connection ends, back off,
    /// again; until ``shutdown(timeout:)``.
    /// CONNECT to `broker`; with a v5 session that outlives its connection,
    /// its expiry interval goes with it.
    private func connect(_ mosq: OpaquePointer, to broker: MQTTBrokerAddress) -> Int32 {
        guard configuration.protocolVersion == .v5, !configuration.cleanSession, configuration.sessionExpiry > 0 else {
            return mosquitto_connect(mosq, broker.host, Int32(broker.port), Int32(configuration.keepalive))
        }
        var properties: OpaquePointer?
        defer { if properties != nil { mosquitto_property_free_all(&properties) } }
        mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_SESSION_EXPIRY_INTERVAL.rawValue), configuration.sessionExpiry)
        return mosquitto_connect_bind_v5(mosq, broker.host, Int32(broker.port), Int32(configuration.keepalive), nil, properties)
    }

    func runLoop() {
        loopThread.store(pthread_self(), ordering: .relaxed)
        let mosq = handle.pointer
        let brokers = configuration.brokers
        var next = 0
        var delay = configuration.reconnectDelay.lowerBound
        var failures = 0
        while !isStopping {
            let broker = brokers[next]
            core.withLock { $0.broker = broker }
            next = (next + 1) % brokers.count
            // Nobody else calls into the client while its connection is down.
            var rc = connect(mosq, to: broker)
            var dropped = false
            if rc == MOSQ_ERR_SUCCESS.rawValue {
                let connectsBefore = connectCount
                (rc, dropped) = serveConnection()
                if connectCount > connectsBefore, !dropped {
                    // Back off from the start again only after the broker said yes.
                    delay = configuration.reconnectDelay.lowerBound
                    failures = 0
                }
            }
            if isStopping { break }
            failures += 1
            let reason = Self.describeFailure(rc)
            let error = core.withLock { core in
                // A log line from libmosquitto (e.g. OpenSSL's) says more than the code.
                if core.lastError == nil || rc != MOSQ_ERR_TLS.rawValue { core.lastError = reason }
                return core.lastError ?? reason
            }
            // The first failure of each broker in a row, then every tenth.
            if failures <= brokers.count || failures % 10 == 0 {
                logger.warning(
                    "MQTT broker not reachable, retrying",
                    metadata: ErrorShape(code: "mqtt_unreachable", message: "The broker was not reached", cause: error).metadata([
                        "mqtt.broker": "\(broker)", "mqtt.retry_in_s": "\(next == 0 || dropped ? delay : 0)", "mqtt.failures": "\(failures)",
                    ]))
            }
            // The next node of a cluster is tried at once; the backoff waits
            // once all have failed in turn, and after every deliberate drop
            // (which would otherwise repeat as fast as the broker answers).
            guard next == 0 || dropped else { continue }
            wake.wait(timeout: .seconds(delay))
            delay = min(delay * 2, configuration.reconnectDelay.upperBound)
        }
        let waiters = core.withLock { $0.ended() }
        waiters.forEach { $0.resume() }
    }

    /// The network loop of one connection: poll without the lock, read,
    /// write and keep alive under it, then act on what the callbacks noted.
    /// Returns when the connection ends or, after a clean DISCONNECT, when
    /// the client stops; `dropped` when ``dropConnection(reason:)`` ended it.
    private func serveConnection() -> (rc: Int32, dropped: Bool) {
        let mosq = handle.pointer
        let clock = ContinuousClock()
        var stopDeadline: ContinuousClock.Instant?
        var rc = MOSQ_ERR_SUCCESS.rawValue
        defer {
            driving { core in
                core.lost()
                mosquitto_log_callback_set(mosq, mqttOnLog)
            }
        }
        core.withLock { $0.dropRequested = false }
        while true {
            enum Step { case poll, drop, stop }
            let step = driving { core -> Step in
                let step: Step
                if stopDeadline == nil, core.isRunning, core.dropRequested {
                    core.dropRequested = false
                    step = .drop
                } else {
                    step = stopDeadline == nil && !core.isRunning ? .stop : .poll
                }
                // The disconnect callback runs inside these calls.
                switch step {
                case .drop: _ = mosquitto_disconnect(mosq)
                case .stop: _ = mosquitto_disconnect_v5(mosq, 0, nil)
                case .poll: break
                }
                return step
            }
            switch step {
            case .drop: return (MOSQ_ERR_CONN_LOST.rawValue, true)
            case .stop: stopDeadline = clock.now.advanced(by: .seconds(2))
            case .poll: break
            }
            let (socket, wantWrite) = core.withLock { _ in (mosquitto_socket(mosq), mosquitto_want_write(mosq)) }
            guard socket >= 0 else { return (MOSQ_ERR_NO_CONN.rawValue, false) }
            if let stopDeadline, !wantWrite || clock.now > stopDeadline {
                // The DISCONNECT (and what was published before it) is written.
                return (MOSQ_ERR_SUCCESS.rawValue, false)
            }
            var fds = [
                pollfd(fd: socket, events: Int16(POLLIN) | (wantWrite ? Int16(POLLOUT) : 0), revents: 0),
                pollfd(fd: wake.descriptor, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&fds, 2, 1000)
            if ready < 0, errno != EINTR { return (MOSQ_ERR_ERRNO.rawValue, false) }
            if fds[1].revents != 0 { wake.clear() }
            let readable = fds[0].revents & Int16(POLLIN | POLLERR | POLLHUP) != 0
            let writable = fds[0].revents & Int16(POLLOUT) != 0
            rc = driving { _ -> Int32 in
                // On POLLOUT the read side runs too: a TLS handshake that wants
                // to write continues from loop_read (SSL_connect).
                if readable || writable {
                    let rc = mosquitto_loop_read(mosq, 1)
                    if rc != MOSQ_ERR_SUCCESS.rawValue { return rc }
                }
                if mosquitto_want_write(mosq) {
                    let rc = mosquitto_loop_write(mosq, 1)
                    if rc != MOSQ_ERR_SUCCESS.rawValue { return rc }
                }
                return mosquitto_loop_misc(mosq)
            }
            actOnNotes()
            if rc != MOSQ_ERR_SUCCESS.rawValue { return (rc, false) }
        }
    }

    /// What the callbacks noted: a new connection (run the hooks, then open
    /// it to everyone), SUBACKs, messages (hand them over). On the loop
    /// thread, without the lock, so the hooks and handlers may publish.
    private func actOnNotes() {
        let (notes, connectedHooks, ackHooks, handler) = core.withLock { core in
            defer { core.pending = Pending() }
            return (core.pending, core.connectedHooks, core.subscribeAckHooks, core.handler)
        }
        if notes.connectedAgain {
            // libmosquitto formats a debug line for every packet while a log
            // callback is set; its warnings matter while connecting (TLS,
            // refusals), not on a working connection.
            core.withLock { _ in mosquitto_log_callback_set(handle.pointer, nil) }
            for hook in connectedHooks { hook() }
            core.withLock { $0.hooksRan() }
        }
        for ack in notes.subscribeAcks {
            for hook in ackHooks { hook(ack) }
        }
        if let handler {
            for message in notes.messages { handler(message) }
        }
    }

    private static func describeFailure(_ rc: Int32) -> String {
        if rc == MOSQ_ERR_ERRNO.rawValue { return String(cString: strerror(errno)) }
        return Mosquitto.describe(rc)
    }

    // MARK: Callbacks (within a library call: they post notes, nothing else)

    func didConnect(reasonCode: Int32) { mailbox.post(.connack(reasonCode: reasonCode)) }

    func didDisconnect(reasonCode: Int32) { mailbox.post(.disconnected(reasonCode: reasonCode)) }

    func didSubscribe(mid: Int32, granted: [Int32]) { mailbox.post(.suback(mid: mid, granted: granted)) }

    func didReceive(_ message: MQTTMessage) { mailbox.post(.message(message)) }

    /// Whether a payload of `length` bytes is taken at all.
    func accepts(length: Int) -> Bool {
        guard let limit = configuration.maxInboundPayload, length > limit else { return true }
        let count = oversizedCount()
        warnings.warning(
            "oversized", "Oversized MQTT message dropped",
            [
                "mqtt.bytes": .stringConvertible(length), "mqtt.limit": .stringConvertible(limit),
                "mqtt.dropped_total": .stringConvertible(count),
            ], on: logger)
        return false
    }

    func didLog(level: Int32, _ text: String) {
        guard level & Int32(MOSQ_LOG_ERR | MOSQ_LOG_WARNING) != 0 else { return }
        mailbox.post(.log(text))
        logger.warning("libmosquitto", metadata: ["mqtt.log": .string(text)])
    }

    // MARK: The notes taken in (holding the lock)

    /// Takes what the callbacks noted into the state, in the order they
    /// noted it, by its named transitions. Holding the lock; a CONNACK's
    /// SUBSCRIBEs go out from here.
    func takeNotes(_ core: inout Core) {
        while case let notes = mailbox.take(), !notes.isEmpty {
            for note in notes { take(note, &core) }
        }
    }

    private func take(_ note: CallbackNote, _ core: inout Core) {
        switch note {
        case .connack(let reasonCode) where reasonCode != 0:
            // MQTT 3.1.1 CONNACK codes are not v5 reason codes (5 is "not authorised" there).
            let reason = String(
                cString: configuration.protocolVersion == .v5 ? mosquitto_reason_string(reasonCode) : mosquitto_connack_string(reasonCode))
            core.lastError = "broker refused the connection: \(reason)"
            logger.error(
                "MQTT broker refused the connection",
                metadata: ErrorShape(code: "mqtt_refused", message: "The broker refused the connection", cause: reason).metadata())
        case .connack:
            core.connected()
            subscribeNow(core.subscriptions, &core)
            logger.info(
                core.connects == 1 ? "MQTT connected" : "MQTT reconnected",
                metadata: ["mqtt.broker": "\(core.broker)", "mqtt.connects": "\(core.connects)"])
        case .disconnected(let reasonCode):
            let running = core.isRunning
            core.lost()
            guard running else { return }
            if reasonCode != 0 { core.lastError = "connection lost: \(Mosquitto.describe(reasonCode))" }
            logger.warning(
                "MQTT connection lost, reconnecting",
                metadata: ErrorShape(code: "mqtt_connection_lost", message: "The connection was lost", cause: Mosquitto.describe(reasonCode))
                    .metadata())
        case .suback(let mid, let granted):
            guard let topics = core.pendingSubscribes.removeValue(forKey: mid) else { return }
            var ack = MQTTSubscribeAck(granted: [], refused: [])
            for (offset, topic) in topics.enumerated() {
                // A missing code counts as refused: the broker did not grant it.
                let code = offset < granted.count ? granted[offset] : 0x80
                if code >= 0 && code <= 2 { ack.granted.append(topic) } else { ack.refused.append(topic) }
            }
            core.pending.subscribeAcks.append(ack)
        case .message(let message):
            core.pending.messages.append(message)
        case .log(let text):
            core.lastError = text
        }
    }
}
