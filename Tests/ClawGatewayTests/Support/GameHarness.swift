import Clocks
import Foundation
import Logging
import Protocol
import Synchronization
import Testing

@testable import ClawGateway

/// What a machine published, recorded instead of sent; can play a broker that is down.
final class RecordingPublisher: MachinePublisher {
    struct Publication: Sendable {
        var topic: String
        var payload: [UInt8]
        var qos: MQTTQoS
        var retain: Bool
        var text: String { String(decoding: payload, as: UTF8.self) }
    }

    private let connected = Atomic<Bool>(true)
    let publications = Recorder<Publication>()

    var isConnected: Bool {
        get { connected.load(ordering: .relaxed) }
        set { connected.store(newValue, ordering: .relaxed) }
    }

    func publish(_ topic: String, payload: [UInt8], qos: MQTTQoS, retain: Bool) throws(MQTTError) {
        guard isConnected else { throw .notConnected(topic) }
        publications.append(Publication(topic: topic, payload: payload, qos: qos, retain: retain))
    }
}

/// Replies to players, recorded.
final class RecordingPlayers: PlayerChannel {
    struct Reply: Sendable {
        var player: String
        var machine: String
        var message: WireMessage
    }

    let replies = Recorder<Reply>()
    let providers = Mutex<[String: String]>([:])

    func send(_ message: WireMessage, to player: String, from machine: MachineConfig) {
        replies.append(Reply(player: player, machine: machine.id, message: message))
    }

    func remember(player: String, provider: String) {
        providers.withLock { $0[player] = provider }
    }

    func to(_ player: String) -> [WireMessage] {
        replies.items.filter { $0.player == player }.map(\.message)
    }
}

/// One machine's game on a test clock, a recording publisher and player
/// channel, and a real SQLite file; the machine is `m1` with cameras 1 and 2.
final class GameHarness: Sendable {
    let clock = TestClock<Duration>()
    let publisher = RecordingPublisher()
    let players = RecordingPlayers()
    let directory: URL
    let store: GameStore
    let settings: GameSettings
    let arcade: Arcade
    var machine: Machine { arcade.machines[0] }
    static let epoch = Date(timeIntervalSince1970: 1_795_000_000)

    /// - Parameter sessions: the prefix of session ids (`s1`, `s2`, …); a
    ///   harness restarting on another's directory needs its own.
    init(settings: GameSettings = GameSettings(), online: Bool = true, directory: URL? = nil, sessions prefix: String = "s") throws {
        self.directory = try directory ?? TemporaryDirectory.make(prefix: "game")
        self.settings = settings
        store = try GameStore(path: self.directory.appendingPathComponent("gateway.sqlite").path)
        let sessions = Atomic<Int>(0)
        let environment = MachineEnvironment(
            clock: .following(clock, from: Self.epoch), publisher: publisher, players: players, store: store,
            logger: Logger(label: "test"),
            newSessionID: { "\(prefix)\(sessions.add(1, ordering: .relaxed).newValue)" })
        arcade = try Arcade(config: Self.config(settings: settings), environment: environment)
        if online { presence(.online) }
    }

    static func config(settings: GameSettings) -> GatewayConfig {
        GatewayConfig(
            gateway: GatewaySettings(id: "test", logLevel: .info),
            mqtt: MQTTSettings(
                url: BrokerURL(host: "127.0.0.1", port: 1883, usesTLS: false), clientID: "test", keepalive: 30,
                topicPrefix: "claw"),
            http: HTTPSettings(host: "127.0.0.1", port: 0),
            im: IMSettings(),
            game: settings,
            storage: StorageSettings(path: ""),
            machines: [
                MachineConfig(
                    id: "m1", name: "Pikachu", imAccount: "claw_m1",
                    cameras: [CameraConfig(id: "1"), CameraConfig(id: "2")])
            ])
    }

    // MARK: Driving

    /// A player's notification with this wire JSON.
    @discardableResult
    func send(_ player: String, _ json: String, to machine: String = "m1") -> RequestOutcome {
        arcade.handle(PlayerNotification(from: player, to: machine, attach: Array(json.utf8), provider: "test"))
    }

    @discardableResult
    func join(_ player: String) -> RequestOutcome {
        send(player, #"{"command":6,"data":"\#(player.capitalized)"}"#)
    }

    /// Joins and accepts the offer: the player is playing.
    func play(_ player: String) throws {
        join(player)
        let session = try #require(offer(to: player))
        #expect(send(player, #"{"command":12,"data":"\#(session)"}"#) == .accepted(session: session))
    }

    func presence(_ presence: Presence) {
        arcade.route(MQTTMessage(topic: "claw/m1/state", payload: Array(presence.rawValue.utf8), retain: true))
    }

    func ack(_ serial: Int64, data: String = "ok") {
        arcade.route(MQTTMessage(topic: "claw/m1/ack", payload: Array(#"{"command":5,"data":"\#(data)","serial":\#(serial)}"#.utf8), retain: false))
    }

    func result(_ won: Bool) {
        arcade.route(MQTTMessage(topic: "claw/m1/result", payload: Array(#"{"command":4,"data":"\#(won)"}"#.utf8), retain: false))
    }

    /// Advances the test clock and waits until the timers it woke have run.
    func advance(by duration: Duration) async {
        await clock.advance(by: duration)
        await settleTasks()
    }

    /// Lets woken timer tasks run to completion.
    func settleTasks() async {
        for _ in 0..<200 { await Task.yield() }
    }

    // MARK: Reading

    var status: MachineStatus { machine.currentSnapshot().state }
    var snapshot: QueueSnapshot { machine.currentSnapshot() }

    func published(on kind: MachineTopic) -> [RecordingPublisher.Publication] {
        publisher.publications.items.filter { $0.topic == "claw/m1/\(kind.rawValue)" }
    }

    /// The commands published to the PC (control and camera topics).
    var commands: [WireMessage] {
        publisher.publications.items
            .filter { $0.topic == "claw/m1/control" || $0.topic == "claw/m1/camera" }
            .compactMap { try? WireMessage.decode($0.payload) }
    }

    var events: [GameEvent] {
        published(on: .events).compactMap { try? JSONDecoder().decode(GameEvent.self, from: Data($0.payload)) }
    }

    func events(_ type: EventType) -> [GameEvent] { events.filter { $0.type == type } }

    /// The last retained snapshot published.
    var lastSnapshot: QueueSnapshot? {
        published(on: .queue).last.flatMap { try? JSONDecoder().decode(QueueSnapshot.self, from: Data($0.payload)) }
    }

    /// The session of the last turn offer (11) the player received.
    func offer(to player: String) -> String? {
        players.to(player).last(where: { $0.code == .turnOffer })?.data
    }

    /// The last error code (9) the player received.
    func lastError(of player: String) -> String? {
        players.to(player).last(where: { $0.code == .error })?.data
    }

    func games() throws -> [GameRecord] {
        try store.games(machine: "m1", limit: 100, offset: 0)
    }
}
