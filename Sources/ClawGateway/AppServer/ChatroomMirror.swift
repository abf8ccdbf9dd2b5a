import Foundation
import Logging
import Protocol
import ServiceLifecycle
import Synchronization

/// Each machine's queue, shown where the demo clients look: the machine's
/// YunXin chatroom queue (SPEC §8). The waiting players, in order, become
/// the chatroom queue's elements: key the player's account (prefixed with
/// the provider for players who are not NetEase's), value `{"nick":"…"}`.
///
/// It observes the machines (``MachineObserver``): the queue snapshot each
/// machine publishes lands in the machine's slot, a newer one replacing the
/// one still there (counted as coalesced), so what waits is bounded by the
/// number of rooms and handing a snapshot over costs a machine a lock and
/// no I/O. One worker brings each chatroom queue to the latest snapshot with
/// `queuePoll` (those who left or were offered their turn) and `queueOffer`
/// (those who joined), in order. It reads the chatroom queue back with
/// `queueList` and repairs the difference at start and after any call
/// failed; failed calls are counted and retried with backoff, never by a
/// game. A key NetEase refuses for what it is (a 4xx code: an account
/// NetEase takes no queue key for) is skipped and counted, once for as
/// long as that player waits: it never holds up the players behind it.
final class ChatroomMirror: Service, MachineObserver, Sendable {
    /// One machine with a chatroom.
    struct Room: Sendable {
        /// The machine's index in the arcade.
        var machine: Int
        var machineID: String
        var chatroom: Int64
    }

    static let minimumBackoff: Duration = .seconds(1)
    static let maximumBackoff: Duration = .seconds(30)

    let rooms: [Room]
    /// The room of each machine index that has one.
    private let byMachine: [Int: Int]
    private let api: any ChatroomAPI
    private let clock: GameClock
    private let logger: Logger
    private let warnings = LogLimiter()
    private let state = Mutex(Shared())

    private struct Shared {
        /// The latest snapshot of each room not yet taken by the worker.
        var pending: [Int: QueueSnapshot] = [:]
        var waiter: CheckedContinuation<Void, Never>?
        /// Something arrived while the worker was busy.
        var woken = false
        /// Each machine's snapshot now, to start from (set by the wiring once the arcade exists).
        var current: (@Sendable (Int) -> QueueSnapshot?)?
    }

    /// What the worker knows of one room.
    private struct Mirrored {
        /// What the chatroom queue is believed to hold.
        var believed: [ChatroomQueueElement] = []
        /// What it should hold, and the snapshot that said so.
        var desired: [ChatroomQueueElement]?
        var seq: Int64 = -1
        /// Read the chatroom queue back before the next call.
        var needsRepair = true
        /// Keys NetEase refused to offer: left out while they wait.
        var refused: Set<String> = []

        /// What the chatroom queue should hold: the snapshot's waiting list
        /// without the keys NetEase refuses.
        var wanted: [ChatroomQueueElement]? { desired.map { $0.filter { !refused.contains($0.key) } } }

        var inStep: Bool { !needsRepair && (wanted == nil || wanted == believed) }
    }

    init(rooms: [Room], api: any ChatroomAPI, clock: GameClock, logger: Logger) {
        self.rooms = rooms
        byMachine = Dictionary(rooms.enumerated().map { ($0.element.machine, $0.offset) }, uniquingKeysWith: { first, _ in first })
        self.api = api
        self.clock = clock
        self.logger = logger
        AppServerMetrics.prepare()
    }

    /// The rooms of the config's machines that have a chatroom.
    convenience init(config: GatewayConfig, api: any ChatroomAPI, clock: GameClock, logger: Logger) {
        let rooms = config.machines.enumerated().compactMap { index, machine -> Room? in
            machine.chatroomID.map { Room(machine: index, machineID: machine.id, chatroom: $0) }
        }
        self.init(rooms: rooms, api: api, clock: clock, logger: logger)
    }

    /// Where each machine's snapshot is read at start.
    func start(from current: @escaping @Sendable (_ machine: Int) -> QueueSnapshot?) {
        state.withLock { $0.current = current }
    }

    /// A machine published a snapshot; never waits.
    func snapshot(_ index: Int, _ snapshot: QueueSnapshot, payload: [UInt8]) {
        guard let room = byMachine[index] else { return }
        let (replaced, waiter) = state.withLock { state in
            let replaced = state.pending.updateValue(snapshot, forKey: room) != nil
            let waiter = state.waiter
            state.waiter = nil
            if waiter == nil { state.woken = true }
            return (replaced, waiter)
        }
        if replaced { AppServerMetrics.coalesced.increment() }
        waiter?.resume()
    }

    func event(_ index: Int, _ event: GameEvent, payload: [UInt8]) {}

    func run() async throws {
        try? await cancelWhenGracefulShutdown { [self] in try await mirror() }
    }

    /// The worker, until cancelled.
    private func mirror() async throws {
        var mirrored = [Mirrored](repeating: Mirrored(), count: rooms.count)
        if let current = state.withLock({ $0.current }) {
            for (index, room) in rooms.enumerated() {
                if let snapshot = current(room.machine) { Self.take(snapshot, into: &mirrored[index]) }
            }
        }
        var backoff = Self.minimumBackoff
        while !Task.isCancelled {
            for (room, snapshot) in takePending() { Self.take(snapshot, into: &mirrored[room]) }
            let work = mirrored.indices.filter { !mirrored[$0].inStep }
            if work.isEmpty {
                await waitForSnapshot()
                continue
            }
            var failed = false
            for index in work where !Task.isCancelled {
                if await !sync(rooms[index], &mirrored[index]) { failed = true }
            }
            guard failed else {
                backoff = Self.minimumBackoff
                continue
            }
            try await clock.sleep(clock.now() + backoff)
            backoff = min(backoff * 2, Self.maximumBackoff)
        }
    }

    private func takePending() -> [Int: QueueSnapshot] {
        state.withLock { state -> [Int: QueueSnapshot] in
            let pending = state.pending
            state.pending = [:]
            return pending
        }
    }

    /// A snapshot's waiting list as the room's elements, unless it is older than the one it has.
    private static func take(_ snapshot: QueueSnapshot, into room: inout Mirrored) {
        guard snapshot.seq >= room.seq else { return }
        room.seq = snapshot.seq
        var seen: Set<String> = []
        let desired = snapshot.waiting.compactMap { player in
            let element = element(for: player)
            return seen.insert(element.key).inserted ? element : nil
        }
        room.desired = desired
        // A refused key is tried again only if its player leaves and comes back.
        room.refused.formIntersection(desired.map(\.key))
    }

    /// The chatroom queue element of a waiting player.
    static func element(for player: WaitingPlayer) -> ChatroomQueueElement {
        let key = player.provider == "netease" ? player.accid : "\(player.provider):\(player.accid)"
        let nick = player.nick.isEmpty ? player.accid : player.nick
        return ChatroomQueueElement(key: key, value: String(decoding: JSONCoding.encode(["nick": nick]), as: UTF8.self))
    }

    /// What takes a queue holding `believed` to `desired`: the elements
    /// that are out of place polled, values that changed offered again
    /// (an offer of a key that is there updates it in place), the rest
    /// offered in order. The longest run of `desired`'s head that is in
    /// `believed` in order stays where it is.
    static func plan(from believed: [ChatroomQueueElement], to desired: [ChatroomQueueElement]) -> [Step] {
        var matched = 0
        var polls: [Step] = []
        var updates: [Step] = []
        for element in believed {
            if matched < desired.count, element.key == desired[matched].key {
                if element.value != desired[matched].value { updates.append(.offer(desired[matched])) }
                matched += 1
            } else {
                polls.append(.poll(element.key))
            }
        }
        return polls + updates + desired[matched...].map { .offer($0) }
    }

    enum Step: Sendable, Equatable {
        case poll(String)
        case offer(ChatroomQueueElement)
    }

    /// Brings one chatroom queue in step; false when a call failed (the
    /// room is then read back before its next call).
    private func sync(_ room: Room, _ mirrored: inout Mirrored) async -> Bool {
        var call = "queueList"
        do {
            if mirrored.needsRepair {
                do {
                    mirrored.believed = try await api.queueList(room: room.chatroom)
                } catch {
                    AppServerMetrics.listFailed.increment()
                    throw error
                }
                AppServerMetrics.listOK.increment()
                AppServerMetrics.repairs.increment()
                mirrored.needsRepair = false
            }
            guard let wanted = mirrored.wanted else { return true }
            for step in Self.plan(from: mirrored.believed, to: wanted) where !Task.isCancelled {
                switch step {
                case .poll(let key):
                    call = "queuePoll"
                    do {
                        try await api.queuePoll(room: room.chatroom, key: key)
                    } catch where error.refusesTheCall {
                        // Not there to poll (someone else took it out): not in the queue, as wanted.
                        logger.debug(
                            "A chatroom queue key NetEase would not poll: taken as gone",
                            metadata: error.shape.metadata(["chatroom.id": .stringConvertible(room.chatroom)]))
                    } catch {
                        AppServerMetrics.pollFailed.increment()
                        throw error
                    }
                    AppServerMetrics.pollOK.increment()
                    mirrored.believed.removeAll { $0.key == key }
                case .offer(let element):
                    call = "queueOffer"
                    do {
                        try await api.queueOffer(room: room.chatroom, key: element.key, value: element.value)
                    } catch where error.refusesTheCall {
                        skip(room, key: element.key, call: call, error)
                        mirrored.refused.insert(element.key)
                        // What the plan put after it still goes out, in order, on the next pass.
                        return true
                    } catch {
                        AppServerMetrics.offerFailed.increment()
                        throw error
                    }
                    AppServerMetrics.offerOK.increment()
                    if let index = mirrored.believed.firstIndex(where: { $0.key == element.key }) {
                        mirrored.believed[index] = element
                    } else {
                        mirrored.believed.append(element)
                    }
                }
            }
            return true
        } catch {
            mirrored.needsRepair = true
            warnings.warning(
                "failed.\(call)", "Chatroom queue not updated; it is read back and repaired when NetEase answers",
                ErrorShape(error, otherwise: "netease_api", "the NetEase API call failed").metadata([
                    "machine.id": .string(room.machineID), "chatroom.id": .stringConvertible(room.chatroom), "netease.call": .string(call),
                ]), on: logger)
            return false
        }
    }

    /// A key NetEase refused: counted and logged (at most once every 10 s), never retried while its player waits.
    private func skip(_ room: Room, key: String, call: String, _ error: NetEaseAPIError) {
        AppServerMetrics.skipped.increment()
        warnings.warning(
            "refused.\(call)", "NetEase refuses a chatroom queue key: skipped, the rest of the queue goes on",
            error.shape.metadata([
                "machine.id": .string(room.machineID), "chatroom.id": .stringConvertible(room.chatroom), "netease.call": .string(call),
                "chatroom.key": .string(String(key.prefix(64))),
            ]), on: logger)
    }

    /// Returns once a snapshot arrived (or one arrived while the worker was busy), or when cancelled.
    private func waitForSnapshot() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.woken || Task.isCancelled {
                        state.woken = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}
