import Foundation
import Protocol

/// The prize routes' bodies (SPEC §15), read once here for the operators'
/// JSON and the demo clients' forms alike: every field checked, a 422
/// naming the first one that is wrong; nothing is changed for a body that
/// is refused.
enum PrizeRequests {
    /// The most prizes one parcel takes.
    static let maxPrizesPerParcel = 50
    /// The longest prize or parcel id a request may name (a site's are far shorter).
    static let maxIDBytes = 192
    /// The longest carrier name and tracking number.
    static let maxCarrierBytes = 64
    static let maxTrackingBytes = 64
    /// The longest reason of a restock.
    static let maxReason = 200
    /// Bodies and forms are a few hundred bytes; an address at most 512.
    static let maxBody = 4096

    static func invalid(_ message: String) -> Refusal {
        Refusal(.unprocessableContent, code: "invalid_body", message)
    }

    /// `{"prizes":[id,…],"address":{"name","phone","address"}}`.
    static func ship(_ body: [UInt8]) throws(Refusal) -> (prizes: [String], address: ShippingAddress) {
        let fields = try object(body, example: #"{"prizes":["p-…"],"address":{"name":"…","phone":"…","address":"…"}}"#)
        var ids: [String]?
        var address: ShippingAddress?
        for field in fields {
            switch (field.key, field.value) {
            case ("prizes", .array(let range)):
                guard let list = try? JSONSerialization.jsonObject(with: Data(body[range])) as? [Any] else {
                    throw invalid("prizes: a list of prize ids.")
                }
                var strings: [String] = []
                for item in list {
                    guard let id = item as? String else { throw invalid("prizes: a list of prize ids, each a string.") }
                    strings.append(id)
                }
                ids = try prizeIDs(strings)
            case ("prizes", _):
                throw invalid("prizes: a list of prize ids.")
            case ("address", .object(let range)):
                let inner = try object(Array(body[range]), example: #"{"name":"…","phone":"…","address":"…"}"#, field: "address")
                var values: [String: String] = [:]
                for item in inner {
                    guard ["name", "phone", "address"].contains(item.key) else {
                        throw invalid("address.\(item.key): not a field of an address (name, phone, address).")
                    }
                    guard case .string(let text) = item.value else { throw invalid("address.\(item.key): a string.") }
                    values[item.key] = text
                }
                address = try shippingAddress(name: values["name"], phone: values["phone"], address: values["address"], prefix: "address.")
            case ("address", _):
                throw invalid("address: an object of name, phone and address.")
            default:
                throw invalid("\(field.key): not a field of a shipment (prizes, address).")
            }
        }
        guard let ids else { throw invalid("prizes: required, the ids of the held prizes to ship in one parcel.") }
        guard let address else { throw invalid("address: required, an object of name, phone and address.") }
        return (ids, address)
    }

    /// The prize ids of a shipment: 1 to ``maxPrizesPerParcel``, each once.
    static func prizeIDs(_ ids: [String]) throws(Refusal) -> [String] {
        let trimmed = ids.map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard (1...maxPrizesPerParcel).contains(trimmed.count) else {
            throw invalid("prizes: 1 to \(maxPrizesPerParcel) prize ids.")
        }
        guard Set(trimmed).count == trimmed.count else { throw invalid("prizes: each prize once.") }
        for id in trimmed where !isID(id) {
            throw invalid("prizes: \(String(id.prefix(40)).debugDescription) is not a prize id.")
        }
        return trimmed
    }

    /// An address checked field by field: each required, within its limit
    /// (name 64, phone 32, address 512 bytes), without control characters.
    static func shippingAddress(name: String?, phone: String?, address: String?, prefix: String = "") throws(Refusal) -> ShippingAddress {
        let given = ["name": name, "phone": phone, "address": address]
        var values: [String: String] = [:]
        for (field, bytes) in ShippingAddress.limits {
            let text = (given[field] ?? nil)?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
            guard !text.isEmpty else { throw invalid("\(prefix)\(field): required.") }
            guard text.utf8.count <= bytes else { throw invalid("\(prefix)\(field): at most \(bytes) bytes, not \(text.utf8.count).") }
            guard !PlayerText.hasHiddenCharacters(text) else { throw invalid("\(prefix)\(field): no control or invisible characters.") }
            values[field] = text
        }
        return ShippingAddress(name: values["name"] ?? "", phone: values["phone"] ?? "", address: values["address"] ?? "")
    }

    /// `{"prize":id}`.
    static func exchange(_ body: [UInt8]) throws(Refusal) -> String {
        let fields = try object(body, example: #"{"prize":"p-…"}"#)
        var prize: String?
        for field in fields {
            switch (field.key, field.value) {
            case ("prize", .string(let text)): prize = text
            case ("prize", _): throw invalid("prize: a string, the prize's id.")
            default: throw invalid("\(field.key): not a field of an exchange (prize).")
            }
        }
        return try prizeID(prize)
    }

    /// A prize id as a request names it.
    static func prizeID(_ text: String?) throws(Refusal) -> String {
        guard let id = text?.trimmingCharacters(in: .whitespaces), !id.isEmpty else { throw invalid("prize: required, the prize's id.") }
        guard isID(id) else { throw invalid("prize: not a prize id.") }
        return id
    }

    /// `{"carrier","tracking"}`, both required.
    static func shipped(_ body: [UInt8]) throws(Refusal) -> (carrier: String, tracking: String) {
        let fields = try object(body, example: #"{"carrier":"SF Express","tracking":"SF1234567890"}"#)
        var values: [String: String] = [:]
        for field in fields {
            guard ["carrier", "tracking"].contains(field.key) else {
                throw invalid("\(field.key): not a field of a shipment (carrier, tracking).")
            }
            guard case .string(let text) = field.value else { throw invalid("\(field.key): a string.") }
            values[field.key] = text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
        for (field, bytes) in [("carrier", maxCarrierBytes), ("tracking", maxTrackingBytes)] {
            guard let text = values[field], !text.isEmpty else { throw invalid("\(field): required.") }
            guard text.utf8.count <= bytes, !PlayerText.hasHiddenCharacters(text) else {
                throw invalid("\(field): at most \(bytes) bytes, without control characters.")
            }
        }
        return (values["carrier"] ?? "", values["tracking"] ?? "")
    }

    /// `{"set":N,"reason":"…"}` or `{"add":N,"reason":"…"}`: one of the
    /// two, a whole number (`set` 0 to the most, `add` other than 0 either
    /// way), and the operator's reason.
    static func stock(_ body: [UInt8]) throws(Refusal) -> (change: StockChange, reason: String) {
        let fields = try object(body, example: #"{"add":20,"reason":"delivery 2026-11-25"}"#)
        var change: StockChange?
        var reason: String?
        let most = PrizeSettings.maxStock
        for field in fields {
            switch (field.key, field.value) {
            case ("set", .number(let number)):
                guard let value = number.int64, (0...most).contains(value) else { throw invalid("set: a whole number from 0 to \(most).") }
                guard change == nil else { throw invalid("set: send set or add, not both.") }
                change = .set(value)
            case ("add", .number(let number)):
                guard let value = number.int64, value != 0, (-most...most).contains(value) else {
                    throw invalid("add: a whole number other than 0, at most \(most) either way.")
                }
                guard change == nil else { throw invalid("add: send set or add, not both.") }
                change = .add(value)
            case ("set", _): throw invalid("set: a whole number from 0 to \(most).")
            case ("add", _): throw invalid("add: a whole number other than 0, at most \(most) either way.")
            case ("reason", .string(let text)): reason = text.trimmingCharacters(in: .whitespacesAndNewlines)
            case ("reason", .null): break
            case ("reason", _): throw invalid("reason: a string.")
            default: throw invalid("\(field.key): not a field of a restock (set or add, and reason).")
            }
        }
        guard let change else { throw invalid("set or add: required, a whole number.") }
        guard let reason, (1...maxReason).contains(reason.count), !PlayerText.hasHiddenCharacters(reason) else {
            throw invalid("reason: required, 1 to \(maxReason) characters without control characters: why, for whoever reads the stock's log.")
        }
        return (change, reason)
    }

    private static func isID(_ id: String) -> Bool {
        id.utf8.count <= maxIDBytes && !PlayerText.hasHiddenCharacters(id)
    }

    private static func object(_ body: [UInt8], example: String, field: String? = nil) throws(Refusal) -> [JSONField] {
        do throws(JSONReadError) {
            return try JSONObjectReader.fields(in: body)
        } catch {
            throw invalid("\(field.map { "\($0): " } ?? "")Send a JSON object, e.g. \(example).")
        }
    }
}
