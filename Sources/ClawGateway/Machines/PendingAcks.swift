import Protocol

/// A message published to the machine whose ack has not come yet.
struct PendingAck: Sendable, Equatable {
    var sentAt: Duration
    var command: CommandCode
    /// The player whose command it was, and that command's serial; nil for
    /// what the gateway sent on its own (coins, the play timer's grab).
    var player: PlayerAddress?
    var playerSerial: Int64?
    /// The game a coin (1001) was for: its ack is the PC's word that the game started.
    var session: String?
    /// The broker connection a coin went out on; nil until it is published.
    var sentOn: Int?
}

/// The pending acks of a machine, by gateway serial.
///
/// Serials are handed out in increasing order and every ack has the same
/// timeout, so the oldest pending ack is the one with the lowest serial:
/// `floor` walks up past serials already settled, O(1) amortised.
struct PendingAcks: Sendable {
    private var bySerial: [Int64: PendingAck] = [:]
    private var floor: Int64
    /// Coins (1001) among them: most of the time none, and ``coin(for:)`` looks no further.
    private var coins = 0

    init(floor: Int64) {
        self.floor = floor
    }

    var isEmpty: Bool { bySerial.isEmpty }
    var count: Int { bySerial.count }

    mutating func insert(_ ack: PendingAck, serial: Int64) {
        if let replaced = bySerial.updateValue(ack, forKey: serial), replaced.command == .addCoins { coins -= 1 }
        if ack.command == .addCoins { coins += 1 }
        floor = min(floor, serial)
    }

    mutating func remove(_ serial: Int64) -> PendingAck? {
        let removed = bySerial.removeValue(forKey: serial)
        if removed?.command == .addCoins { coins -= 1 }
        return removed
    }

    /// Notes the broker connection the coin `serial` went out on; the pending coin, if it still is.
    mutating func coinSent(_ serial: Int64, on connection: Int) -> PendingAck? {
        guard bySerial[serial]?.command == .addCoins else { return nil }
        bySerial[serial]?.sentOn = connection
        return bySerial[serial]
    }

    /// The pending ack of `serial`.
    subscript(serial serial: Int64) -> PendingAck? { bySerial[serial] }

    /// The serial of the pending coin (1001) for `session`, if its ack has not come.
    func coin(for session: String) -> Int64? {
        guard coins > 0 else { return nil }
        return bySerial.first { $0.value.command == .addCoins && $0.value.session == session }?.key
    }

    /// The oldest pending ack.
    mutating func oldest() -> (serial: Int64, ack: PendingAck)? {
        guard !bySerial.isEmpty else { return nil }
        while true {
            if let ack = bySerial[floor] { return (floor, ack) }
            floor += 1
        }
    }

    /// When the oldest pending ack times out; nil when none is pending.
    mutating func nextDue(after timeout: Duration) -> Duration? {
        oldest().map { $0.ack.sentAt + timeout }
    }

    mutating func removeAll() {
        bySerial.removeAll()
        coins = 0
    }
}
