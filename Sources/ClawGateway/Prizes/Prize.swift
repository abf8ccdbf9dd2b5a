import Foundation
import Protocol

/// Where a prize is on its way from the claw to the player (SPEC §15):
/// `held` once won, then either `to_ship` → `shipped` → `delivered`, or
/// `exchanged` for credits. Only forward, and only along these.
enum PrizeState: String, Sendable, Equatable, CaseIterable, Codable {
    case held
    case toShip = "to_ship"
    case shipped
    case delivered
    case exchanged
    /// Its win was taken back by an operator's correction (SPEC §16) while
    /// it was still held; a later correction to `won` holds it again.
    case voided

    /// Whether a prize may go from this state to `next`.
    func mayBecome(_ next: PrizeState) -> Bool {
        switch (self, next) {
        case (.held, .toShip), (.held, .exchanged), (.toShip, .shipped), (.shipped, .delivered), (.held, .voided), (.voided, .held): true
        default: false
        }
    }
}

/// Where a parcel is: made `to_ship` with its prizes, then `shipped` with a
/// carrier and tracking number, then `delivered`.
enum ParcelState: String, Sendable, Equatable, CaseIterable, Codable {
    case toShip = "to_ship"
    case shipped
    case delivered
}

/// A prize as it is kept: its won game, its player, what it is and was
/// worth then, and where it is.
struct PrizeRow: Sendable, Equatable {
    /// The prize's own id: what ship and exchange take.
    var id: String
    /// The won game that made it: one prize per won game.
    var game: String
    var machine: String
    var player: PlayerAddress
    /// The machine's prize (`prize.id`), its name, cost and exchange when won.
    var prize: String
    var name: String
    var cost: Int64
    var exchange: Int64
    var wonAt: Date
    /// Won when the machine's stock was already 0 (an operator set it so
    /// during the game): still the player's.
    var oversold: Bool
    var state: PrizeState = .held
    var parcel: String? = nil
    /// In a chain, the site whose game made it; nil at a site.
    var site: String? = nil

    /// The prize's own id for the game `session` that won it: one per game,
    /// the same however often the game's end is written.
    static func id(ofGame session: String) -> String { "p-\(session)" }

    /// How a chain's records carry it.
    var won: WonPrize {
        WonPrize(
            id: id, prize: prize, name: name, cost: cost, exchange: exchange, wonAt: Timestamp.string(wonAt), oversold: oversold)
    }
}

/// A parcel's address: personal data, served to the admin token only,
/// never logged, forgotten `prizes.forget_address` after delivery.
struct ShippingAddress: Sendable, Equatable, Codable {
    var name: String
    var phone: String
    var address: String

    /// The longest of each field, in UTF-8 bytes (SPEC §15).
    static let limits: [(field: String, bytes: Int)] = [("name", 64), ("phone", 32), ("address", 512)]

    /// The address a parcel's columns hold; nil once forgotten (all three null).
    static func kept(name: String?, phone: String?, address: String?) -> ShippingAddress? {
        guard let name, let phone, let address else { return nil }
        return ShippingAddress(name: name, phone: phone, address: address)
    }
}

/// A parcel as it is kept: one or more of a player's prizes, where to.
struct ParcelRow: Sendable, Equatable {
    var id: String
    var player: PlayerAddress
    var state: ParcelState = .toShip
    /// Nil once forgotten (``PrizeSettings/forgetAddress`` after delivery).
    var address: ShippingAddress?
    var carrier: String? = nil
    var tracking: String? = nil
    var createdAt: Date
    var shippedAt: Date? = nil
    var deliveredAt: Date? = nil
    /// The prizes in it, by their own ids.
    var prizes: [String] = []
}

/// What an operator does to a machine's stock (SPEC §15).
enum StockChange: Sendable, Equatable {
    /// The stock is now this.
    case set(Int64)
    /// This many more (or fewer, when negative).
    case add(Int64)
}

/// One line of a machine's stock log: every change to the stock, in order,
/// with the stock after it. Never changed or deleted: what the stock is is
/// what the log adds up to (the chaos runs check it).
struct StockEntry: Sendable, Equatable {
    enum Kind: String, Sendable, Equatable {
        /// An operator set the stock.
        case set
        /// An operator added to it (or took away).
        case add
        /// A win took one.
        case won
        /// A win found the stock at 0: its prize is made all the same, marked oversold.
        case oversold
        /// An operator's correction (SPEC §16) made a win (one taken) or took one back (one given back).
        case corrected
    }

    var machine: String
    /// 1, 2, 3, … per machine.
    var number: Int64
    var kind: Kind
    /// Signed: what the stock changed by.
    var change: Int64
    /// The stock after it.
    var stock: Int64
    /// An operator's reason.
    var reason: String?
    /// The won game, for `won` and `oversold`.
    var game: String?
    var at: Date
}

/// A machine's counted stock as the machine holds it: what it is, and the
/// number of the last line of its log.
struct StockLevel: Sendable, Equatable {
    var stock: Int64
    var changes: Int64
}
