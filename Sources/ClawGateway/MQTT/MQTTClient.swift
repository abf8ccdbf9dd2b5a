import CMosquitto
import Foundation
import Logging
import NIOConcurrencyHelpers
import Synchronization

/// An MQTT v5 (or 3.1.1) client over libmosquitto.
///
/// - Connects in the background and keeps reconnecting with exponential
///   backoff, whatever the failure: the broker down at start, a lost
///   connection, a refused CONNACK, a TLS error. With several brokers (a
///   cluster), a failed one is followed at once by the next; the backoff
///   is slept once every broker has failed in turn.
/// - After every (re)connect it resubscribes and runs the connected hooks;
///   every SUBACK goes to the hooks given to ``onSubscribeAck(_:)``.
/// - ``publish(_:payload:qos:retain:expiry:)`` writes to the socket from the
///   caller's thread, or fails at once when the connection is not open:
///   nothing is queued for later, and it never waits. While a new
///   connection's hooks run, only they publish (from the client's thread):
///   everyone else is refused until they are done.
/// - Inbound messages go to the handler given to ``onMessage(_:)``, on the
///   client's own thread: one way in.
///
/// **One lock, one state.** libmosquitto 2.0.11 does not protect a client's
/// socket or TLS session against use from two threads at once (nothing
/// guards `mosq->sock` or `mosq->ssl`; a read error closes them under no
/// lock). So the client runs libmosquitto unthreaded (`mosq_ts_none`, where a
/// publish writes from the calling thread) and every call into the library
/// but `connect` (made only while no one else may touch the client) is made
/// holding one lock, which also guards everything the client knows
/// (``Core``). Its own thread waits in `poll` without the lock and drives
/// `mosquitto_loop_read`/`write`/`misc` under it. The callbacks run inside
/// those calls, so they may read and change the state directly; they only
/// take note of what happened (messages, a new connection, a SUBACK), and
/// the loop thread acts on the notes after releasing the lock.
///
/// The thread is this client's rather than `mosquitto_loop_start`'s:
/// libmosquitto's own never retries a first connect that failed (upstream
/// issue #1903) and ends for good after a refused MQTT v5 CONNACK or a TLS
/// error, where an operator expects the gateway to keep trying.
final class MQTTClient: Sendable {
    let configuration: MQTTClientConfiguration
    let handle: MosquittoHandle
    let logger: Logger
    /// The one lock and the state it guards (see the type's documentation).
    let core: Guarded
    /// Wakes the loop thread from `poll` (shutdown, output waiting) and from a backoff sleep.
    let wake: WakePipe
    let warnings = LogLimiter()
    /// ``Core/connection`` for readers that must not wait for the lock
    /// (every machine transition asks): 0 down, 1 its hooks run, 2 open;
    /// written only under the lock, with it.
    private let up = Atomic<Int>(0)
    /// The loop thread, which alone publishes while the hooks run; set once, as it starts.
    let loopThread = Atomic<UInt>(0)

    /// Everything the client knows, guarded by its one lock.
    struct Core {
        enum Phase {
            case idle
            /// The loop thread is connecting or connected.
            case running
            /// Shutdown asked; the loop thread is sending DISCONNECT and ending.
            case stopping
            /// The loop thread has ended.
            case stopped
        }

        /// The connection, as publishers see it.
        enum Connection: Equatable {
            case down
            /// A CONNACK said yes: the connected hooks run, and only they
            /// (the loop thread) publish. A command that reached a new
            /// connection before the hooks had ended the games of coins lost
            /// with the old one would reach a PC that never got its coin.
            case hooks(generation: Int)
            /// Everyone publishes, on connection `generation`.
            case open(generation: Int)
        }

        var phase = Phase.idle
        var connection = Connection.down
        /// One more with every CONNACK that said yes.
        var generation = 0
        var connects = 0
        /// The broker connected to, or being tried.
        var broker = MQTTBrokerAddress(host: "", port: 0)
        /// The last error libmosquitto or the broker reported, for operators.
        var lastError: String?
        var subscriptions: [(topic: String, qos: MQTTQoS)] = []
        /// The topics of each SUBSCRIBE not yet acknowledged, by message id.
        var pendingSubscribes: [Int32: [String]] = [:]
        var connectedHooks: [@Sendable () -> Void] = []
        var subscribeAckHooks: [@Sendable (MQTTSubscribeAck) -> Void] = []
        var handler: (@Sendable (MQTTMessage) -> Void)?
        /// ``dropConnection(reason:)`` asked; the loop thread disconnects.
        var dropRequested = false
        /// Inbound messages dropped for being over ``MQTTClientConfiguration/maxInboundPayload``.
        var oversized = 0
        /// Resumed when the loop thread ends.
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
        /// What the callbacks noted, for the loop thread to act on after the lock.
        var noted = Noted()
    }

    struct Noted {
        var messages: [MQTTMessage] = []
        /// A CONNACK said yes since the loop thread last looked.
        var connectedAgain = false
        var subscribeAcks: [MQTTSubscribeAck] = []
    }

    /// ``Core`` behind its lock. `@unchecked Sendable`: `value` is read and
    /// written only while `lock` is held.
    ///
    /// Two ways in. ``locked(_:)`` holds the lock for calls into
    /// libmosquitto; the callbacks those calls run, and the code around them,
    /// read and change the state with ``withLock(_:)``, which sees that its
    /// thread already holds the lock. Anywhere else ``withLock(_:)`` takes it.
    /// A state access is never open across a call into the library: its
    /// callbacks change the same state, and two overlapping accesses would
    /// break Swift's exclusivity (the runtime stops the process on it).
    final class Guarded: @unchecked Sendable {
        /// A pthread mutex, which sleeps when taken: the sections hold a
        /// socket write, and spinning through one (as `Mutex` does) cost
        /// more CPU than the write itself under load.
        private let lock = NIOLock()
        private var value = Core()
        /// The thread holding `lock`, for ``withLock(_:)`` to know whether its thread does.
        private let holder = Atomic<UInt>(0)

        /// Holds the lock while `body` calls into libmosquitto. Not reentrant.
        func locked<T>(_ body: () throws -> T) rethrows -> T {
            try lock.withLock {
                holder.store(pthread_self(), ordering: .relaxed)
                defer { holder.store(0, ordering: .relaxed) }
                return try body()
            }
        }

        /// Reads or changes the state: within ``locked(_:)`` (the same
        /// thread) as it is, elsewhere taking the lock. `body` must not call
        /// into libmosquitto.
        func withLock<T>(_ body: (inout Core) throws -> T) rethrows -> T {
            if holder.load(ordering: .relaxed) == pthread_self() {
                return try body(&value)
            }
            return try locked { try body(&value) }
        }
    }

    init(configuration: MQTTClientConfiguration, logger: Logger) throws(MQTTError) {
        _ = Mosquitto.initialized
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "mqtt.client_id"] = .string(configuration.clientID)
        self.logger = logger
        core = Guarded()
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
        // Unthreaded: a publish writes from the caller's thread, under the lock.
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

    /// Whether a publish from this thread goes through now: the connection
    /// is open, or its connected hooks run on this thread.
    var isConnected: Bool {
        switch up.load(ordering: .acquiring) {
        case 2: return true
        case 1: return isLoopThread
        default: return false
        }
    }

    /// Whether the caller runs on the client's own thread (the hooks and handlers do).
    var isLoopThread: Bool { loopThread.load(ordering: .relaxed) == pthread_self() }

    /// How many times a connection has been established, the first included.
    var connectCount: Int { core.withLock { $0.connects } }

    /// The connection publishes go on now: one more with every (re)connect.
    var connection: Int { core.withLock { $0.generation } }

    /// The last error reported by libmosquitto or the broker, if any since the last connect.
    var lastError: String? { core.withLock { $0.lastError } }

    /// The broker connected to, or being tried now.
    var broker: MQTTBrokerAddress { core.withLock { $0.broker } }

    /// Inbound messages dropped so far for being too large.
    var oversizedMessages: Int { core.withLock { $0.oversized } }

    /// Runs `hook` after every successful (re)connect, after resubscribing,
    /// on the client's thread; until every hook has run, only they publish.
    func onConnected(_ hook: @escaping @Sendable () -> Void) {
        core.withLock { $0.connectedHooks.append(hook) }
    }

    /// Runs `hook` with every SUBACK, on the client's thread: a refused
    /// subscription is otherwise silent (the connection stays up).
    func onSubscribeAck(_ hook: @escaping @Sendable (MQTTSubscribeAck) -> Void) {
        core.withLock { $0.subscribeAckHooks.append(hook) }
    }

    /// Hands every inbound message to `handler`, in order, on the client's
    /// thread; it must not block. Set it before ``start()``.
    func onMessage(_ handler: @escaping @Sendable (MQTTMessage) -> Void) {
        core.withLock { $0.handler = handler }
    }

    /// Ends the current connection (with a DISCONNECT) and connects again,
    /// to the next broker, after the backoff: for a connection that is up
    /// but useless (a refused subscription, a peer gone silent).
    func dropConnection(reason: String) {
        let asked = core.withLock { core -> Bool in
            guard core.connection != .down else { return false }
            core.lastError = reason
            core.dropRequested = true
            return true
        }
        if asked { wake.signal() }
    }

    /// Subscribes now if connected, and again after every reconnect.
    func subscribe(_ topics: [String], qos: MQTTQoS) {
        core.locked {
            let connected = core.withLock { core in
                core.subscriptions += topics.map { ($0, qos) }
                return core.connection != .down
            }
            if connected { subscribeNow(topics.map { ($0, qos) }) }
        }
        wake.signal()
    }

    /// Unsubscribes now if connected, and leaves `topics` out of every
    /// reconnect's subscriptions.
    func unsubscribe(_ topics: [String]) {
        let gone = Set(topics)
        core.locked {
            let connected = core.withLock { core in
                core.subscriptions.removeAll { gone.contains($0.topic) }
                return core.connection != .down
            }
            guard connected, !topics.isEmpty else { return }
            let strings = topics.map { strdup($0) }
            defer { strings.forEach { free($0) } }
            let rc = strings.withUnsafeBufferPointer { pointers in
                mosquitto_unsubscribe_multiple(handle.pointer, nil, Int32(pointers.count), pointers.baseAddress, nil)
            }
            if let error = MQTTError.check(rc, "unsubscribe from \(topics.first ?? "")…") {
                logger.warning("MQTT unsubscribe failed", metadata: error.shape.metadata())
            }
        }
        wake.signal()
    }

    /// Starts connecting in the background; returns at once.
    func start() {
        let starting = core.withLock { core -> Bool in
            guard case .idle = core.phase else { return false }
            core.phase = .running
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
    /// while the connection is not open (nothing is queued for later).
    /// Returns the ``connection`` it went on.
    ///
    /// - Parameter expiry: MQTT v5 message expiry interval in seconds; MQTT
    ///   3.1.1 has none, and it is left out there.
    @discardableResult
    func publish(_ topic: String, payload: [UInt8], qos: MQTTQoS = .atMostOnce, retain: Bool = false, expiry: UInt32? = nil)
        throws(MQTTError) -> Int
    {
        var properties: OpaquePointer?
        defer { if properties != nil { mosquitto_property_free_all(&properties) } }
        if let expiry, configuration.protocolVersion == .v5 {
            mosquitto_property_add_int32(&properties, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), expiry)
        }
        let (rc, backlog, connection) = topic.withCString { name in
            payload.withUnsafeBytes { bytes in
                core.locked { () -> (Int32, Bool, Int) in
                    let generation = core.withLock { core -> Int? in
                        switch core.connection {
                        case .open(let generation): return generation
                        case .hooks(let generation) where isLoopThread:
                            return generation
                        case .down, .hooks:
                            return nil
                        }
                    }
                    guard let generation else { return (MOSQ_ERR_NO_CONN.rawValue, false, 0) }
                    let rc = mosquitto_publish_v5(
                        handle.pointer, nil, name, Int32(bytes.count), bytes.baseAddress, qos.rawValue, retain, properties)
                    return (rc, mosquitto_want_write(handle.pointer), generation)
                }
            }
        }
        // The socket was full: the rest waits for the loop thread's poll.
        if backlog { wake.signal() }
        if let error = MQTTError.check(rc, "publish to \(topic)") { throw error }
        return connection
    }

    /// Disconnects cleanly (no last will) and ends the loop thread. Publish
    /// anything that must go out (such as `offline`) before calling this:
    /// it is sent ahead of the DISCONNECT.
    ///
    /// Waits up to `timeout` for the loop thread, which may be inside a
    /// blocking connect to an unreachable broker; past that it ends on its own.
    func shutdown(timeout: Duration = .seconds(5)) async {
        let wasRunning = core.withLock { core -> Bool in
            guard case .running = core.phase else {
                if case .idle = core.phase { core.phase = .stopped }
                return false
            }
            core.phase = .stopping
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
        core.withLock { setConnection(.down, &$0) }
        logger.debug("MQTT client stopped")
    }

    private func waitUntilStopped() async {
        await withCheckedContinuation { continuation in
            let stopped = core.withLock { core -> Bool in
                if case .stopped = core.phase { return true }
                core.stopWaiters.append(continuation)
                return false
            }
            if stopped { continuation.resume() }
        }
    }

    /// Sets the connection, and its lock-free copy. Under the lock.
    func setConnection(_ connection: Core.Connection, _ core: inout Core) {
        core.connection = connection
        let value = switch connection {
        case .down: 0
        case .hooks: 1
        case .open: 2
        }
        up.store(value, ordering: .releasing)
    }

    /// Within ``Guarded/locked(_:)`` (a callback, or a caller that took it).
    func subscribeNow(_ subscriptions: [(topic: String, qos: MQTTQoS)]) {
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
                    logger.error("MQTT subscribe failed", metadata: error.shape.metadata())
                } else {
                    core.withLock { $0.pendingSubscribes[mid] = Array(batch) }
                }
            }
        }
    }
}
