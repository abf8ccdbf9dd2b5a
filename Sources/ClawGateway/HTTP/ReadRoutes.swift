import Foundation
import Hummingbird
import Protocol

/// What operators and room lists read: health, readiness, the machines and
/// their games (SPEC §5).
struct ReadRoutes<Context: RequestContext>: Sendable {
    let arcade: Arcade
    let isBrokerConnected: @Sendable () -> Bool
    /// Why the site's chain link is not up, or nil.
    var chainProblem: @Sendable () -> String? = { nil }

    /// - Parameters:
    ///   - health: where `/healthz` and `/readyz` go: any `Host`, no token.
    ///   - reads: where the machines go (behind the ``AccessGuard`` of `.read`).
    func add(health: some RouterMethods<Context>, reads: some RouterMethods<Context>) {
        health.get("/healthz") { _, _ in
            JSONResponse.make(.ok, ["status": "ok"])
        }
        health.get("/readyz") { _, _ in
            await readiness()
        }
        reads.get("/v1/machines") { _, _ in
            JSONResponse.make(.ok, MachineList(machines: arcade.machines.map { MachineObject($0) }))
        }
        reads.get("/v1/machines/:id") { _, context in
            let machine = try machine(context)
            return JSONResponse.make(.ok, MachineDetail(machine))
        }
        reads.get("/v1/machines/:id/settings") { _, context in
            JSONResponse.make(.ok, SettingsAnswer(try machine(context)))
        }
        reads.get("/v1/machines/:id/games") { request, context in
            let machine = try machine(context)
            let limit = try request.integer("limit", default: 20, range: 1...500)
            let offset = try request.integer("offset", default: 0, range: 0...Int.max)
            return JSONResponse.make(
                .ok, GameList(games: try await arcade.writer.store.games(machine: machine.id, limit: limit, offset: offset)))
        }
    }

    private func readiness() async -> Response {
        var reasons: [String] = []
        if !isBrokerConnected() { reasons.append("the MQTT broker is not connected") }
        if let chain = chainProblem() { reasons.append(chain) }
        if !arcade.writer.isWritable {
            reasons.append("storage writes are failing; queue changes are refused until every machine's state is written again")
        } else if await !arcade.writer.store.readable() {
            reasons.append("storage cannot be read")
        }
        guard reasons.isEmpty else {
            return JSONResponse.error(.notReady(reasons))
        }
        return JSONResponse.make(.ok, ["status": "ready"])
    }

    private func machine(_ context: Context) throws -> Machine {
        try arcade.machine(in: context)
    }
}

extension Arcade {
    /// The machine named by the route's `:id`, or a 404 `unknown_machine`.
    func machine(in context: some RequestContext) throws(Refusal) -> Machine {
        let id = try context.pathParameter("id")
        guard let machine = machine(id) else { throw .unknownMachine(id) }
        return machine
    }
}

extension RequestContext {
    /// A parameter of the route's path (`:id`, `:accid`), percent-decoded:
    /// a browser writes `小明` as `%E5%B0%8F%E6%98%8E` and `a b` as `a%20b`.
    /// Every route reads its parameters through here. Bytes that are not
    /// UTF-8 once decoded are a 400, never a name that matches nothing.
    func pathParameter(_ name: String) throws(Refusal) -> String {
        let raw = parameters.get(name) ?? ""
        guard let decoded = raw.removingPercentEncoding else {
            throw .badParameter(name, "is not valid percent-encoded UTF-8")
        }
        return decoded
    }
}

// MARK: Shapes

struct MachineList: Encodable {
    var machines: [MachineObject]
}

/// A machine as the read API shows it (SPEC §5's machine object), at a
/// site and, through a router, at the chain: every key present, `null` for
/// what the one showing it does not know (a router knows no cameras, nor
/// anything of a machine whose snapshot has not reached it), and
/// `im_account` where the router lists it.
struct MachineObject: Encodable, Sendable {
    var id: String
    var name: String
    var imAccount: String?
    var online: Bool?
    var state: MachineStatus?
    var paused: Bool?
    /// No new turn until the PC acks or says online again (SPEC §3).
    var suspect: Bool?
    var queueLength: Int?
    var player: CurrentPlayer?
    var cameras: [Camera]?
    /// In maintenance (SPEC §12): the board's fault, the operator's reason;
    /// absent while they do not apply.
    var fault: MachineFault?
    var reason: String?
    /// Games left before the next full-power grab (SPEC §16), with `guarantee_after`.
    var playsUntilGuarantee: Int?

    struct Camera: Codable, Sendable {
        var id: String
        var stream: String?
    }

    init(_ machine: Machine) {
        self.init(machine.config, machine.currentSnapshot())
    }

    /// A site's own machine: everything is known.
    init(_ config: MachineConfig, _ snapshot: QueueSnapshot) {
        id = config.id
        name = config.name
        cameras = config.cameras.map { Camera(id: $0.id, stream: $0.stream) }
        show(snapshot)
    }

    /// A machine of the chain as a router knows it: its site's directory
    /// entry, the PC's presence and the site's last snapshot, each if any.
    init(_ machine: ChainDirectory.Machine, online: Bool?, snapshot: QueueSnapshot?) {
        id = machine.id
        name = machine.name
        imAccount = machine.imAccount
        if let snapshot { show(snapshot) }
        // The PC's own word first; the gateway's snapshot when it is all there is.
        if let online { self.online = online }
    }

    private mutating func show(_ snapshot: QueueSnapshot) {
        online = snapshot.online
        state = snapshot.state
        paused = snapshot.paused
        suspect = snapshot.suspect
        queueLength = snapshot.length
        player = snapshot.player
        fault = snapshot.fault
        reason = snapshot.reason
        playsUntilGuarantee = snapshot.playsUntilGuarantee
    }

    enum CodingKeys: String, CodingKey {
        case id, name
        case imAccount = "im_account"
        case online, state, paused, suspect
        case queueLength = "queue_length"
        case player, cameras, fault, reason
        case playsUntilGuarantee = "plays_until_guarantee"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(name, forKey: .name)
        try container.encodeIfPresent(imAccount, forKey: .imAccount)
        try container.encode(online, forKey: .online)
        try container.encode(state, forKey: .state)
        try container.encode(paused, forKey: .paused)
        try container.encode(suspect, forKey: .suspect)
        try container.encode(queueLength, forKey: .queueLength)
        try container.encode(player, forKey: .player)
        try container.encode(cameras, forKey: .cameras)
        try container.encodeIfPresent(fault, forKey: .fault)
        try container.encodeIfPresent(reason, forKey: .reason)
        try container.encodeIfPresent(playsUntilGuarantee, forKey: .playsUntilGuarantee)
    }
}

/// One machine with its waiting list.
struct MachineDetail: Encodable {
    var summary: MachineObject
    var waiting: [WaitingPlayer]

    init(_ machine: Machine) {
        let snapshot = machine.currentSnapshot()
        summary = MachineObject(machine.config, snapshot)
        waiting = snapshot.waiting
    }

    private enum CodingKeys: String, CodingKey { case waiting }

    func encode(to encoder: any Encoder) throws {
        try summary.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(waiting, forKey: .waiting)
    }
}

struct GameList: Codable {
    var games: [GameRecord]
}

/// `GET`, `PUT` and `DELETE /v1/machines/<id>/settings` (SPEC §12): the
/// board settings the machine's next coin carries, and whether they are the
/// file's or an operator's.
struct SettingsAnswer: Codable, Equatable {
    var machine: String
    /// `file` or `runtime`.
    var source: String
    var settings: MachineSettings

    init(_ machine: Machine) {
        let (settings, runtime) = machine.boardSettings
        self.machine = machine.id
        source = runtime ? "runtime" : "file"
        self.settings = settings
    }
}
