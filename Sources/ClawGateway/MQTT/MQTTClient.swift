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
/// **One lock, one state, never re-entered.** libmosquitto 2.0.11 does not
/// protect a client's socket or TLS session against use from two threads at
/// once (nothing guards `mosq->sock` or `mosq->ssl`; a read error closes them
/// under no lock). So the client runs libmosquitto unthreaded (`mosq_ts_none`,
/// where a publish writes from the calling thread) and every call into the
/// library but `connect` (made only while no one else may touch the client)
/// is made holding one lock, which also guards everything the client knows
/// (``Core``, whose ``Core/Lifecycle`` is the one answer to "may I publish").
/// Its own thread waits in `poll` without the lock and drives
/// `mosquitto_loop_read`/`write`/`misc` under it.
///
/// The callbacks run inside those calls, and never touch the state: they
/// post a ``CallbackNote`` to a mailbox of its own (its own small lock, taken
/// after the client's, never the other way). Before the lock is let go, the
/// notes are folded into the state by its named transitions
/// (``Core/connected()``, ``Core/lost()``, ...); what must run outside the
/// lock (the connected hooks, SUBACK hooks, the message handler) the loop
/// thread runs once it has let go. No section of the lock is ever entered
/// twice by one thread.
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
    /// The loop thread, which alone publishes while the hooks run; set once, as it starts.
    let loopThread = Atomic<UInt>(0)
    /// What the callbacks noted since the state last took them in.
    let mailbox = Mailbox()
    /// Inbound messages dropped so far for being over ``MQTTClientConfiguration/maxInboundPayload``.
    private let oversized = Atomic<Int>(0)

    /// One more message dropped for its size: how many so far.
    func oversizedCount() -> Int { oversized.add(1, ordering: .relaxed).newValue }

    /// Everything the client knows, guarded by its one lock; changed only by
    /// its named transitions.
    struct Core {
        /// Where the client is, as publishers and the loop thread see it.
        enum Lifecycle: Equatable {
            /// Not started.
            case idle
            /// Started, and connecting (or between connections).
            case down
            /// A CONNACK said yes: the connected hooks run, and only they
            /// (the loop thread) publish. A command that reached a new
            /// connection before the hooks had ended the games of coins lost
            /// with the old one would reach a PC that never got its coin.
            case hooks(generation: Int)
            /// Everyone publishes, on connection `generation`.
            case open(generation: Int)
            /// Shutdown asked: the loop thread sends DISCONNECT and ends; nobody publishes.
            case stopping
            /// The loop thread has ended.
            case stopped

            /// ``MQTTClient/isConnected``'s lock-free copy: 0 no, 1 the hooks' thread only, 2 yes.
            var publishers: Int {
                switch self {
                case .hooks: 1
                case .open: 2
                case .idle, .down, .stopping, .stopped: 0
                }
            }
        }

        private(set) var lifecycle = Lifecycle.idle
        /// One more with every CONNACK that said yes.
        private(set) var generation = 0
        private(set) var connects = 0
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
        /// Resumed when the loop thread ends.
        var stopWaiters: [CheckedContinuation<Void, Never>] = []
        /// What the loop thread acts on once it has let go of the lock.
        var pending = Pending()

        var isRunning: Bool {
            switch lifecycle {
            case .down, .hooks, .open: true
            case .idle, .stopping, .stopped: false
            }
        }

        var isConnected: Bool {
            switch lifecycle {
            case .hooks, .open: true
            case .idle, .down, .stopping, .stopped: false
            }
        }

        /// The connection a publish goes on now, if it may go: open, or its
        /// hooks running and the caller is the loop thread.
        func publishing(onLoopThread: Bool) -> Int? {
            switch lifecycle {
            case .open(let generation): generation
            case .hooks(let generation) where onLoopThread: generation
            case .idle, .down, .hooks, .stopping, .stopped: nil
            }
        }

        /// ``MQTTClient/start()``: idle to down; false if it had started.
        mutating func start() -> Bool {
            guard lifecycle == .idle else { return false }
            lifecycle = .down
            return true
        }

        /// A CONNACK said yes: a new generation, whose hooks run first.
        mutating func connected() {
            generation += 1
            connects += 1
            lastError = nil
            pendingSubscribes = [:]
            pending.connectedAgain = true
            if isRunning { lifecycle = .hooks(generation: generation) }
        }

        /// The connected hooks have run: the connection is everyone's.
        mutating func hooksRan() {
            if case .hooks(let generation) = lifecycle { lifecycle = .open(generation: generation) }
        }

        /// The connection ended (lost, dropped, or closed by the loop).
        mutating func lost() {
            if isConnected { lifecycle = .down }
        }

        /// ``MQTTClient/shutdown(timeout:)``: whether the loop thread runs and must be waited for.
        mutating func stop() -> Bool {
            switch lifecycle {
            case .idle:
                lifecycle = .stopped
                return false
            case .down, .hooks, .open:
                lifecycle = .stopping
                return true
            case .stopping:
                return true
            case .stopped:
                return false
            }
        }

        /// The loop thread has ended: who waited for it.
        mutating func ended() -> [CheckedContinuation<Void, Never>] {
            lifecycle = .stopped
            defer { stopWaiters = [] }
            return stopWaiters
        }
    }

    /// What the loop thread does after the lock: the callbacks' notes it
    /// cannot act on within the lock.
    struct Pending {
        var messages: [MQTTMessage] = []
        /// A CONNACK said yes since the loop thread last looked.
        var connectedAgain = false
        var subscribeAcks: [MQTTSubscribeAck] = []
    }

    /// What a callback saw, for the state to take in after the library call.
    enum CallbackNote {
        case connack(reasonCode: Int32)
        case disconnected(reasonCode: Int32)
        case suback(mid: Int32, granted: [Int32])
        case message(MQTTMessage)
        case log(String)
    }

    /// The callbacks' notes. Its lock is taken inside the client's (a
    /// callback within a library call) or alone (a callback within
    /// `connect`, made without the client's lock), never the other way.
    final class Mailbox: Sendable {
        private let notes = Mutex<[CallbackNote]>([])
        /// Whether anything waits: a publish looks without taking the lock.
        private let waiting = Atomic<Bool>(false)

        func post(_ note: CallbackNote) {
            notes.withLock { $0.append(note) }
            waiting.store(true, ordering: .releasing)
        }

        func take() -> [CallbackNote] {
            guard waiting.load(ordering: .acquiring) else { return [] }
            waiting.store(false, ordering: .relaxed)
            return notes.withLock { notes in
                defer { notes = [] }
                return notes
            }
        }
    }

    /// ``Core`` behind its lock. `@unchecked Sendable`: `value` is read and
    /// written only while `lock` is held.
    final class Guarded: @unchecked Sendable {
        /// A pthread mutex, which sleeps when taken: the sections hold a
        /// socket write, and spinning through one (as `Mutex` does) cost
        /// more CPU than the write itself under load.
        private let lock = NIOLock()
        private var value = Core()
        /// ``Core/Lifecycle/publishers`` as the lock was last let go, for
        /// readers that must not wait for it (every machine transition asks).
        private let publishers = Atomic<Int>(0)

        /// Reads or changes the state, holding the lock. Not reentrant: a
        /// callback never comes here (it posts to the ``Mailbox``).
        func withLock<T>(_ body: (inout Core) throws -> T) rethrows -> T {
            try lock.withLock {
                defer { publishers.store(value.lifecycle.publishers, ordering: .releasing) }
                return try body(&value)
            }
        }

        var publishersNow: Int { publishers.load(ordering: .acquiring) }
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
        switch core.publishersNow {
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
    var oversizedMessages: Int { oversized.load(ordering: .relaxed) }

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
            guard core.isConnected else { return false }
            core.lastError = reason
            core.dropRequested = true
            return true
        }
        if asked { wake.signal() }
    }

    /// Subscribes now if connected, and again after every reconnect.
    func subscribe(_ topics: [String], qos: MQTTQoS) {
        driving { core in
            core.subscriptions += topics.map { ($0, qos) }
            if core.isConnected { subscribeNow(topics.map { ($0, qos) }, &core) }
        }
        wake.signal()
    }

    /// Unsubscribes now if connected, and leaves `topics` out of every
    /// reconnect's subscriptions.
    func unsubscribe(_ topics: [String]) {
        let gone = Set(topics)
        driving { core in
            core.subscriptions.removeAll { gone.contains($0.topic) }
            guard core.isConnected, !topics.isEmpty else { return }
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
        guard core.withLock({ $0.start() }) else { return }
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
                driving { core -> (Int32, Bool, Int) in
                    guard let generation = core.publishing(onLoopThread: isLoopThread) else { return (MOSQ_ERR_NO_CONN.rawValue, false, 0) }
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
        let wasRunning = core.withLock { $0.stop() }
        if wasRunning {
            wake.signal()
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.waitUntilStopped() }
                group.addTask { try? await Task.sleep(for: timeout) }
                await group.next()
                group.cancelAll()
            }
        }
        logger.debug("MQTT client stopped")
    }

    private func waitUntilStopped() async {
        await withCheckedContinuation { continuation in
            let stopped = core.withLock { core -> Bool in
                if core.lifecycle == .stopped { return true }
                core.stopWaiters.append(continuation)
                return false
            }
            if stopped { continuation.resume() }
        }
    }

    /// Holds the lock while `body` calls into libmosquitto with the state,
    /// then takes in what the callbacks noted meanwhile (``takeNotes(_:)``)
    /// before letting go.
    func driving<T>(_ body: (inout Core) -> T) -> T {
        core.withLock { core in
            let result = body(&core)
            takeNotes(&core)
            return result
        }
    }

    /// Sends SUBSCRIBEs, noting each one's topics until its SUBACK. Holding the lock.
    func subscribeNow(_ subscriptions: [(topic: String, qos: MQTTQoS)], _ core: inout Core) {
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
                    core.pendingSubscribes[mid] = Array(batch)
                }
            }
        }
    }
}
