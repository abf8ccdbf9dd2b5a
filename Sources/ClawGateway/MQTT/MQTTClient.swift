import CMosquitto
import Foundation
import Logging
import NIOConcurrencyHelpers
import Synchronization

/// A message received from the broker.
struct MQTTMessage: Sendable, Equatable {
    var topic: String
    var payload: [UInt8]
    var retain: Bool
}

enum MQTTQoS: Int32, Sendable {
    case atMostOnce = 0
    case atLeastOnce = 1
}

enum MQTTProtocolVersion: Sendable {
    /// What the site broker speaks: message expiry, reason codes.
    case v5
    /// What a NATS cluster speaks: it refuses MQTT v5 connections.
    case v311
}

/// One broker of a cluster: the client tries them in turn.
struct MQTTBrokerAddress: Sendable, Equatable, CustomStringConvertible {
    var host: String
    var port: Int

    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// A SUBACK: which topics of one SUBSCRIBE the broker granted and which it
/// refused (return code 0x80).
struct MQTTSubscribeAck: Sendable, Equatable {
    var granted: [String]
    var refused: [String]
}

/// What the broker publishes for this client when it disappears without a
/// clean disconnect.
struct MQTTWill: Sendable {
    var topic: String
    var payload: [UInt8]
    var qos: MQTTQoS = .atLeastOnce
    var retain: Bool = true
}

struct MQTTClientConfiguration: Sendable {
    var host: String
    var port: Int
    var clientID: String
    var username: String?
    var password: String?
    /// Seconds.
    var keepalive: Int = 30
    var tls: TLSSettings?
    var will: MQTTWill?
    /// Seconds between reconnect attempts, doubling from the lower bound up to the upper.
    var reconnectDelay: ClosedRange<Int> = 1...30
    /// Inbound payloads larger than this are dropped before they are copied; nil takes any.
    var maxInboundPayload: Int?
    /// Further brokers of the same cluster, tried in turn after `host`:`port`
    /// when one cannot be reached or a connection ends.
    var alternates: [MQTTBrokerAddress] = []
    var protocolVersion: MQTTProtocolVersion = .v5
    /// False: the broker keeps the session (subscriptions, QoS 1 messages
    /// for it) while the client is away, under its client id.
    var cleanSession = true

    /// Every broker, in the order they are tried.
    var brokers: [MQTTBrokerAddress] { [MQTTBrokerAddress(host: host, port: port)] + alternates }

    init(settings: MQTTSettings, will: MQTTWill?) {
        host = settings.url.host
        port = settings.url.port
        clientID = settings.clientID
        username = settings.username
        password = settings.password
        keepalive = settings.keepalive
        tls = settings.url.usesTLS ? (settings.tls ?? TLSSettings()) : nil
        self.will = will
    }

    init(host: String, port: Int, clientID: String) {
        self.host = host
        self.port = port
        self.clientID = clientID
    }
}

/// An MQTT v5 (or 3.1.1) client over libmosquitto.
///
/// - Connects in the background and keeps reconnecting with exponential
///   backoff, whatever the failure: the broker down at start, a lost
///   connection, a refused CONNACK, a TLS error. With several brokers (a
///   cluster), a failed one is followed at once by the next; the backoff
///   is slept once every broker has failed in turn.
/// - After every (re)connect it resubscribes and runs the connected hooks;
///   every SUBACK goes to the hook given to ``onSubscribeAck(_:)``. Until
///   the hooks have run, only they publish: other threads wait for them.
/// - ``publish(_:payload:qos:retain:expiry:)`` writes to the socket from the
///   caller's thread, or fails at once while disconnected: nothing is left
///   queued inside the library for later, and no thread is woken to send it.
/// - Inbound messages go to the handler given to ``onMessage(_:)``, called
///   on the client's own thread, or else to ``messages``.
///
/// libmosquitto 2.0.11 does not protect a client's socket or TLS session
/// against use from two threads at once (nothing guards `mosq->sock` or
/// `mosq->ssl`; a read error closes them under no lock). So the client runs
/// libmosquitto unthreaded (`mosq_ts_none`, where a publish writes from the
/// calling thread) and holds one lock of its own, `io`, around every call
/// into the library but `connect`, which runs only while no one else may
/// touch the client. Its own thread waits in `poll` without the lock and
/// drives `mosquitto_loop_read`/`write`/`misc` under it. Callbacks run inside
/// those calls, under the lock, so they only take note; what they noted
/// (messages, a new connection) is handled after the lock is released.
///
/// The thread is this client's rather than `mosquitto_loop_start`'s:
/// libmosquitto's own never retries a first connect that failed (upstream
/// issue #1903) and ends for good after a refused MQTT v5 CONNACK or a TLS
/// error, where an operator expects the gateway to keep trying.
final class MQTTClient: Sendable {
    let messages: AsyncStream<MQTTMessage>
    private let continuation: AsyncStream<MQTTMessage>.Continuation
    private let configuration: MQTTClientConfiguration
    private let handle: MosquittoHandle
    private let logger: Logger
    /// Serialises every call into libmosquitto (see the type's documentation).
    /// A pthread mutex, which sleeps when taken: the sections hold a socket
    /// write, and spinning through one (as `Mutex` does) cost more CPU than
    /// the write itself under load.
    private let io = NIOLock()
    /// A CONNACK said yes and the connection has not ended. Written only
    /// under `io` (in callbacks or by the loop thread); read anywhere.
    private let connected = Atomic<Bool>(false)
    /// Which connection publishes go on: one more with every CONNACK, set
    /// under `io` (in the callback), read under it by ``publish``.
    private let generation = Atomic<Int>(0)
    /// The connected hooks of the current connection have run. Until then
    /// only the loop thread (the hooks themselves) publishes: a command that
    /// reached the new connection before the hooks had ended the games of
    /// coins lost with the old one would reach a PC that never got its coin.
    private let open = Atomic<Bool>(false)
    /// The loop thread's `pthread_self()`, to let its hooks publish before ``open``.
    private let loopThread = Atomic<UInt>(0)
    private let state = Mutex(State())
    /// What callbacks noted, under `io`, for the loop thread to act on after.
    private let noted = Mutex(Noted())
    /// Wakes the loop thread from `poll` (shutdown, output waiting) and from a backoff sleep.
    private let wake: WakePipe

    private struct State {
        enum Phase {
            case idle
            /// The loop thread is connecting or connected.
            case running
            /// Shutdown asked; the loop thread is sending DISCONNECT and ending.
            case stopping
            /// The loop thread has ended.
            case stopped
        }

        var phase: Phase = .idle
        var subscriptions: [(topic: String, qos: MQTTQoS)] = []
        var connectedHooks: [@Sendable () -> Void] = []
        var handler: (@Sendable (MQTTMessage) -> Void)?
        /// Resumed when the loop thread ends.
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
        /// The last error libmosquitto or the broker reported, for operators.
        var lastError: String?
        var connects = 0
        var droppedMessages = 0
        var subscribeAckHooks: [@Sendable (MQTTSubscribeAck) -> Void] = []
        /// The topics of each SUBSCRIBE not yet acknowledged, by message id.
        var pendingSubscribes: [Int32: [String]] = [:]
        /// The broker connected to, or being tried.
        var broker = MQTTBrokerAddress(host: "", port: 0)
    }

    /// ``dropConnection(reason:)`` asked; the loop thread disconnects.
    private let dropRequested = Atomic<Bool>(false)

    /// Inbound messages dropped in the callback for being over ``MQTTClientConfiguration/maxInboundPayload``.
    private let oversized = Atomic<Int>(0)
    private let warnings = LogLimiter()

    /// Inbound messages dropped so far for being too large.
    var oversizedMessages: Int { oversized.load(ordering: .relaxed) }

    private struct Noted {
        var messages: [MQTTMessage] = []
        /// A CONNACK said yes since the loop thread last looked.
        var connectedAgain = false
        var subscribeAcks: [MQTTSubscribeAck] = []
    }

    init(configuration: MQTTClientConfiguration, logger: Logger) throws(MQTTError) {
        _ = Mosquitto.initialized
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "mqtt.client_id"] = .string(configuration.clientID)
        self.logger = logger
        (messages, continuation) = AsyncStream.makeStream(of: MQTTMessage.self, bufferingPolicy: .bufferingOldest(100_000))
        guard let wake = WakePipe() else {
            throw MQTTError(code: .library, message: "pipe failed: \(String(cString: strerror(errno)))")
        }
        self.wake = wake
        guard let pointer = mosquitto_new(configuration.clientID, configuration.cleanSession, nil) else {
            throw MQTTError(code: .library, message: "mosquitto_new failed (out of memory or a bad client id).")
        }
        handle = MosquittoHandle(pointer)
        try configure()
    }

    private func configure() throws(MQTTError) {
        let mosq = handle.pointer
        if let error = MQTTError.check(
            mosquitto_int_option(
                mosq, MOSQ_OPT_PROTOCOL_VERSION,
                Int32(configuration.protocolVersion == .v5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311)),
            "MQTT protocol version", code: .configuration)
        {
            throw error
        }
        mosquitto_int_option(mosq, MOSQ_OPT_TCP_NODELAY, 1)
        // Unthreaded: a publish writes from the caller's thread, under `io`.
        mosquitto_threaded_set(mosq, false)
        if configuration.username != nil || configuration.password != nil {
            if let error = MQTTError.check(
                mosquitto_username_pw_set(mosq, configuration.username, configuration.password), "username and password",
                code: .configuration)
            {
                throw error
            }
        }
        if let tls = configuration.tls {
            let capath = tls.caFile == nil ? "/etc/ssl/certs" : nil
            if let error = MQTTError.check(
                mosquitto_tls_set(mosq, tls.caFile, capath, tls.certFile, tls.keyFile, nil), "TLS files", code: .configuration)
            {
                throw error
            }
        }
        if let will = configuration.will {
            let rc = will.payload.withUnsafeBytes { bytes in
                mosquitto_will_set_v5(mosq, will.topic, Int32(bytes.count), bytes.baseAddress, will.qos.rawValue, will.retain, nil)
            }
            if let error = MQTTError.check(rc, "last will on \(will.topic)", code: .configuration) { throw error }
        }
        mosquitto_connect_v5_callback_set(mosq, mqttOnConnect)
        mosquitto_disconnect_v5_callback_set(mosq, mqttOnDisconnect)
        mosquitto_message_v5_callback_set(mosq, mqttOnMessage)
        mosquitto_subscribe_v5_callback_set(mosq, mqttOnSubscribe)
        mosquitto_log_callback_set(mosq, mqttOnLog)
    }

    // MARK: Public surface

    var isConnected: Bool { connected.load(ordering: .acquiring) }

    /// How many times a connection has been established, the first included.
    var connectCount: Int { state.withLock { $0.connects } }

    /// The last error reported by libmosquitto or the broker, if any since the last connect.
    var lastError: String? { state.withLock { $0.lastError } }

    /// Runs `hook` after every successful (re)connect, after resubscribing,
    /// on the client's thread.
    func onConnected(_ hook: @escaping @Sendable () -> Void) {
        state.withLock { $0.connectedHooks.append(hook) }
    }

    /// The broker connected to, or being tried now.
    var broker: MQTTBrokerAddress { state.withLock { $0.broker } }

    /// Runs `hook` with every SUBACK, on the client's thread: a refused
    /// subscription is otherwise silent (the connection stays up).
    func onSubscribeAck(_ hook: @escaping @Sendable (MQTTSubscribeAck) -> Void) {
        state.withLock { $0.subscribeAckHooks.append(hook) }
    }

    /// Ends the current connection (with a DISCONNECT) and connects again,
    /// to the next broker, after the backoff: for a connection that is up
    /// but useless (a refused subscription, a peer gone silent).
    func dropConnection(reason: String) {
        guard connected.load(ordering: .acquiring) else { return }
        state.withLock { $0.lastError = reason }
        dropRequested.store(true, ordering: .releasing)
        wake.signal()
    }

    /// Hands every inbound message to `handler`, on the client's thread,
    /// instead of ``messages``. Set it before ``start()``.
    func onMessage(_ handler: @escaping @Sendable (MQTTMessage) -> Void) {
        state.withLock { $0.handler = handler }
    }

    /// Subscribes now if connected, and again after every reconnect.
    func subscribe(_ topics: [String], qos: MQTTQoS) {
        state.withLock { $0.subscriptions += topics.map { ($0, qos) } }
        io.withLock {
            if connected.load(ordering: .acquiring) { subscribeNow(topics.map { ($0, qos) }) }
        }
        wake.signal()
    }

    /// Starts connecting in the background; returns at once.
    func start() {
        let starting = state.withLock { state -> Bool in
            guard case .idle = state.phase else { return false }
            state.phase = .running
            return true
        }
        guard starting else { return }
        mosquitto_user_data_set(handle.pointer, Unmanaged.passUnretained(self).toOpaque())
        // The thread's closure keeps `self` alive until the thread ends.
        let thread = Thread { self.runLoop() }
        thread.name = "mqtt-loop"
        thread.start()
    }

    /// Publishes one message, or throws at once: ``MQTTError/Code/notConnected``
    /// while the broker is unreachable (nothing is queued for later).
    ///
    /// - Parameter expiry: MQTT v5 message expiry interval in seconds; MQTT
    ///   3.1.1 has none, and it is left out there.
    /// The connection publishes go on now: one more with every (re)connect.
    var connection: Int { generation.load(ordering: .acquiring) }

    /// Publishes now, or throws; returns the ``connection`` it went on.
    @discardableResult
    func publish(_ topic: String, payload: [UInt8], qos: MQTTQoS = .atMostOnce, retain: Bool = false, expiry: UInt32? = nil)
        throws(MQTTError) -> Int
    {
        guard connected.load(ordering: .acquiring) else { throw .notConnected(topic) }
        if !open.load(ordering: .acquiring), pthread_self() != loopThread.load(ordering: .relaxed) {
            guard waitUntilOpen() else { throw .notConnected(topic) }
        }
        var properties: OpaquePointer?
        defer { if properties != nil { mosquitto_property_free_all(&properties) } }
        if let expiry, configuration.protocolVersion == .v5 {
            mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), expiry)
        }
        let (rc, backlog, connection) = topic.withCString { name in
            payload.withUnsafeBytes { bytes in
                io.withLock { () -> (Int32, Bool, Int) in
                    // The connection may have ended since the check above.
                    guard connected.load(ordering: .acquiring) else { return (MOSQ_ERR_NO_CONN.rawValue, false, 0) }
                    let rc = mosquitto_publish_v5(
                        handle.pointer, nil, name, Int32(bytes.count), bytes.baseAddress, qos.rawValue, retain, properties)
                    return (rc, mosquitto_want_write(handle.pointer), generation.load(ordering: .relaxed))
                }
            }
        }
        // The socket was full: the rest waits for the loop thread's poll.
        if backlog { wake.signal() }
        if let error = MQTTError.check(rc, "publish to \(topic)") { throw error }
        return connection
    }

    /// Waits, on a publisher's thread, while a new connection runs its
    /// connected hooks (a few milliseconds); false when it ended instead, or
    /// the hooks took over two seconds.
    private func waitUntilOpen() -> Bool {
        let deadline = ContinuousClock.now + .seconds(2)
        while connected.load(ordering: .acquiring) {
            if open.load(ordering: .acquiring) { return true }
            if ContinuousClock.now > deadline { return false }
            usleep(100)
        }
        return false
    }

    /// Disconnects cleanly (no last will), ends the loop thread and
    /// ``messages``. Publish anything that must go out (such as `offline`)
    /// before calling this: it is sent ahead of the DISCONNECT.
    ///
    /// Waits up to `timeout` for the loop thread, which may be inside a
    /// blocking connect to an unreachable broker; past that it ends on its own.
    func shutdown(timeout: Duration = .seconds(5)) async {
        let wasRunning = state.withLock { state -> Bool in
            guard case .running = state.phase else {
                if case .idle = state.phase { state.phase = .stopped }
                return false
            }
            state.phase = .stopping
            return true
        }
        if wasRunning {
            wake.signal()
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.waitUntilStopped() }
                group.addTask { try? await Task.sleep(for: timeout) }
                await group.next()
                group.cancelAll()
            }
        }
        closeConnection()
        continuation.finish()
        logger.debug("MQTT client stopped")
    }

    private func waitUntilStopped() async {
        await withCheckedContinuation { continuation in
            let stopped = state.withLock { state -> Bool in
                if case .stopped = state.phase { return true }
                state.stopWaiters.append(continuation)
                return false
            }
            if stopped { continuation.resume() }
        }
    }

    // MARK: The loop thread

    private var isStopping: Bool {
        state.withLock { state in
            if case .running = state.phase { return false }
            return true
        }
    }

    /// Connect, run the network loop until the connection ends, back off,
    /// again; until ``shutdown(timeout:)``.
    private func runLoop() {
        loopThread.store(pthread_self(), ordering: .relaxed)
        let mosq = handle.pointer
        let brokers = configuration.brokers
        var next = 0
        var delay = configuration.reconnectDelay.lowerBound
        var failures = 0
        while !isStopping {
            let broker = brokers[next]
            state.withLock { $0.broker = broker }
            next = (next + 1) % brokers.count
            // Nobody else calls into the client while it is not connected.
            var rc = mosquitto_connect(mosq, broker.host, Int32(broker.port), Int32(configuration.keepalive))
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
            let error = state.withLock { state in
                // A log line from libmosquitto (e.g. OpenSSL's) says more than the code.
                if state.lastError == nil || rc != MOSQ_ERR_TLS.rawValue { state.lastError = reason }
                return state.lastError ?? reason
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
        closeConnection()
        let waiters = state.withLock { state in
            state.phase = .stopped
            defer { state.stopWaiters = [] }
            return state.stopWaiters
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
            io.withLock {
                closeConnection()
                mosquitto_log_callback_set(mosq, mqttOnLog)
            }
        }
        dropRequested.store(false, ordering: .releasing)
        while true {
            if stopDeadline == nil, !isStopping, dropRequested.exchange(false, ordering: .acquiringAndReleasing) {
                io.withLock { _ = mosquitto_disconnect(mosq) }
                return (MOSQ_ERR_CONN_LOST.rawValue, true)
            }
            if stopDeadline == nil, isStopping {
                stopDeadline = clock.now.advanced(by: .seconds(2))
                io.withLock { _ = mosquitto_disconnect_v5(mosq, 0, nil) }
            }
            let (socket, wantWrite) = io.withLock { (mosquitto_socket(mosq), mosquitto_want_write(mosq)) }
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
            rc = io.withLock { () -> Int32 in
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

    /// What the callbacks noted under `io`: a new connection (run the hooks),
    /// messages (hand them over). Runs on the loop thread without `io`, so
    /// the hooks and handlers may publish.
    private func actOnNotes() {
        let notes = noted.withLock { noted in
            defer { noted = Noted() }
            return noted
        }
        if notes.connectedAgain {
            // libmosquitto formats a debug line for every packet while a log
            // callback is set; its warnings matter while connecting (TLS,
            // refusals), not on a working connection.
            io.withLock { mosquitto_log_callback_set(handle.pointer, nil) }
            let hooks = state.withLock { $0.connectedHooks }
            for hook in hooks { hook() }
            if connected.load(ordering: .acquiring) { open.store(true, ordering: .releasing) }
        }
        if !notes.subscribeAcks.isEmpty {
            let hooks = state.withLock { $0.subscribeAckHooks }
            for ack in notes.subscribeAcks {
                for hook in hooks { hook(ack) }
            }
        }
        guard !notes.messages.isEmpty else { return }
        if let handler = state.withLock({ $0.handler }) {
            for message in notes.messages { handler(message) }
            return
        }
        for message in notes.messages {
            if case .dropped = continuation.yield(message) {
                let dropped = state.withLock { state in
                    state.droppedMessages += 1
                    return state.droppedMessages
                }
                if dropped == 1 || dropped % 1000 == 0 {
                    logger.error("Inbound MQTT messages dropped: the gateway is not keeping up", metadata: ["mqtt.dropped": "\(dropped)"])
                }
            }
        }
    }

    /// The connection has ended (or never was): nobody publishes on it.
    private func closeConnection() {
        open.store(false, ordering: .releasing)
        connected.store(false, ordering: .releasing)
    }

    // MARK: Callbacks (the loop thread, under `io`)

    fileprivate func didConnect(reasonCode: Int32) {
        guard reasonCode == 0 else {
            // MQTT 3.1.1 CONNACK codes are not v5 reason codes (5 is "not authorised" there).
            let reason = String(
                cString: configuration.protocolVersion == .v5 ? mosquitto_reason_string(reasonCode) : mosquitto_connack_string(reasonCode))
            state.withLock { $0.lastError = "broker refused the connection: \(reason)" }
            logger.error("MQTT broker refused the connection", metadata: ["mqtt.reason": .string(reason)])
            return
        }
        generation.add(1, ordering: .releasing)
        connected.store(true, ordering: .releasing)
        let (subscriptions, count, broker) = state.withLock { state in
            state.connects += 1
            state.lastError = nil
            state.pendingSubscribes = [:]
            return (state.subscriptions, state.connects, state.broker)
        }
        logger.info(
            count == 1 ? "MQTT connected" : "MQTT reconnected",
            metadata: ["mqtt.broker": "\(broker)", "mqtt.connects": "\(count)"])
        subscribeNow(subscriptions)
        noted.withLock { $0.connectedAgain = true }
    }

    fileprivate func didDisconnect(reasonCode: Int32) {
        closeConnection()
        let stopping = state.withLock { state -> Bool in
            if case .running = state.phase {
                if reasonCode != 0 { state.lastError = "connection lost: \(Mosquitto.describe(reasonCode))" }
                return false
            }
            return true
        }
        guard !stopping else { return }
        logger.warning("MQTT connection lost, reconnecting", metadata: ["mqtt.error": .string(Mosquitto.describe(reasonCode))])
    }

    fileprivate func didSubscribe(mid: Int32, granted: [Int32]) {
        guard let topics = state.withLock({ $0.pendingSubscribes.removeValue(forKey: mid) }) else { return }
        var ack = MQTTSubscribeAck(granted: [], refused: [])
        for (offset, topic) in topics.enumerated() {
            // A missing code counts as refused: the broker did not grant it.
            let code = offset < granted.count ? granted[offset] : 0x80
            if code >= 0 && code <= 2 { ack.granted.append(topic) } else { ack.refused.append(topic) }
        }
        noted.withLock { $0.subscribeAcks.append(ack) }
    }

    fileprivate func didReceive(_ message: MQTTMessage) {
        noted.withLock { $0.messages.append(message) }
    }

    /// Whether a payload of `length` bytes is taken at all.
    fileprivate func accepts(length: Int) -> Bool {
        guard let limit = configuration.maxInboundPayload, length > limit else { return true }
        let count = oversized.add(1, ordering: .relaxed).newValue
        warnings.log("oversized") { heldBack in
            logger.warning(
                "Oversized MQTT message dropped",
                metadata: [
                    "mqtt.bytes": .stringConvertible(length), "mqtt.limit": .stringConvertible(limit),
                    "mqtt.dropped_total": .stringConvertible(count), "log.held_back": .stringConvertible(heldBack),
                ])
        }
        return false
    }

    fileprivate func didLog(level: Int32, _ text: String) {
        guard level & Int32(MOSQ_LOG_ERR | MOSQ_LOG_WARNING) != 0 else { return }
        state.withLock { $0.lastError = text }
        logger.warning("libmosquitto", metadata: ["mqtt.log": .string(text)])
    }

    /// Must hold `io` (a callback, or a caller that took it).
    private func subscribeNow(_ subscriptions: [(topic: String, qos: MQTTQoS)]) {
        for qos in [MQTTQoS.atMostOnce, .atLeastOnce] {
            let topics = subscriptions.filter { $0.qos == qos }.map(\.topic)
            // Batches keep each SUBSCRIBE packet small for sites with many machines.
            for start in stride(from: 0, to: topics.count, by: 100) {
                let batch = topics[start..<min(start + 100, topics.count)]
                let strings = batch.map { strdup($0) }
                defer { strings.forEach { free($0) } }
                var mid: Int32 = 0
                let rc = strings.withUnsafeBufferPointer { pointers in
                    mosquitto_subscribe_multiple(handle.pointer, &mid, Int32(pointers.count), pointers.baseAddress, qos.rawValue, 0, nil)
                }
                if let error = MQTTError.check(rc, "subscribe to \(batch.first ?? "")…") {
                    logger.error("MQTT subscribe failed", metadata: ["mqtt.error": .string(error.message)])
                } else {
                    state.withLock { $0.pendingSubscribes[mid] = Array(batch) }
                }
            }
        }
    }

    private static func describeFailure(_ rc: Int32) -> String {
        if rc == MOSQ_ERR_ERRNO.rawValue { return String(cString: strerror(errno)) }
        return Mosquitto.describe(rc)
    }
}

/// The `struct mosquitto *` of one client.
///
/// `@unchecked Sendable`: every call into the library through it is made
/// under the client's `io` lock, or by the client's loop thread while no
/// other thread may call (see ``MQTTClient``). The handle is destroyed only
/// here, when nothing can reach it any more (the loop thread holds the
/// client, which holds this).
private final class MosquittoHandle: @unchecked Sendable {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        mosquitto_destroy(pointer)
    }
}

/// A self-pipe: another thread writes a byte to wake a `poll` on the read end.
private final class WakePipe: Sendable {
    let descriptor: Int32
    private let writeEnd: Int32

    init?() {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { return nil }
        for end in ends {
            _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL) | O_NONBLOCK)
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
        }
        descriptor = ends[0]
        writeEnd = ends[1]
    }

    /// A full pipe already wakes the reader: the byte is not needed then.
    func signal() {
        var byte: UInt8 = 1
        _ = write(writeEnd, &byte, 1)
    }

    func clear() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while read(descriptor, &bytes, bytes.count) > 0 {}
    }

    /// Sleeps until signalled or `timeout` passes, and clears the signal.
    func wait(timeout: Duration) {
        var fd = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
        _ = poll(&fd, 1, Int32(clamping: timeout.milliseconds))
        clear()
    }

    deinit {
        close(descriptor)
        close(writeEnd)
    }
}

// C callbacks: userdata is the MQTTClient, kept alive while the loop runs.

private func client(_ userdata: UnsafeMutableRawPointer?) -> MQTTClient? {
    userdata.map { Unmanaged<MQTTClient>.fromOpaque($0).takeUnretainedValue() }
}

private func mqttOnConnect(
    _ mosq: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ rc: Int32, _ flags: Int32, _ properties: OpaquePointer?
) {
    client(userdata)?.didConnect(reasonCode: rc)
}

private func mqttOnDisconnect(
    _ mosq: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ rc: Int32, _ properties: OpaquePointer?
) {
    client(userdata)?.didDisconnect(reasonCode: rc)
}

private func mqttOnMessage(
    _ mosq: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ message: UnsafePointer<mosquitto_message>?,
    _ properties: OpaquePointer?
) {
    guard let client = client(userdata), let message, let topic = message.pointee.topic else { return }
    let length = Int(message.pointee.payloadlen)
    // Before anything is copied: a 20 MB message costs a comparison.
    guard client.accepts(length: length) else { return }
    let payload: [UInt8] =
        if length > 0, let bytes = message.pointee.payload {
            Array(UnsafeRawBufferPointer(start: bytes, count: length))
        } else {
            []
        }
    client.didReceive(MQTTMessage(topic: String(cString: topic), payload: payload, retain: message.pointee.retain))
}

private func mqttOnSubscribe(
    _ mosq: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ mid: Int32, _ count: Int32, _ granted: UnsafePointer<Int32>?,
    _ properties: OpaquePointer?
) {
    let codes = granted.map { Array(UnsafeBufferPointer(start: $0, count: Int(max(count, 0)))) } ?? []
    client(userdata)?.didSubscribe(mid: mid, granted: codes)
}

private func mqttOnLog(_ mosq: OpaquePointer?, _ userdata: UnsafeMutableRawPointer?, _ level: Int32, _ text: UnsafePointer<CChar>?) {
    guard let text else { return }
    client(userdata)?.didLog(level: level, String(cString: text))
}
