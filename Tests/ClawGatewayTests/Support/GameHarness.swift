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
    private let generation = Atomic<Int>(1)
    let publications = Recorder<Publication>()
    /// Runs in `publish` before (`true`) and after (`false`) a message goes
    /// out on the connection: a test holds a publisher's thread there.
    private let hook = Mutex<(@Sendable (Publication, _ before: Bool) -> Void)?>(nil)

    var isConnected: Bool {
        get { connected.load(ordering: .relaxed) }
        set { connected.store(newValue, ordering: .relaxed) }
    }

    /// The broker connection publishes go on: one more with ``reconnect()``.
    var connection: Int { generation.load(ordering: .relaxed) }

    /// A new broker connection: what is published from now on goes on it.
    func reconnect() {
        generation.add(1, ordering: .relaxed)
    }

    func onPublish(_ body: (@Sendable (Publication, _ before: Bool) -> Void)?) {
        hook.withLock { $0 = body }
    }

    @discardableResult
    func publish(_ topic: String, payload: [UInt8], qos: MQTTQoS, retain: Bool) throws(MQTTError) -> Int {
        guard isConnected else { throw .notConnected(topic) }
        let publication = Publication(topic: topic, payload: payload, qos: qos, retain: retain)
        let hook = hook.withLock { $0 }
        hook?(publication, true)
        let connection = connection
        publications.append(publication)
        hook?(publication, false)
        return connection
    }
}

/// Replies to players, recorded.
final class RecordingPlayers: PlayerChannel {
    struct Reply: Sendable {
        var reply: PlayerReply
        var machine: String
        var player: String { reply.to.accid }
        var message: WireMessage { reply.message }
    }

    let replies = Recorder<Reply>()
    /// Runs as each reply is handed over, before it is recorded.
    private let onSend: @Sendable (PlayerReply) -> Void

    init(onSend: @escaping @Sendable (PlayerReply) -> Void = { _ in }) {
        self.onSend = onSend
    }

    func send(_ reply: PlayerReply, from machine: MachineConfig) {
        onSend(reply)
        replies.append(Reply(reply: reply, machine: machine.id))
    }

    func to(_ player: String) -> [WireMessage] {
        replies.items.filter { $0.player == player }.map(\.message)
    }
}

/// One machine's game as the daemon runs it, but on a test clock: the
/// machine, its lock and outbox, the storage writer's thread and a real
/// SQLite file, with a recording publisher and player channel. The machine
/// is `m1` with cameras 1 and 2.
///
/// Every call returns once what it caused is carried out: a request when its
/// writes are durable and told, a machine message or a clock move once the
/// writer has committed and the machine told (``settle()``). Nothing sleeps.
final class GameHarness: Sendable {
    let clock = TestClock<Duration>()
    /// The game's view of ``clock``: wall time from ``epoch``.
    let gameClock: GameClock
    let publisher = RecordingPublisher()
    let players: RecordingPlayers
    let directory: URL
    let writer: StorageWriter
    let settings: GameSettings
    let arcade: Arcade
    /// The arcade reading the writer's reports, as ``ArcadeService`` does.
    private let reports: Task<Void, Never>
    /// `m1`, also after a reload took it out of the arcade.
    let machine: Machine
    static let epoch = Date(timeIntervalSince1970: 1_795_000_000)

    /// - Parameter sessions: the prefix of session ids (`s-m1-1`, `s-m1-2`, …); a
    ///   harness restarting on another's directory needs its own.
    /// - Parameter startWriter: false leaves every write pending until
    ///   ``writer`` is started by hand, to see what waits for durability.
    /// - Parameter startingAt: the wall time the clock starts at: a harness
    ///   restarting on another's directory starts when that one stopped,
    ///   or later.
    /// - Parameter prize: what a win on m1 makes (SPEC §15); nil: none.
    init(
        settings: GameSettings = GameSettings(), directory: URL? = nil, sessions prefix: String = "s-", startWriter: Bool = true,
        players: RecordingPlayers = RecordingPlayers(), startingAt start: Date = GameHarness.epoch, prize: MachinePrize? = nil
    ) throws {
        self.directory = try directory ?? TemporaryDirectory.make(prefix: "game")
        self.players = players
        self.settings = settings
        let store = try GameStore(path: Self.databasePath(in: self.directory))
        writer = StorageWriter(store: store, logger: Logger(label: "test"))
        gameClock = .following(clock, from: start)
        let environment = MachineEnvironment(
            clock: gameClock, publisher: publisher, players: players, writer: writer,
            deadlines: Deadlines(), limits: PlayerLimits(perSecond: settings.maxCommandsPerSecond), logger: Logger(label: "test"),
            sessionPrefix: prefix, ledger: FreeGames(writer: writer))
        let arcade = try Arcade(config: Self.config(settings: settings, prize: prize), environment: environment)
        self.arcade = arcade
        machine = arcade.machines[0]
        reports = Task { await arcade.runStorageReports() }
        if startWriter { writer.start() }
    }

    /// A harness whose PC has said `online`.
    static func online(
        settings: GameSettings = GameSettings(), directory: URL? = nil, sessions: String = "s-",
        players: RecordingPlayers = RecordingPlayers(), prize: MachinePrize? = nil
    ) async throws -> GameHarness {
        let game = try GameHarness(settings: settings, directory: directory, sessions: sessions, players: players, prize: prize)
        await game.presence(.online)
        return game
    }

    static func databasePath(in directory: URL) -> String {
        directory.appendingPathComponent("gateway.sqlite").path
    }

    static func config(settings: GameSettings, prize: MachinePrize? = nil) -> GatewayConfig {
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
                    cameras: [CameraConfig(id: "1"), CameraConfig(id: "2")], prize: prize)
            ])
    }

    /// Stops as ``ArcadeService`` does: the reports are no longer read, the
    /// machines stop, the writer commits what is queued and closes the file.
    func stop() async {
        reports.cancel()
        await reports.value
        arcade.stop()
        await writer.stop()
    }

    // MARK: Driving

    /// A player's notification with this wire JSON, answered as the ingress
    /// answers it (once what it changed is durable); returns once what it
    /// caused is carried out.
    @discardableResult
    func send(
        _ player: String, _ json: String, to machine: String = "m1", provider: String = "test", age: Duration? = nil
    ) async -> RequestOutcome {
        let outcome = await arcade.answer(
            PlayerNotification(from: player, to: machine, attach: Array(json.utf8), provider: provider, age: age))
        await settle()
        return outcome
    }

    @discardableResult
    func join(_ player: String) async -> RequestOutcome {
        await send(player, #"{"command":6,"data":"\#(player.capitalized)"}"#)
    }

    /// Joins and accepts the offer: the player is playing.
    func play(_ player: String) async throws {
        await join(player)
        let session = try #require(offer(to: player))
        #expect(await send(player, #"{"command":12,"data":"\#(session)"}"#) == .accepted(session: session))
    }

    func presence(_ presence: Presence) async {
        arcade.route(MQTTMessage(topic: "claw/m1/state", payload: Array(presence.rawValue.utf8), retain: true))
        await settle()
    }

    func ack(_ serial: Int64, data: String = "ok") async {
        arcade.route(MQTTMessage(topic: "claw/m1/ack", payload: Array(#"{"command":5,"data":"\#(data)","serial":\#(serial)}"#.utf8), retain: false))
        await settle()
    }

    func result(_ won: Bool, session: String? = nil, serial: Int64? = nil, retained: Bool = false) async {
        let message = WireMessage(.result, data: String(won), serial: serial, session: session)
        arcade.route(MQTTMessage(topic: "claw/m1/result", payload: message.encoded(), retain: retained))
        await settle()
    }

    /// Moves the test clock and lets what is due happen, as the arcade's
    /// deadlines would when they wake.
    /// The gateway's broker connection is new (a reconnect): the connected hook runs.
    func reconnect() async {
        publisher.reconnect()
        arcade.republish(connection: publisher.connection)
        await settle()
    }

    /// The wall time now, on this harness's clock.
    var wallNow: Date { gameClock.wallNow() }

    func advance(by duration: Duration) async {
        await clock.advance(by: duration)
        arcade.fireDueDeadlines()
        await settle()
    }

    /// Returns once everything written so far is durable and everything
    /// decided so far told.
    func settle() async {
        if let ticket = writer.lastIssued {
            _ = await machine.waitTold(ticket, timeout: .seconds(60))
        } else {
            machine.drain()
        }
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
        try writer.store.gamesNow(machine: "m1", limit: 100, offset: 0)
    }
}

extension RequestOutcome {
    var rejectedCode: ErrorCode? {
        if case .rejected(let error) = self { return error.code }
        return nil
    }
}

extension Arcade {
    /// A notification's outcome as the ingress answers it: once what it
    /// changed is durable, or `gateway_unavailable` when that takes too long.
    func answer(_ notification: PlayerNotification) async -> RequestOutcome {
        let (outcome, ticket) = handleNow(notification)
        guard let ticket, await !durable(ticket) else { return outcome }
        return .rejected(Arcade.notSavedInTime)
    }
}
