import Foundation
import Logging
import Protocol

/// Where a machine publishes: the MQTT client in the daemon, a recorder in tests.
protocol MachinePublisher: Sendable {
    var isConnected: Bool { get }
    /// Publishes now or throws ``MQTTError/Code/notConnected``; never
    /// queues. Returns the broker connection it went on: one more with
    /// every reconnect (a coin's game needs to know, SPEC §3).
    @discardableResult
    func publish(_ topic: String, payload: [UInt8], qos: MQTTQoS, retain: Bool) throws(MQTTError) -> Int
}

extension MQTTClient: MachinePublisher {
    @discardableResult
    func publish(_ topic: String, payload: [UInt8], qos: MQTTQoS, retain: Bool) throws(MQTTError) -> Int {
        try publish(topic, payload: payload, qos: qos, retain: retain, expiry: nil)
    }
}

/// Who hears of what a machine publishes, besides MQTT: each snapshot and
/// each event, as it goes out, whether or not the broker takes it. Called
/// on the thread that carries out the machine's effects: it must not block.
protocol MachineObserver: Sendable {
    /// The machine at `index` published `snapshot` (retained, as `payload`).
    func snapshot(_ index: Int, _ snapshot: QueueSnapshot, payload: [UInt8])
    /// The machine at `index` published `event` (as `payload`).
    func event(_ index: Int, _ event: GameEvent, payload: [UInt8])
    /// The machine at `index` was retired by a reload and is free: it is
    /// out of the arcade, its retained snapshot cleared (SPEC §13).
    func gone(_ index: Int)
}

extension MachineObserver {
    func gone(_ index: Int) {}
}

/// What a machine's game is given: its clock, where it publishes, how it
/// answers players, where it records, who keeps its deadlines.
struct MachineEnvironment: Sendable {
    var clock: GameClock
    var publisher: any MachinePublisher
    var players: any PlayerChannel
    var writer: StorageWriter
    var deadlines: Deadlines
    /// Every player's budget and refusals, across the machines.
    var limits: PlayerLimits
    var logger: Logger
    /// Unique to this run of the gateway: session ids are this, the machine's id and a counter.
    var sessionPrefix: String = Self.randomSessionPrefix()
    /// Who else hears of each snapshot and event: the live feed (`GET
    /// /v1/stream`, the dashboard), the chatroom mirror.
    var observers: [any MachineObserver] = []
    /// Where games are paid from (SPEC §11): nowhere, the site's wallets,
    /// or the chain's ledger; every transition goes through it.
    var ledger: any GameLedger

    static func randomSessionPrefix() -> String {
        Signatures.nonce(bytes: 6) + "-"
    }
}
