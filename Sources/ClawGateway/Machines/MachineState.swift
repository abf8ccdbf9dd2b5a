import Foundation
import Protocol

/// A player waiting in a machine's queue.
struct QueueEntry: Sendable, Equatable {
    var accid: String
    var nick: String
    /// The IM provider of the notification that queued the player.
    var provider: String
}

/// Everything that changes in one machine, kept behind the machine's lock.
///
/// The game is `turn`: nil while idle, otherwise the player offered the
/// machine, playing, or awaiting the result (SPEC §3). `online` is what the
/// PC's retained `state` topic last said; while it is false the machine is
/// `offline` whatever `turn` was.
struct MachineState: Sendable {
    var online = false
    var paused: Bool
    var waiting: [QueueEntry]
    var turn: Turn?
    /// Of the retained snapshot; durable, so it keeps increasing across restarts.
    var snapshotSeq: Int64
    /// Of the events; increases within one run.
    var eventSeq: Int64 = 0
    /// The next gateway serial. Starts from the wall clock in milliseconds so
    /// that serials stay unique per machine across restarts of the gateway.
    var nextSerial: Int64
    var acks: PendingAcks
    /// The turn timer in flight.
    var timer: TurnTimer?
    var timerGeneration = 0
    /// Runs while acks are pending, to report the ones that time out.
    var ackSweeper: Task<Void, Never>?
    var stopped = false

    init(restored: RestoredMachine, firstSerial: Int64) {
        paused = restored.paused
        waiting = restored.queue
        snapshotSeq = restored.snapshotSeq
        nextSerial = firstSerial
        acks = PendingAcks(floor: firstSerial)
    }

    var status: MachineStatus {
        guard online else { return .offline }
        return turn?.phase.status ?? .idle
    }

    mutating func takeSerial() -> Int64 {
        defer { nextSerial += 1 }
        return nextSerial
    }

    func isWaiting(_ accid: String) -> Bool {
        waiting.contains { $0.accid == accid }
    }
}

/// The task that ends the current phase of the turn at its deadline.
struct TurnTimer: Sendable {
    var generation: Int
    var deadline: Duration
    var task: Task<Void, Never>
}

/// The player holding the machine, from the offer to the end of the game.
struct Turn: Sendable {
    enum Phase: Sendable, Equatable {
        case offered
        case playing
        /// The claw was dropped (by the player, by the play timer or because
        /// the player left); waiting for the PC's result.
        case awaitingResult

        var status: MachineStatus {
            switch self {
            case .offered: .offered
            case .playing: .playing
            case .awaitingResult: .awaitingResult
            }
        }
    }

    var player: QueueEntry
    /// Also the game's id in storage.
    var session: String
    var phase: Phase
    /// When the timer of the phase runs out, on the game clock.
    var deadline: Duration
    var commands = 0
    /// Player serials already forwarded in this game: IM copies can come twice.
    var seenSerials: Set<Int64> = []
    var bucket: TokenBucket
}

/// A message published to the machine whose ack has not come yet.
struct PendingAck: Sendable {
    var sentAt: Duration
    var command: CommandCode
    var player: String?
    var playerSerial: Int64?
}

/// The pending acks of a machine, by gateway serial. Serials are handed out in
/// increasing order and every ack has the same timeout, so the oldest pending
/// one is the lowest serial: `floor` walks up past serials already settled.
struct PendingAcks: Sendable {
    private(set) var bySerial: [Int64: PendingAck] = [:]
    private var floor: Int64

    init(floor: Int64) {
        self.floor = floor
    }

    var isEmpty: Bool { bySerial.isEmpty }

    mutating func insert(_ ack: PendingAck, serial: Int64) {
        bySerial[serial] = ack
        floor = min(floor, serial)
    }

    mutating func remove(_ serial: Int64) -> PendingAck? {
        bySerial.removeValue(forKey: serial)
    }

    /// The oldest pending ack.
    mutating func oldest() -> (serial: Int64, ack: PendingAck)? {
        guard !bySerial.isEmpty else { return nil }
        while true {
            if let ack = bySerial[floor] { return (floor, ack) }
            floor += 1
        }
    }

    mutating func removeAll() {
        bySerial.removeAll()
    }
}

/// Per-player command budget: `rate` tokens a second, at most `rate` saved up.
struct TokenBucket: Sendable {
    let rate: Double
    private var tokens: Double
    private var updated: Duration

    init(perSecond rate: Int, now: Duration) {
        self.rate = Double(rate)
        tokens = Double(rate)
        updated = now
    }

    mutating func take(now: Duration) -> Bool {
        tokens = min(rate, tokens + (now - updated).seconds * rate)
        updated = now
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}
