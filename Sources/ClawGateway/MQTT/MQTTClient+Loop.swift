import CMosquitto
import Foundation
import Logging

// The client's own thread: connecting, the network loop, and what the
// callbacks noted. The callbacks run inside libmosquitto's loop calls, which
// are made holding the client's lock (``MQTTClient/Guarded/locked(_:)``):
// they change ``MQTTClient/Core`` and only take note; the loop thread acts on the notes after it
// released the lock, so that hooks and handlers may publish.
extension MQTTClient {
    private var isStopping: Bool {
        core.withLock { core in
            if case .running = core.phase { return false }
            return true
        }
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
                    metadata: [
                        "mqtt.broker": "\(broker)", "mqtt.error": .string(error),
                        "mqtt.retry_in_s": "\(next == 0 || dropped ? delay : 0)", "mqtt.failures": "\(failures)",
                    ])
            }
            // The next node of a cluster is tried at once; the backoff waits
            // once all have failed in turn, and after every deliberate drop
            // (which would otherwise repeat as fast as the broker answers).
            guard next == 0 || dropped else { continue }
            wake.wait(timeout: .seconds(delay))
            delay = min(delay * 2, configuration.reconnectDelay.upperBound)
        }
        let waiters = core.withLock { core in
            setConnection(.down, &core)
            core.phase = .stopped
            defer { core.stopWaiters = [] }
            return core.stopWaiters
        }
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
            core.locked {
                core.withLock { setConnection(.down, &$0) }
                mosquitto_log_callback_set(mosq, mqttOnLog)
            }
        }
        core.withLock { $0.dropRequested = false }
        while true {
            enum Step { case poll, drop, stop }
            let step = core.locked { () -> Step in
                let step = core.withLock { core -> Step in
                    if stopDeadline == nil, case .running = core.phase, core.dropRequested {
                        core.dropRequested = false
                        return .drop
                    }
                    return stopDeadline == nil && core.phase != .running ? .stop : .poll
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
            let (socket, wantWrite) = core.locked { (mosquitto_socket(mosq), mosquitto_want_write(mosq)) }
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
            rc = core.locked { () -> Int32 in
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
            defer { core.noted = Noted() }
            return (core.noted, core.connectedHooks, core.subscribeAckHooks, core.handler)
        }
        if notes.connectedAgain {
            // libmosquitto formats a debug line for every packet while a log
            // callback is set; its warnings matter while connecting (TLS,
            // refusals), not on a working connection.
            core.locked { mosquitto_log_callback_set(handle.pointer, nil) }
            for hook in connectedHooks { hook() }
            core.withLock { core in
                if case .hooks(let generation) = core.connection { setConnection(.open(generation: generation), &core) }
            }
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

    // MARK: Callbacks (the loop thread, within the lock)

    func didConnect(reasonCode: Int32) {
        guard reasonCode == 0 else {
            // MQTT 3.1.1 CONNACK codes are not v5 reason codes (5 is "not authorised" there).
            let reason = String(
                cString: configuration.protocolVersion == .v5 ? mosquitto_reason_string(reasonCode) : mosquitto_connack_string(reasonCode))
            core.withLock { $0.lastError = "broker refused the connection: \(reason)" }
            logger.error("MQTT broker refused the connection", metadata: ["mqtt.reason": .string(reason)])
            return
        }
        let (count, broker, subscriptions) = core.withLock { core in
            core.generation += 1
            core.connects += 1
            core.lastError = nil
            core.pendingSubscribes = [:]
            core.noted.connectedAgain = true
            setConnection(.hooks(generation: core.generation), &core)
            return (core.connects, core.broker, core.subscriptions)
        }
        subscribeNow(subscriptions)
        logger.info(
            count == 1 ? "MQTT connected" : "MQTT reconnected",
            metadata: ["mqtt.broker": "\(broker)", "mqtt.connects": "\(count)"])
    }

    func didDisconnect(reasonCode: Int32) {
        let running = core.withLock { core -> Bool in
            setConnection(.down, &core)
            guard case .running = core.phase else { return false }
            if reasonCode != 0 { core.lastError = "connection lost: \(Mosquitto.describe(reasonCode))" }
            return true
        }
        guard running else { return }
        logger.warning("MQTT connection lost, reconnecting", metadata: ["mqtt.error": .string(Mosquitto.describe(reasonCode))])
    }

    func didSubscribe(mid: Int32, granted: [Int32]) {
        core.withLock { core in
            guard let topics = core.pendingSubscribes.removeValue(forKey: mid) else { return }
            var ack = MQTTSubscribeAck(granted: [], refused: [])
            for (offset, topic) in topics.enumerated() {
                // A missing code counts as refused: the broker did not grant it.
                let code = offset < granted.count ? granted[offset] : 0x80
                if code >= 0 && code <= 2 { ack.granted.append(topic) } else { ack.refused.append(topic) }
            }
            core.noted.subscribeAcks.append(ack)
        }
    }

    func didReceive(_ message: MQTTMessage) {
        core.withLock { $0.noted.messages.append(message) }
    }

    /// Whether a payload of `length` bytes is taken at all.
    func accepts(length: Int) -> Bool {
        guard let limit = configuration.maxInboundPayload, length > limit else { return true }
        let count = core.withLock { core in
            core.oversized += 1
            return core.oversized
        }
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
        core.withLock { $0.lastError = text }
        logger.warning("libmosquitto", metadata: ["mqtt.log": .string(text)])
    }
}
