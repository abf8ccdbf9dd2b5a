import Logging
import Protocol
import ServiceLifecycle
import Synchronization

/// The arcade as a live feed for `GET /v1/stream` (Server-Sent Events) and
/// the dashboard: every snapshot, event and stats message, in the JSON the
/// gateway publishes on MQTT, coalesced per machine to at most one burst
/// every ``tick`` (10 a second).
///
/// Machines and the stats loop hand their messages over as they publish
/// them; with no client connected that is one atomic load and nothing else.
/// Each tick, what piled up is written once into one chunk for every
/// client: a machine's latest snapshot (older ones are superseded: `seq`
/// orders them), its events in order (at most ``maxEventsPerTick``; the rest
/// are counted in an `overflow` message) and its latest stats.
///
/// Each client is bounded: a client that has ``maxPendingChunks`` chunks or
/// ``maxPendingBytes`` bytes not yet written (a slow or stalled reader) is
/// dropped, not buffered for ever; its browser reconnects and starts again
/// from the whole arcade.
final class ArcadeFeed: Service, Sendable {
    static let tick: Duration = .milliseconds(100)
    static let heartbeat: Duration = .seconds(15)
    static let maxClients = 100
    static let maxEventsPerTick = 50
    static let maxPendingChunks = 64
    static let maxPendingBytes = 4 << 20

    /// What a client of the feed reads: chunks of SSE frames.
    final class Client: Sendable {
        let id: Int
        let chunks: AsyncStream<[UInt8]>
        fileprivate let continuation: AsyncStream<[UInt8]>.Continuation
        private let pending = Atomic<Int>(0)

        fileprivate init(id: Int) {
            self.id = id
            (chunks, continuation) = AsyncStream.makeStream(of: [UInt8].self, bufferingPolicy: .bufferingOldest(ArcadeFeed.maxPendingChunks))
        }

        /// False when the client is too far behind and was ended.
        fileprivate func offer(_ chunk: [UInt8]) -> Bool {
            let bytes = pending.add(chunk.count, ordering: .relaxed).newValue
            guard bytes <= ArcadeFeed.maxPendingBytes, case .enqueued = continuation.yield(chunk) else {
                continuation.finish()
                return false
            }
            return true
        }

        /// Called by the writer once a chunk is written.
        func written(_ chunk: [UInt8]) {
            pending.subtract(chunk.count, ordering: .relaxed)
        }
    }

    /// A machine's messages since the last tick, and its latest stats.
    private struct Pending {
        var snapshot: [UInt8]?
        var events: [[UInt8]] = []
        var overflow = 0
        var stats: [UInt8]?
        /// Kept for clients that connect later.
        var latestStats: [UInt8]?
    }

    private final class Slot: Sendable {
        let pending = Mutex(Pending())
    }

    /// The gateway's own state as the page shows it.
    struct GatewayStatus: Sendable, Equatable {
        var brokerConnected: Bool
        var storageWritable: Bool
        var repliesFailed: Int
    }

    private struct Clients {
        var byID: [Int: Client] = [:]
        var nextID = 0
        var stopped = false
    }

    private let slots: [Slot]
    private let gateway = Slot()
    private let clients = Mutex(Clients())
    private let clientCount = Atomic<Int>(0)
    private let status: @Sendable () -> GatewayStatus
    private let lastStatus: Mutex<GatewayStatus?> = Mutex(nil)
    private let clock: GameClock
    private let logger: Logger

    /// - Parameter status: read every tick; a change goes out as a `gateway` message.
    init(machines: Int, clock: GameClock, logger: Logger, status: @escaping @Sendable () -> GatewayStatus) {
        slots = (0..<machines).map { _ in Slot() }
        self.clock = clock
        self.logger = logger
        self.status = status
    }

    private var hasClients: Bool { clientCount.load(ordering: .relaxed) > 0 }

    // MARK: Messages in

    /// A machine's retained snapshot, as published.
    func snapshot(_ machine: Int, _ payload: [UInt8]) {
        guard hasClients else { return }
        slots[machine].pending.withLock { $0.snapshot = payload }
    }

    /// A machine's event, as published.
    func event(_ machine: Int, _ payload: [UInt8]) {
        guard hasClients else { return }
        slots[machine].pending.withLock { pending in
            if pending.events.count < Self.maxEventsPerTick {
                pending.events.append(payload)
            } else {
                pending.overflow += 1
            }
        }
    }

    /// A machine's stats, as published; kept for clients that connect later.
    func stats(_ machine: Int, _ payload: [UInt8]) {
        slots[machine].pending.withLock { pending in
            pending.latestStats = payload
            if hasClients { pending.stats = payload }
        }
    }

    /// The gateway's stats, as published.
    func gatewayStats(_ payload: [UInt8]) {
        gateway.pending.withLock { pending in
            pending.latestStats = payload
            if hasClients { pending.stats = payload }
        }
    }

    // MARK: Clients

    /// A new client, or nil when ``maxClients`` are connected or the feed stopped.
    func connect() -> Client? {
        clients.withLock { clients in
            guard !clients.stopped, clients.byID.count < Self.maxClients else { return nil }
            clients.nextID += 1
            let client = Client(id: clients.nextID)
            clients.byID[client.id] = client
            clientCount.store(clients.byID.count, ordering: .relaxed)
            return client
        }
    }

    func disconnect(_ client: Client) {
        client.continuation.finish()
        clients.withLock { clients in
            clients.byID[client.id] = nil
            clientCount.store(clients.byID.count, ordering: .relaxed)
        }
    }

    /// What a new client is sent first: `hello`, then every machine's
    /// snapshot and latest stats, and the gateway's latest stats.
    func welcome(hello: [UInt8], snapshots: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(4096)
        Self.frame("hello", hello, into: &out)
        Self.frame("gateway", Self.encode(status()), into: &out)
        for (index, snapshot) in snapshots.enumerated() {
            Self.frame("snapshot", snapshot, into: &out)
            if let stats = slots[index].pending.withLock({ $0.latestStats }) { Self.frame("stats", stats, into: &out) }
        }
        if let stats = gateway.pending.withLock({ $0.latestStats }) { Self.frame("gateway_stats", stats, into: &out) }
        return out
    }

    // MARK: The tick

    func run() async throws {
        try? await cancelWhenGracefulShutdown { [self] in
            var next = clock.now() + Self.tick
            var lastWrite = clock.now()
            while !Task.isCancelled {
                try await clock.sleep(next)
                let now = clock.now()
                if flush() {
                    lastWrite = now
                } else if now - lastWrite >= Self.heartbeat {
                    // A comment: keeps proxies from closing a quiet stream, and finds dead readers.
                    broadcast(Array(": keep-alive\n\n".utf8))
                    lastWrite = now
                }
                next = Swift.max(next + Self.tick, now)
            }
        }
        stop()
    }

    /// Writes what piled up since the last tick to every client; false when
    /// there was nothing to write.
    @discardableResult
    func flush() -> Bool {
        guard hasClients else {
            // Nobody reads: forget what piled up meanwhile (latest stats stay).
            for slot in slots + [gateway] {
                slot.pending.withLock { pending in
                    pending.snapshot = nil
                    pending.events.removeAll()
                    pending.overflow = 0
                    pending.stats = nil
                }
            }
            return false
        }
        var out: [UInt8] = []
        let current = status()
        let changed = lastStatus.withLock { last in
            defer { last = current }
            return last != current
        }
        if changed { Self.frame("gateway", Self.encode(current), into: &out) }
        for slot in slots {
            let pending = slot.pending.withLock { pending in
                defer {
                    pending.snapshot = nil
                    pending.events.removeAll(keepingCapacity: true)
                    pending.overflow = 0
                    pending.stats = nil
                }
                return (pending.snapshot, pending.events, pending.overflow, pending.stats)
            }
            for event in pending.1 { Self.frame("event", event, into: &out) }
            if pending.2 > 0 { Self.frame("overflow", Array(#"{"events_dropped":\#(pending.2)}"#.utf8), into: &out) }
            if let snapshot = pending.0 { Self.frame("snapshot", snapshot, into: &out) }
            if let stats = pending.3 { Self.frame("stats", stats, into: &out) }
        }
        if let stats = gateway.pending.withLock({ pending -> [UInt8]? in
            defer { pending.stats = nil }
            return pending.stats
        }) {
            Self.frame("gateway_stats", stats, into: &out)
        }
        guard !out.isEmpty else { return false }
        broadcast(out)
        return true
    }

    private func broadcast(_ chunk: [UInt8]) {
        let all = clients.withLock { Array($0.byID.values) }
        for client in all where !client.offer(chunk) {
            logger.notice("Stream client too far behind, dropped", metadata: ["stream.client": .stringConvertible(client.id)])
            disconnect(client)
        }
    }

    /// Ends every stream (the gateway is stopping) and takes no new client.
    func stop() {
        let all = clients.withLock { clients in
            clients.stopped = true
            return Array(clients.byID.values)
        }
        for client in all { disconnect(client) }
    }

    // MARK: Frames

    /// `event: <name>\ndata: <json>\n\n`; the JSON the gateway writes has no newline.
    static func frame(_ name: String, _ data: [UInt8], into out: inout [UInt8]) {
        out.append(contentsOf: "event: ".utf8)
        out.append(contentsOf: name.utf8)
        out.append(contentsOf: "\ndata: ".utf8)
        out.append(contentsOf: data)
        out.append(contentsOf: "\n\n".utf8)
    }

    static func encode(_ status: GatewayStatus) -> [UInt8] {
        Array(
            #"{"broker_connected":\#(status.brokerConnected),"storage_writable":\#(status.storageWritable),"replies_failed":\#(status.repliesFailed)}"#
                .utf8)
    }
}
