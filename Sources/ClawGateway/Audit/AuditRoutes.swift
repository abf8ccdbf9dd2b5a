import Foundation
import Hummingbird
import Logging
import Protocol

/// A request context that knows who sent the request and from where: what
/// an admin route writes in the audit trail (SPEC §16).
protocol OperatorRequestContext: RequestContext {
    /// The operator whose token the ``AccessGuard`` accepted.
    var operatorName: String? { get }
    var client: ClientAddress? { get }
}

extension GatewayRequestContext: OperatorRequestContext {}

extension OperatorRequestContext {
    /// What the audit trail will say of the change this request asks for:
    /// the one way an admin route names its operator, address and reason.
    func audit(_ action: AuditAction, target: String, reason: String? = nil) -> AuditDraft {
        // The admin guard always names the operator; a route outside it is a mistake the trail shows.
        AuditDraft(operatorName: operatorName ?? "unknown", address: client?.description, action: action, target: target, reason: reason)
    }
}

/// The targets the trail names, one spelling for each kind of thing.
enum AuditTarget {
    static func machine(_ id: String) -> String { "machine/\(id)" }
    static func game(machine: String, game: String) -> String { "game/\(machine)/\(game)" }
    static func player(_ player: PlayerAddress) -> String { "player/\(player.provider)/\(player.accid)" }
    static func parcel(_ id: String) -> String { "parcel/\(id)" }
    static let config = "config"
}

/// The reason a change needs (SPEC §16: settings PUT and DELETE, adjust,
/// correct, stock, hold, maintenance `on: true`): a string of 1 to
/// ``maxLength`` characters, not only spaces, without control characters.
enum AuditReason {
    static let maxLength = 500

    /// `reason` as sent (nil: missing or null), or 422 naming `reason`.
    static func required(_ reason: String?) throws(Refusal) -> String {
        guard let reason = reason?.trimmingCharacters(in: .whitespacesAndNewlines), !reason.isEmpty else {
            throw Refusal(
                .unprocessableContent, code: "invalid_body",
                "reason: required (a top-level field of the JSON body): why, for whoever reads the audit trail. Nothing was changed.")
        }
        guard reason.count <= maxLength, !PlayerText.hasHiddenCharacters(reason) else {
            throw Refusal(
                .unprocessableContent, code: "invalid_body",
                "reason: 1 to \(maxLength) characters without control characters. Nothing was changed.")
        }
        return reason
    }

    /// The top-level `reason` of a JSON object body: nil when missing or
    /// null, 422 when the body is no object or the reason no string.
    static func field(in body: [UInt8]) throws(Refusal) -> String? {
        let fields: [JSONField]
        do throws(JSONReadError) {
            fields = try JSONObjectReader.fields(in: body)
        } catch {
            throw Refusal(.unprocessableContent, code: "invalid_body", #"Send a JSON object with a "reason"."#)
        }
        for field in fields where field.key == "reason" {
            switch field.value {
            case .string(let text): return text
            case .null: return nil
            default: throw Refusal(.unprocessableContent, code: "invalid_body", "reason: a string.")
            }
        }
        return nil
    }
}

/// Runs an operator's change and logs it once it is done (durable); its
/// audit entry was written with the change by the change's owner. Every
/// admin route that changes something answers through here.
enum OperatorAction {
    static func perform(_ draft: AuditDraft, logger: Logger, _ body: () async throws -> Response) async throws -> Response {
        let response = try await body()
        var metadata: Logger.Metadata = [
            "operator": .string(draft.operatorName), "operator.action": .string(draft.action.rawValue),
            "operator.target": .string(draft.target),
        ]
        if let reason = draft.reason { metadata["operator.reason"] = .string(reason) }
        logger.notice("Operator action done", metadata: metadata)
        return response
    }
}

/// `GET /v1/audit` (admin, SPEC §16): the trail, newest first, filtered by
/// `operator`, `target`, `action`, `since` (RFC 3339, inclusive), paged by
/// `limit` (1 to 500) and `offset`.
struct AuditRoutes<Context: RequestContext>: Sendable {
    /// The trail's store: a site's SQLite, or the recorder's PostgreSQL.
    let read: @Sendable (AuditQuery) async throws -> [AuditEntry]
    /// The recorder's, which holds every site's entries: `?site=` narrows to one.
    var sites = false

    func add(admin: RouterGroup<Context>) {
        admin.get("/v1/audit") { request, _ in
            let query = try Self.query(request, sites: sites)
            do {
                return JSONResponse.make(.ok, AuditList(entries: try await read(query)))
            } catch {
                throw Refusal.unavailable("The audit trail cannot be read now: storage is failing (see /readyz).")
            }
        }
    }

    static func query(_ request: Request, sites: Bool = false) throws(Refusal) -> AuditQuery {
        let parameters = try RecorderRoutes.Query(
            request, allowed: Set(["operator", "target", "action", "since", "limit", "offset"] + (sites ? ["site"] : [])))
        var query = AuditQuery()
        query.site = try parameters.text("site")
        query.operatorName = try parameters.text("operator")
        query.target = try parameters.text("target")
        if let action = try parameters.text("action") {
            guard let known = AuditAction(rawValue: action) else {
                throw Refusal.badParameter("action", "must be one of \(AuditAction.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            query.action = known
        }
        query.since = try parameters.time("since")
        query.limit = try parameters.integer("limit", default: 50, range: 1...500)
        query.offset = try parameters.integer("offset", default: 0, range: 0...1_000_000)
        return query
    }
}

struct AuditList: Encodable {
    var entries: [AuditEntry]
}
