import Foundation
import Protocol

/// Where the players' prizes are kept and their choices made (SPEC §15): a
/// site's SQLite (``PrizeDesk``), or in a chain the recorder's PostgreSQL
/// (``ChainPrizes``), which serves every site's players in one list and
/// ships centrally. The prize and parcel routes, the operators' and the
/// demo clients', are the same over either.
///
/// Every change is on disk before it is answered, and told to the player
/// (15, and 14 for the credits of an exchange) once it is. A refusal changes
/// nothing. A change an operator makes carries its ``AuditDraft``: the
/// entry is written with the change (SPEC §16); nil for a player's own choice.
protocol PrizeKeeper: Sendable {
    /// A player's prizes, newest first, each with its parcel (no address).
    func prizes(of player: PlayerAddress, limit: Int, offset: Int) async throws(PrizeRefusal) -> [(prize: PrizeRow, parcel: ParcelRow?)]
    /// One parcel of `prizes` (held, the player's) to `address`: the prizes `to_ship`.
    func ship(_ prizes: [String], of player: PlayerAddress, to address: ShippingAddress, audit: AuditDraft?) async throws(PrizeRefusal) -> ParcelRow
    /// The player's held prize taken as credits: an `exchange` entry of its
    /// worth, keyed by the prize, and the prize `exchanged`. Returns the
    /// prize and the wallet's balance after it.
    func exchange(_ prize: String, of player: PlayerAddress, audit: AuditDraft?) async throws(PrizeRefusal) -> (PrizeRow, balance: Int64)
    /// Parcels in `state` (all when nil), oldest first, with address and prizes.
    func parcels(state: ParcelState?, limit: Int, offset: Int) async throws(PrizeRefusal) -> [ParcelRow]
    /// A parcel `to_ship` handed to `carrier` with `tracking`: `shipped`.
    func shipped(_ parcel: String, carrier: String, tracking: String, audit: AuditDraft) async throws(PrizeRefusal) -> ParcelRow
    /// A `shipped` parcel reached its player: `delivered`.
    func delivered(_ parcel: String, audit: AuditDraft) async throws(PrizeRefusal) -> ParcelRow
}

/// Why a player's choice or an operator's shipping was refused; nothing changed.
enum PrizeRefusal: ShapedError, Sendable, Equatable {
    /// No such prize of this player's (unknown, or another's: the same answer).
    case unknownPrize(String)
    /// The player's own prize, not `held`: it cannot be chosen for again.
    case notHeld(String, PrizeState)
    /// The prize is not offered as credits (its `exchange` is 0, or games are free here).
    case notExchangeable(String)
    case unknownParcel(String)
    /// The parcel is not in the state the change starts from.
    case parcelState(String, ParcelState)
    /// The storage did not make the change durable in time, or cannot be read.
    case unavailable
}

extension PrizeRefusal {
    var shape: ErrorShape { refusal.shape }

    /// The refusal in the one shape HTTP callers get: 404 for what is not
    /// the caller's to know of, 409 naming the state for what is.
    var refusal: Refusal {
        switch self {
        case .unknownPrize(let id):
            Refusal(.notFound, code: "unknown_prize", "There is no prize \(id.debugDescription) of this player's.")
        case .notHeld(let id, let state):
            Refusal(
                .conflict, code: "prize_\(state.rawValue)",
                "Prize \(id) is \(state.rawValue), not held: it was already chosen for (shipped or exchanged); nothing was changed.")
        case .notExchangeable(let id):
            Refusal(
                .conflict, code: "not_exchangeable",
                "Prize \(id) is not offered as credits here (its machine's prize.exchange is 0, or games are free); ship it instead.")
        case .unknownParcel(let id):
            Refusal(.notFound, code: "unknown_parcel", "There is no parcel \(id.debugDescription).")
        case .parcelState(let id, let state):
            Refusal(
                .conflict, code: "parcel_\(state.rawValue)",
                "Parcel \(id) is \(state.rawValue): a parcel goes to_ship, shipped, delivered, in that order; nothing was changed.")
        case .unavailable:
            Refusal.unavailable("The change could not be confirmed as saved: storage is failing (see /readyz). Send it again: a prize changes once.")
        }
    }

    /// What the demo clients are answered (SPEC §8's `{"code","msg"}`).
    var demoCode: Int {
        switch refusal.status.code {
        case 404: 404
        case 409: 409
        default: 500
        }
    }
}

/// A prize as a player's list shows it (`GET …/prizes`, the demo's
/// `/prizes`): where it is, and its parcel's state and tracking, never the
/// address.
struct PrizeAnswer: Encodable, Sendable {
    var id: String
    /// In a chain, the site whose game made it.
    var site: String?
    var provider: String
    var account: String
    var machine: String
    var game: String
    var prize: String
    var name: String
    var wonAt: String
    var state: String
    /// The credits it may be taken as; 0: not offered.
    var exchange: Int64
    var oversold: Bool
    var parcel: ParcelSummary?

    struct ParcelSummary: Encodable, Sendable {
        var id: String
        var state: String
        var carrier: String?
        var tracking: String?
    }

    init(_ prize: PrizeRow, parcel: ParcelRow?) {
        id = prize.id
        site = prize.site
        provider = prize.player.provider
        account = prize.player.accid
        machine = prize.machine
        game = prize.game
        self.prize = prize.prize
        name = prize.name
        wonAt = Timestamp.string(prize.wonAt)
        state = prize.state.rawValue
        exchange = prize.exchange
        oversold = prize.oversold
        self.parcel = parcel.map { ParcelSummary(id: $0.id, state: $0.state.rawValue, carrier: $0.carrier, tracking: $0.tracking) }
    }

    enum CodingKeys: String, CodingKey {
        case id, site, provider, account, machine, game, prize, name, state, exchange, oversold, parcel
        case wonAt = "won_at"
    }

    /// Every field, `null` where there is no value (SPEC §5's rule for the read API).
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encodeIfPresent(site, forKey: .site)
        try container.encode(provider, forKey: .provider)
        try container.encode(account, forKey: .account)
        try container.encode(machine, forKey: .machine)
        try container.encode(game, forKey: .game)
        try container.encode(prize, forKey: .prize)
        try container.encode(name, forKey: .name)
        try container.encode(wonAt, forKey: .wonAt)
        try container.encode(state, forKey: .state)
        try container.encode(exchange, forKey: .exchange)
        try container.encode(oversold, forKey: .oversold)
        try container.encode(parcel, forKey: .parcel)
    }
}

/// A parcel as the admin token sees it (`GET /v1/parcels`, the shipping
/// answers): with its address, while it is kept.
struct ParcelAnswer: Encodable, Sendable {
    var id: String
    var provider: String
    var account: String
    var state: String
    var address: ShippingAddress?
    var carrier: String?
    var tracking: String?
    var createdAt: String
    var shippedAt: String?
    var deliveredAt: String?
    var prizes: [String]

    init(_ parcel: ParcelRow, withAddress: Bool = true) {
        id = parcel.id
        provider = parcel.player.provider
        account = parcel.player.accid
        state = parcel.state.rawValue
        address = withAddress ? parcel.address : nil
        carrier = parcel.carrier
        tracking = parcel.tracking
        createdAt = Timestamp.string(parcel.createdAt)
        shippedAt = parcel.shippedAt.map(Timestamp.string)
        deliveredAt = parcel.deliveredAt.map(Timestamp.string)
        prizes = parcel.prizes
    }

    enum CodingKeys: String, CodingKey {
        case id, provider, account, state, address, carrier, tracking, prizes
        case createdAt = "created_at"
        case shippedAt = "shipped_at"
        case deliveredAt = "delivered_at"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(provider, forKey: .provider)
        try container.encode(account, forKey: .account)
        try container.encode(state, forKey: .state)
        try container.encode(address, forKey: .address)
        try container.encode(carrier, forKey: .carrier)
        try container.encode(tracking, forKey: .tracking)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encode(shippedAt, forKey: .shippedAt)
        try container.encode(deliveredAt, forKey: .deliveredAt)
        try container.encode(prizes, forKey: .prizes)
    }
}
