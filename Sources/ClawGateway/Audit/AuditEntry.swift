import Foundation
import Protocol

/// One line of the audit trail (SPEC §16): who changed what, when, from
/// where, from what to what, and why. Appended in the transaction of the
/// change it records, never changed or deleted (the store refuses).
struct AuditEntry: Sendable, Equatable, Codable {
    /// Given by the store, increasing; nil until written.
    var seq: Int64?
    /// At the chain's recorder: the site whose entry it is; nil for the recorder's own (and at a site).
    var site: String? = nil
    var at: Date
    /// The operator whose token came, or `system` (a reload).
    var operatorName: String
    var action: AuditAction
    /// What was changed: a machine (`m1`), a game (`m1/g-…`), a wallet
    /// (`netease/alice`), a parcel, the config.
    var target: String
    var before: AuditValue
    var after: AuditValue
    var reason: String?
    /// The client address the request came from (an IPv6 client as its /64); nil for `system`.
    var address: String?

    enum CodingKeys: String, CodingKey {
        case seq, site, at, action, target, before, after, reason, address
        case operatorName = "operator"
    }

    init(
        seq: Int64? = nil, site: String? = nil, at: Date, operatorName: String, action: AuditAction, target: String, before: AuditValue,
        after: AuditValue, reason: String?, address: String?
    ) {
        self.seq = seq
        self.site = site
        self.at = at
        self.operatorName = operatorName
        self.action = action
        self.target = target
        self.before = before
        self.after = after
        self.reason = reason
        self.address = address
    }

    /// As a site ships it to the chain (``ChainAuditRecord``).
    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        seq = try container.decodeIfPresent(Int64.self, forKey: .seq)
        site = try container.decodeIfPresent(String.self, forKey: .site)
        let at = try container.decode(String.self, forKey: .at)
        guard let date = Timestamp.date(at) else {
            throw DecodingError.dataCorruptedError(forKey: .at, in: container, debugDescription: "not a timestamp")
        }
        self.at = date
        operatorName = try container.decode(String.self, forKey: .operatorName)
        action = try container.decode(AuditAction.self, forKey: .action)
        target = try container.decode(String.self, forKey: .target)
        before = try container.decodeIfPresent(AuditValue.self, forKey: .before) ?? .null
        after = try container.decodeIfPresent(AuditValue.self, forKey: .after) ?? .null
        reason = try container.decodeIfPresent(String.self, forKey: .reason)
        address = try container.decodeIfPresent(String.self, forKey: .address)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(seq, forKey: .seq)
        try container.encodeIfPresent(site, forKey: .site)
        try container.encode(Timestamp.string(at), forKey: .at)
        try container.encode(operatorName, forKey: .operatorName)
        try container.encode(action, forKey: .action)
        try container.encode(target, forKey: .target)
        try container.encode(before, forKey: .before)
        try container.encode(after, forKey: .after)
        try container.encode(reason, forKey: .reason)
        try container.encode(address, forKey: .address)
    }
}

/// The route's verb an entry records (SPEC §16), and `reload`.
enum AuditAction: String, Sendable, Equatable, Codable, CaseIterable {
    case pause, resume, skip, remove, settings, maintenance, reset, stock, adjust, hold, correct
    /// A player's prizes put in a parcel, by an operator for the player.
    case ship
    /// A player's prizes exchanged for credits, by an operator for the player
    /// (SPEC §16 does not list it; it is a change an operator makes).
    case exchange
    /// A parcel handed to its carrier (the route's verb; SPEC §16 does not list it).
    case shipped
    case delivered
    case reload
}

/// Who asks for a change, and why: what an admin route knows before the
/// change is made. The change's owner turns it into an ``AuditEntry`` with
/// the before and after it sees, in the transaction that makes the change.
struct AuditDraft: Sendable, Equatable {
    var operatorName: String
    var address: String?
    var action: AuditAction
    var target: String
    var reason: String?

    func entry(before: AuditValue, after: AuditValue, at: Date) -> AuditEntry {
        AuditEntry(
            at: at, operatorName: operatorName, action: action, target: target, before: before, after: after, reason: reason,
            address: address)
    }

    /// What the gateway itself does: a reload.
    static func system(_ action: AuditAction, target: String) -> AuditDraft {
        AuditDraft(operatorName: Operator.system, address: nil, action: action, target: target)
    }
}

/// A JSON value as the audit trail keeps `before` and `after`: built from
/// any `Encodable` the change's owner has at hand (a machine's settings, a
/// prize's state), kept as JSON text, served as it was.
indirect enum AuditValue: Sendable, Equatable, Codable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([AuditValue])
    case object([String: AuditValue])

    /// `value` as JSON; `null` if it cannot be encoded.
    init(_ value: some Encodable) {
        self = JSONCoding.decode(AuditValue.self, from: JSONCoding.encode(value)) ?? .null
    }

    /// The JSON text `text`; `null` if it is not JSON.
    init(json text: String) {
        self = JSONCoding.decode(AuditValue.self, from: Array(text.utf8)) ?? .null
    }

    var json: String { String(decoding: JSONCoding.encode(self), as: UTF8.self) }

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([AuditValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: AuditValue].self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value):
            // Whole numbers as whole numbers: a stock of 3 reads 3, not 3.0.
            if value == value.rounded(), abs(value) < 1e15 { try container.encode(Int64(value)) } else { try container.encode(value) }
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}
