import Foundation
import Protocol

/// An audit entry as a site ships it to the chain's recorder (SPEC §16): on
/// the records topic, in the records' numbering, acknowledged with them.
/// `{"site","epoch","seq","audit":{…}}`; a game's record has no `audit`.
struct ChainAuditRecord: Sendable, Equatable, Codable {
    var site: String
    var epoch: String
    var seq: Int64
    var audit: AuditEntry

    var payload: [UInt8] { JSONCoding.encode(self) }

    /// The record, when `payload` is an audit entry's; nil for a game's (or anything else).
    static func decode(_ payload: [UInt8]) -> ChainAuditRecord? {
        JSONCoding.decode(ChainAuditRecord.self, from: payload)
    }

    /// Every text field's longest value, in UTF-8 bytes, and the longest
    /// `before` or `after` as JSON: what a gateway itself writes, with room.
    static let limits = (operatorName: Operator.maxNameLength, target: 256, reason: 1024, address: 64, value: 16 << 10)

    /// Why the recorder cannot keep it as it is, or nil.
    var problem: String? {
        let entry = audit
        if seq < 1 { return "seq \(seq) is not 1 or more" }
        if entry.operatorName.isEmpty || entry.operatorName.utf8.count > Self.limits.operatorName {
            return "operator is empty or longer than \(Self.limits.operatorName) bytes"
        }
        if entry.target.isEmpty || entry.target.utf8.count > Self.limits.target { return "target is empty or longer than \(Self.limits.target) bytes" }
        if (entry.reason?.utf8.count ?? 0) > Self.limits.reason { return "reason is longer than \(Self.limits.reason) bytes" }
        if (entry.address?.utf8.count ?? 0) > Self.limits.address { return "address is longer than \(Self.limits.address) bytes" }
        if entry.before.json.utf8.count > Self.limits.value || entry.after.json.utf8.count > Self.limits.value {
            return "before or after is longer than \(Self.limits.value) bytes"
        }
        if entry.action == .correct, correction == nil { return "a correction without its game or outcome" }
        return nil
    }

    /// A correction's game and what it decided, read from the entry (target
    /// `game/<machine>/<game>`, after `{"outcome":…}`); nil for another entry.
    var correction: (game: String, correction: GameCorrection)? {
        guard audit.action == .correct else { return nil }
        let parts = audit.target.split(separator: "/", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0] == "game", !parts[2].isEmpty,
            case .object(let after) = audit.after, case .string(let text) = after["outcome"], let outcome = GameOutcome(rawValue: text)
        else { return nil }
        return (
            String(parts[2]),
            GameCorrection(outcome: outcome, by: audit.operatorName, at: Timestamp.string(audit.at), reason: audit.reason ?? "")
        )
    }
}
