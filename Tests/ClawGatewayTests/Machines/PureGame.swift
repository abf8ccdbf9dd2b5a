import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// A machine's game as the plain value it is: transitions called directly,
/// time moved by hand, no broker, no storage, no tasks. Machine `m1`
/// (Pikachu) with cameras 1 and 2; sessions are `s1`, `s2`, …; gateway
/// serials start at 1000.
struct PureGame {
    var state: MachineState
    var now = Moment(uptime: .seconds(100), wall: Date(timeIntervalSince1970: 1_795_000_000))
    var brokerConnected = true
    var storageWritable = true
    /// The players' balances when games cost credits: the driving methods
    /// apply what each step decided, as ``Machine`` does.
    var wallets: WalletBook?
    /// At a site of a chain whose games cost credits: the chain's ledger.
    var chainLedger: ChainLedgerContext?
    /// The router's voucher every notification comes with in a chain (SPEC §9); nil: none.
    var voucher: ChainVoucher? = PureGame.routersVoucher

    /// A voucher as a router attaches it to an accept (its fields are the ledger's business, not the site's).
    static let routersVoucher = ChainVoucher(
        key: "routers-key-0123456789", site: "arcade-1", provider: "app", account: "alice", session: "s1", copy: "r1-copy", receivedMS: 1,
        price: 2)

    static let machine = MachineConfig(
        id: "m1", name: "Pikachu", imAccount: "claw_m1", cameras: [CameraConfig(id: "1"), CameraConfig(id: "2")])

    init(
        settings: GameSettings = GameSettings(), machine: MachineConfig = Self.machine, online: Bool = true,
        restored: RestoredMachine? = nil
    ) {
        state = MachineState(
            machine: machine, settings: settings,
            restored: restored ?? RestoredMachine(queue: [], snapshotSeq: 0, paused: false),
            firstSerial: 1000, sessionPrefix: "s")
        if online { presence(.online) }
    }

    var context: TransitionContext {
        TransitionContext(
            now: now, brokerConnected: brokerConnected, storageWritable: storageWritable, wallets: wallets, chainLedger: chainLedger)
    }

    /// Applies a step's ledger entries to the wallets, as ``Machine`` does under their lock.
    @discardableResult
    func paid<Outcome>(_ step: Step<Outcome>) -> Step<Outcome> {
        wallets?.apply(step.writes)
        return step
    }

    // MARK: Driving

    /// A player's notification with this wire JSON, decoded as the arcade does.
    @discardableResult
    mutating func send(_ player: String, _ json: String, provider: String = "app") -> Step<RequestOutcome> {
        let address = PlayerAddress(accid: player, provider: provider)
        do throws(WireError) {
            let request = try PlayerRequest(WireMessage.decode(Array(json.utf8)))
            try request.validate(cameras: Self.machine.cameraIDs)
            return paid(state.handle(request, from: address, voucher: chainLedger == nil ? nil : voucher, context))
        } catch {
            Issue.record("the test sent a request the arcade would refuse: \(error)")
            return Step(outcome: .rejected(error), effects: [], writes: [])
        }
    }

    @discardableResult
    mutating func join(_ player: String) -> Step<RequestOutcome> {
        send(player, #"{"command":6,"data":"\#(player.capitalized)"}"#)
    }

    /// Joins and accepts the offer: the player is playing. Returns the session.
    @discardableResult
    mutating func play(_ player: String) throws -> String {
        let joined = join(player)
        let session = try #require(joined.offer(to: player)?.data ?? state.phase.turn?.session)
        #expect(send(player, #"{"command":12,"data":"\#(session)"}"#).outcome == .accepted(session: session))
        return session
    }

    /// The PC acks the coin of the game in progress: it says it started the game.
    @discardableResult
    mutating func ackCoin() -> Step<Void> {
        let coin = state.phase.turn.flatMap { state.acks.coin(for: $0.session) }
        #expect(coin != nil, "a coin waits for its ack")
        return ack(coin ?? -1)
    }

    @discardableResult
    mutating func move(_ player: String, _ direction: String = "left", serial: Int64) -> Step<RequestOutcome> {
        send(player, #"{"command":1,"data":"\#(direction)","serial":\#(serial)}"#)
    }

    @discardableResult
    mutating func presence(_ presence: Presence, retained: Bool = false) -> Step<Void> {
        paid(state.presence(presence, retained: retained, context))
    }

    @discardableResult
    mutating func result(_ won: Bool, session: String? = nil, serial: Int64? = nil) -> Step<Void> {
        paid(state.result(won: won, data: String(won), session: session, serial: serial, context))
    }

    @discardableResult
    mutating func ack(_ serial: Int64, data: String = "ok") -> Step<Void> {
        paid(state.ack(serial: serial, data: data, context))
    }

    /// Moves the clock and lets whatever is due happen, as the arcade's deadlines would.
    @discardableResult
    mutating func advance(by duration: Duration) -> Step<Void> {
        now.uptime += duration
        now.wall = now.wall.addingTimeInterval(duration.seconds)
        return paid(state.expire(context))
    }

    var status: MachineStatus { state.status }
    var snapshot: QueueSnapshot { state.snapshot(at: now) }
}

extension Step {
    var events: [GameEvent] {
        effects.compactMap { if case .event(let event, _) = $0 { event } else { nil } }
    }

    var eventTypes: [EventType] { events.map(\.type) }

    func events(_ type: EventType) -> [GameEvent] { events.filter { $0.type == type } }

    var replies: [PlayerReply] {
        effects.compactMap { if case .reply(let reply) = $0 { reply } else { nil } }
    }

    func replies(to player: String) -> [WireMessage] {
        replies.filter { $0.to.accid == player }.map(\.message)
    }

    func offer(to player: String) -> WireMessage? {
        replies(to: player).last { $0.code == .turnOffer }
    }

    func error(to player: String) -> String? {
        replies(to: player).last { $0.code == .error }?.data
    }

    /// Commands to the PC, and whether each went to the camera topic.
    var commands: [(message: WireMessage, camera: Bool)] {
        effects.compactMap { if case .command(let message, let camera) = $0 { (message, camera) } else { nil } }
    }

    var snapshots: [QueueSnapshot] {
        effects.compactMap { if case .snapshot(let snapshot) = $0 { snapshot } else { nil } }
    }

    var games: [GameRow] {
        writes.compactMap { if case .game(let row) = $0 { row } else { nil } }
    }

    /// The PC's numbered results confirmed on `result/ack` (once durable).
    var confirmed: [Int64] {
        effects.compactMap { if case .confirmResult(let serial) = $0 { serial } else { nil } }
    }

    var ledger: [LedgerEntry] {
        writes.compactMap { if case .ledger(let entry) = $0 { entry } else { nil } }
    }

    /// Debits asked of the chain's ledger (once durable).
    var asks: [ChainWalletAsk] {
        effects.compactMap { if case .askDebit(let ask) = $0 { ask } else { nil } }
    }

    /// The chain's ledger's asks written: debits asked, refunds owed.
    var chainWallet: [ChainWalletAsk] {
        writes.compactMap { if case .chainWallet(let ask) = $0 { ask } else { nil } }
    }
}

extension Step where Outcome == RequestOutcome {
    var rejectedCode: ErrorCode? { outcome.rejectedCode }
}
