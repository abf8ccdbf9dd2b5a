import Foundation
import Hummingbird
import Logging
import Protocol

/// The prizes' routes (SPEC §15) over any ``PrizeKeeper``: a site's, or
/// the chain recorder's. A player's list behind the read token; the
/// choices made for a player, and the shipping, behind the admin token.
struct PrizeRoutes<Context: OperatorRequestContext>: Sendable {
    let keeper: any PrizeKeeper
    /// The IM providers players come through: a player of another is no one's.
    let providers: [String]
    let logger: Logger

    func add(reads: RouterGroup<Context>, admin: RouterGroup<Context>?) {
        reads.get("/v1/players/:provider/:account/prizes") { request, context in
            let player = try CreditsRoutes<Context>.player(context, providers: providers)
            let limit = try request.integer("limit", default: 50, range: 1...500)
            let offset = try request.integer("offset", default: 0, range: 0...1_000_000)
            let prizes = try await answer { () throws(PrizeRefusal) in try await keeper.prizes(of: player, limit: limit, offset: offset) }
            return JSONResponse.make(.ok, PrizeList(prizes: prizes.map { PrizeAnswer($0.prize, parcel: $0.parcel) }))
        }
        guard let admin else { return }
        admin.post("/v1/players/:provider/:account/prizes/ship") { request, context in
            let player = try CreditsRoutes<Context>.player(context, providers: providers)
            let (ids, address) = try PrizeRequests.ship(try await body(request))
            let audit = context.audit(.ship, target: AuditTarget.player(player))
            return try await OperatorAction.perform(audit, logger: logger) {
                let parcel = try await answer { () throws(PrizeRefusal) in try await keeper.ship(ids, of: player, to: address, audit: audit) }
                return JSONResponse.make(.ok, ParcelAnswer(parcel))
            }
        }
        admin.post("/v1/players/:provider/:account/prizes/exchange") { request, context in
            let player = try CreditsRoutes<Context>.player(context, providers: providers)
            let id = try PrizeRequests.exchange(try await body(request))
            let audit = context.audit(.exchange, target: AuditTarget.player(player))
            return try await OperatorAction.perform(audit, logger: logger) {
                let (prize, balance) = try await answer { () throws(PrizeRefusal) in try await keeper.exchange(id, of: player, audit: audit) }
                return JSONResponse.make(.ok, ExchangeAnswer(prize: PrizeAnswer(prize, parcel: nil), credits: prize.exchange, balance: balance))
            }
        }
        admin.get("/v1/parcels") { request, _ in
            let state = try Self.parcelState(request)
            let limit = try request.integer("limit", default: 100, range: 1...500)
            let offset = try request.integer("offset", default: 0, range: 0...1_000_000)
            let parcels = try await answer { () throws(PrizeRefusal) in try await keeper.parcels(state: state, limit: limit, offset: offset) }
            return JSONResponse.make(.ok, ParcelList(parcels: parcels.map { ParcelAnswer($0) }))
        }
        admin.post("/v1/parcels/:parcel/shipped") { request, context in
            let id = try context.pathParameter("parcel")
            let (carrier, tracking) = try PrizeRequests.shipped(try await body(request))
            let audit = context.audit(.shipped, target: AuditTarget.parcel(id))
            return try await OperatorAction.perform(audit, logger: logger) {
                let parcel = try await answer { () throws(PrizeRefusal) in
                    try await keeper.shipped(id, carrier: carrier, tracking: tracking, audit: audit)
                }
                return JSONResponse.make(.ok, ParcelAnswer(parcel))
            }
        }
        admin.post("/v1/parcels/:parcel/delivered") { _, context in
            let id = try context.pathParameter("parcel")
            let audit = context.audit(.delivered, target: AuditTarget.parcel(id))
            return try await OperatorAction.perform(audit, logger: logger) {
                let parcel = try await answer { () throws(PrizeRefusal) in try await keeper.delivered(id, audit: audit) }
                return JSONResponse.make(.ok, ParcelAnswer(parcel))
            }
        }
    }

    private func body(_ request: Request) async throws -> [UInt8] {
        Array(buffer: try await request.body.collect(upTo: PrizeRequests.maxBody))
    }

    /// The keeper's answer, or its refusal as the HTTP caller gets it.
    private func answer<T>(_ body: () async throws(PrizeRefusal) -> T) async throws(Refusal) -> T {
        do {
            return try await body()
        } catch {
            throw error.refusal
        }
    }

    /// `?state=` of `GET /v1/parcels`: one of the parcels' states, or all when left out.
    static func parcelState(_ request: Request) throws(Refusal) -> ParcelState? {
        guard let text = request.uri.queryParameters["state"] else { return nil }
        guard let state = ParcelState(rawValue: String(text)) else {
            throw Refusal.badParameter("state", "must be one of \(ParcelState.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return state
    }
}

/// A site's stock routes (SPEC §15): the stock is each machine's, kept by
/// the machine's transitions (a restock never crosses a win).
struct StockRoutes<Context: OperatorRequestContext>: Sendable {
    let arcade: Arcade
    let logger: Logger

    func add(reads: RouterGroup<Context>, admin: RouterGroup<Context>?) {
        reads.get("/v1/machines/:id/stock") { _, context in
            let machine = try arcade.machine(in: context)
            return JSONResponse.make(.ok, StockAnswer(machine))
        }
        admin?.post("/v1/machines/:id/stock") { request, context in
            let machine = try arcade.machine(in: context)
            let (change, reason) = try PrizeRequests.stock(Array(buffer: try await request.body.collect(upTo: PrizeRequests.maxBody)))
            let audit = context.audit(.stock, target: AuditTarget.machine(machine.id), reason: reason)
            return try await OperatorAction.perform(audit, logger: logger) {
                let (outcome, ticket) = machine.restock(change, reason: reason, audit)
                switch outcome {
                case .stock:
                    if let ticket, await !arcade.durable(ticket) {
                        throw Refusal.unavailable("The stock was changed but could not be saved yet; storage is failing (see /readyz).")
                    }
                    return JSONResponse.make(.ok, StockAnswer(machine))
                case .noPrize:
                    throw Refusal(
                        .conflict, code: "no_prize",
                        "\(machine.id) has no prize: give it machines[].prize (and prizes:) in gateway.yaml before counting its stock.")
                case .notCounted:
                    throw Refusal(
                        .conflict, code: "stock_not_set",
                        "The stock of \(machine.id) was never set: set it ({\"set\":N}) before adding to it; nothing was changed.")
                case .outOfRange(let stock):
                    throw Refusal(
                        .conflict, code: "stock_out_of_range",
                        "The stock of \(machine.id) is \(stock.map(String.init) ?? "not set"): this would take it below 0 or above "
                            + "\(PrizeSettings.maxStock); nothing was changed.")
                }
            }
        }
    }
}

/// `GET …/stock` and a restock's answer: `{"machine","prize","stock","low_at"}`.
struct StockAnswer: Encodable, Sendable {
    var machine: String
    var prize: Prize?
    /// Nil while the stock was never set: not counted.
    var stock: Int64?
    var lowAt: Int64?

    struct Prize: Encodable, Sendable {
        var id: String
        var name: String
        var cost: Int64
        var exchange: Int64
    }

    init(_ machine: Machine) {
        let (prize, stock) = machine.prizeStock
        self.machine = machine.id
        self.prize = prize.map { Prize(id: $0.id, name: $0.name, cost: $0.cost, exchange: $0.exchange) }
        self.stock = stock
        lowAt = prize?.lowAt
    }

    enum CodingKeys: String, CodingKey {
        case machine, prize, stock
        case lowAt = "low_at"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(machine, forKey: .machine)
        try container.encode(prize, forKey: .prize)
        try container.encode(stock, forKey: .stock)
        try container.encode(lowAt, forKey: .lowAt)
    }
}

struct PrizeList: Encodable, Sendable {
    var prizes: [PrizeAnswer]
}

struct ParcelList: Encodable, Sendable {
    var parcels: [ParcelAnswer]
}

struct ExchangeAnswer: Encodable, Sendable {
    var prize: PrizeAnswer
    /// What was credited.
    var credits: Int64
    /// The wallet's balance after it.
    var balance: Int64
}
