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
/// are counted in a `gap` record) and its latest stats.
///
/// Each client is bounded: one that has ``maxPendingChunks`` chunks or
/// ``maxPendingBytes`` bytes not yet written (a slow or stalled reader) is
/// sent nothing more until it has written what it has; then it gets one
/// `gap` record with the number of events it missed and the whole arcade
/// again, never a silent hole. One still behind after ``maxBehind`` is
/// dropped (its browser reconnects and starts again from the whole arcade).
/// At most ``maxClients`` read at once, ``maxClientsPerAddress`` from one
/// client address.
final class ArcadeFeed: Service, MachineObserver, Sendable {
    static let tick: Duration = .milliseconds(100)
    static let heartbeat: Duration = .seconds(15)
    static let maxClients = 100
    static let maxClientsPerAddress = 4
    static let maxEventsPerTick = 50
    static let maxPendingChunks = 64
    static let maxPendingBytes = 4 << 20
    static let maxBehind: Duration = .seconds(60)

    /// What a client of the feed reads: chunks of SSE frames.
    final class Client: Sendable {
        let id: Int
        /// Whose share of streams it takes; nil for none (a test's, a Unix socket's).
        let address: ClientAddress?
        let chunks: AsyncStream<[UInt8]>
        fileprivate let continuation: AsyncStream<[UInt8]>.Continuation
        private let pending = Atomic<Int>(0)
        /// Set while the client is too far behind: since when, and the events it missed.
        private let behind = Mutex<(since: Duration, missed: Int)?>(nil)

        fileprivate init(id: Int, address: ClientAddress?) {
            self.id = id
            self.address = address
            (chunks, continuation) = AsyncStream.makeStream(of: [UInt8].self, bufferingPolicy: .bufferingOldest(ArcadeFeed.maxPendingChunks))
        }

        fileprivate enum Offered {
            case sent
            /// Not sent: the client is behind (and `fellBehind` when it just fell).
            case skipped(fellBehind: Bool)
            /// Back in step: a `gap` record and the whole arcade went first.
            case caughtUp(missed: Int)
            /// Behind for longer than ``ArcadeFeed/maxBehind``: end it.
            case tooLongBehind
        }

        /// Hands `chunk` (with `events` events in it, counting those left out
        /// of it) to the client, or counts what it misses while it is behind.
        /// `arcade` makes the frames that bring a client back in step.
        fileprivate func offer(_ chunk: [UInt8], events: Int, now: Duration, arcade: (_ missed: Int) -> [UInt8]) -> Offered {
            behind.withLock { behind in
                guard let lag = behind else {
                    if chunk.isEmpty || enqueue(chunk) { return .sent }
                    behind = (now, events)
                    return .skipped(fellBehind: true)
                }
                // Back once it has written all it had: the gap, the whole arcade, then what is new.
                if pending.load(ordering: .relaxed) == 0, enqueue(arcade(lag.missed) + chunk) {
                    behind = nil
                    return .caughtUp(missed: lag.missed)
                }
                if now - lag.since > ArcadeFeed.maxBehind { return .tooLongBehind }
                behind = (lag.since, lag.missed + events)
                return .skipped(fellBehind: false)
            }
        }

        private func enqueue(_ chunk: [UInt8]) -> Bool {
            let bytes = pending.add(chunk.count, ordering: .relaxed).newValue
            guard bytes <= ArcadeFeed.maxPendingBytes, case .enqueued = continuation.yield(chunk) else {
                pending.subtract(chunk.count, ordering: .relaxed)
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
        /// Kept while anyone reads, for a client that falls behind and catches up.
        var latestSnapshot: [UInt8]?
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
        var byAddress: [ClientAddress: Int] = [:]
        var nextID = 0
        var stopped = false
    }

    /// Why a client was not connected.
    enum Refusal: Error, Equatable {
        /// ``maxClients`` read already.
        case full
        /// ``maxClientsPerAddress`` read from this client's address already.
        case overShare
        /// The gateway is stopping.
        case stopped
    }

    /// By machine index; a machine a reload adds gets its slot when it first
    /// says something, one that leaves loses it.
    private let slots: Mutex<[Slot?]>
    private let gateway = Slot()
    private let clients = Mutex(Clients())
    private let clientCount = Atomic<Int>(0)
    private let status: @Sendable () -> GatewayStatus
    private let lastStatus: Mutex<GatewayStatus?> = Mutex(nil)
    private let clock: GameClock
    private let logger: Logger
    private let warnings = LogLimiter()

    /// - Parameter status: read every tick; a change goes out as a `gateway` message.
    init(machines: Int, clock: GameClock, logger: Logger, status: @escaping @Sendable () -> GatewayStatus) {
        slots = Mutex((0..<machines).map { _ in Slot() })
        self.clock = clock
        self.logger = logger
        self.status = status
    }

    private var hasClients: Bool { clientCount.load(ordering: .relaxed) > 0 }

    private func slot(_ machine: Int) -> Slot {
        slots.withLock { slots in
            if machine >= slots.count { slots += Array(repeating: nil, count: machine + 1 - slots.count) }
            if let slot = slots[machine] { return slot }
            let slot = Slot()
            slots[machine] = slot
            return slot
        }
    }

    private var allSlots: [Slot] { slots.withLock { $0.compactMap { $0 } } }

    /// A machine a reload took out left: nothing of it is sent any more.
    func gone(_ machine: Int) {
        slots.withLock { slots in
            if machine < slots.count { slots[machine] = nil }
        }
    }

    /// A reload added or removed machines: every stream ends, and the pages
    /// reading them connect again and get the arcade as it is now (a new
    /// `hello` with the machines).
    func arcadeChanged() {
        let all = clients.withLock { Array($0.byID.values) }
        for client in all { disconnect(client) }
    }

    // MARK: Messages in

    /// A machine's retained snapshot, as published.
    func snapshot(_ machine: Int, _ snapshot: QueueSnapshot, payload: [UInt8]) {
        self.snapshot(machine, payload)
    }

    /// A machine's event, as published.
    func event(_ machine: Int, _ event: GameEvent, payload: [UInt8]) {
        self.event(machine, payload)
    }

    func snapshot(_ machine: Int, _ payload: [UInt8]) {
        guard hasClients else { return }
        slot(machine).pending.withLock { pending in
            pending.snapshot = payload
            pending.latestSnapshot = payload
        }
    }

    func event(_ machine: Int, _ payload: [UInt8]) {
        guard hasClients else { return }
        slot(machine).pending.withLock { pending in
            if pending.events.count < Self.maxEventsPerTick {
                pending.events.append(payload)
            } else {
                pending.overflow += 1
            }
        }
    }

    /// A machine's stats, as published; kept for clients that connect later.
    func stats(_ machine: Int, _ payload: [UInt8]) {
        slot(machine).pending.withLock { pending in
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

    /// A new client reading for `address`.
    func connect(from address: ClientAddress? = nil) throws(Refusal) -> Client {
        let connected: Result<Client, Refusal> = clients.withLock { clients in
            guard !clients.stopped else { return .failure(.stopped) }
            guard clients.byID.count < Self.maxClients else { return .failure(.full) }
            if let address {
                let theirs = clients.byAddress[address, default: 0]
                guard theirs < Self.maxClientsPerAddress else { return .failure(.overShare) }
                clients.byAddress[address] = theirs + 1
            }
            clients.nextID += 1
            let client = Client(id: clients.nextID, address: address)
            clients.byID[client.id] = client
            clientCount.store(clients.byID.count, ordering: .relaxed)
            return .success(client)
        }
        switch connected {
        case .success(let client):
            return client
        case .failure(let refusal):
            if refusal != .stopped {
                warnings.log(
                    "refused.\(refusal)", .notice, "Stream refused",
                    ["stream.refusal": .string("\(refusal)"), "http.client": .stringConvertible(address?.description ?? "-")],
                    on: logger)
            }
            throw refusal
        }
    }

    /// Ends the client's stream and gives its slot back; again does nothing.
    func disconnect(_ client: Client) {
        client.continuation.finish()
        clients.withLock { clients in
            guard clients.byID.removeValue(forKey: client.id) != nil else { return }
            clientCount.store(clients.byID.count, ordering: .relaxed)
            if let address = client.address, let theirs = clients.byAddress[address] {
                clients.byAddress[address] = theirs > 1 ? theirs - 1 : nil
            }
        }
    }

    /// Streams open, in all or from one address.
    func count(from address: ClientAddress? = nil) -> Int {
        clients.withLock { clients in address.map { clients.byAddress[$0, default: 0] } ?? clients.byID.count }
    }

    /// What a new client is sent first: `hello`, then every machine's
    /// snapshot and latest stats, and the gateway's latest stats.
    func welcome(hello: [UInt8], snapshots: [(machine: Int, payload: [UInt8])]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(4096)
        Self.frame("hello", hello, into: &out)
        Self.frame("gateway", Self.encode(status()), into: &out)
        for (index, snapshot) in snapshots {
            Self.frame("snapshot", snapshot, into: &out)
            if let stats = slot(index).pending.withLock({ $0.latestStats }) { Self.frame("stats", stats, into: &out) }
        }
        if let stats = gateway.pending.withLock({ $0.latestStats }) { Self.frame("gateway_stats", stats, into: &out) }
        return out
    }

    /// What a client that was behind is sent when it is back in step: the
    /// `gap` with the events it missed, then the arcade as it is (the latest
    /// snapshot of every machine that changed while anyone read, which is
    /// every one that changed since this client connected).
    private func caughtUp(missed: Int) -> [UInt8] {
        var out: [UInt8] = []
        Self.frame("gap", Self.gap(missed), into: &out)
        Self.frame("gateway", Self.encode(status()), into: &out)
        for slot in allSlots {
            let (snapshot, stats) = slot.pending.withLock { ($0.latestSnapshot, $0.latestStats) }
            if let snapshot { Self.frame("snapshot", snapshot, into: &out) }
            if let stats { Self.frame("stats", stats, into: &out) }
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
                    broadcast(Array(": keep-alive\n\n".utf8), events: 0)
                    lastWrite = now
                }
                next = Swift.max(next + Self.tick, now)
            }
        }
        stop()
    }

    /// Writes what piled up since the last tick to every client; false when
    /// there was nothing new to write (a client that was behind may still
    /// have been brought back in step).
    @discardableResult
    func flush() -> Bool {
        guard hasClients else {
            // Nobody reads: forget what piled up meanwhile (latest stats stay).
            for slot in allSlots + [gateway] {
                slot.pending.withLock { pending in
                    pending.snapshot = nil
                    pending.latestSnapshot = nil
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
        var events = 0
        for slot in allSlots {
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
            if pending.2 > 0 { Self.frame("gap", Self.gap(pending.2), into: &out) }
            events += pending.1.count + pending.2
            if let snapshot = pending.0 { Self.frame("snapshot", snapshot, into: &out) }
            if let stats = pending.3 { Self.frame("stats", stats, into: &out) }
        }
        if let stats = gateway.pending.withLock({ pending -> [UInt8]? in
            defer { pending.stats = nil }
            return pending.stats
        }) {
            Self.frame("gateway_stats", stats, into: &out)
        }
        guard !out.isEmpty else {
            // Nothing new, but a client that was behind may be back in step.
            broadcast([], events: 0)
            return false
        }
        broadcast(out, events: events)
        return true
    }

    /// Offers `chunk` to every client; an empty one only lets a client that
    /// was behind catch up.
    private func broadcast(_ chunk: [UInt8], events: Int) {
        let all = clients.withLock { Array($0.byID.values) }
        let now = clock.now()
        for client in all {
            switch client.offer(chunk, events: events, now: now, arcade: caughtUp(missed:)) {
            case .sent, .skipped(fellBehind: false):
                break
            case .skipped(fellBehind: true):
                warnings.log(
                    "behind", .notice, "Stream client too far behind, skipping to a gap", ["stream.client": .stringConvertible(client.id)],
                    on: logger)
            case .caughtUp(let missed):
                logger.debug(
                    "Stream client back in step", metadata: ["stream.client": .stringConvertible(client.id), "stream.events_missed": .stringConvertible(missed)])
            case .tooLongBehind:
                warnings.log(
                    "dropped", .notice, "Stream client behind for too long, dropped", ["stream.client": .stringConvertible(client.id)],
                    on: logger)
                disconnect(client)
            }
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

    /// The `gap` record's data: how many events the reader will never see.
    static func gap(_ missed: Int) -> [UInt8] {
        Array(#"{"events_missed":\#(missed)}"#.utf8)
    }

    static func encode(_ status: GatewayStatus) -> [UInt8] {
        Array(
            #"{"broker_connected":\#(status.brokerConnected),"storage_writable":\#(status.storageWritable),"replies_failed":\#(status.repliesFailed)}"#
                .utf8)
    }
}
