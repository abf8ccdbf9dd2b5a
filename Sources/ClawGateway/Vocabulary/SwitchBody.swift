import Protocol

/// An operator's switch with a reason, `{"<flag>":true|false,"reason":"…"}`:
/// taking a machine out (`on`), holding a game's clips (`hold`). Read once
/// here; each route says when it needs the reason.
struct SwitchBody: Equatable {
    var on: Bool
    /// As sent, with its spaces trimmed; nil when left out or null.
    var reason: String?

    /// The body's flag and reason, or a 422 `invalid_body` naming what is wrong.
    static func read(_ body: [UInt8], flag: String) throws(Refusal) -> SwitchBody {
        let fields: [JSONField]
        do throws(JSONReadError) {
            fields = try JSONObjectReader.fields(in: body)
        } catch {
            throw refused(#"Send a JSON object: {"\#(flag)":true,"reason":"…"} or {"\#(flag)":false}."#)
        }
        var on: Bool?
        var reason: String?
        var unknown: [String] = []
        for field in fields {
            switch (field.key, field.value) {
            case (flag, .bool(let value)): on = value
            case (flag, _): throw refused("\(flag): required, true or false.")
            case ("reason", .string(let value)): reason = value.trimmingCharacters(in: .whitespacesAndNewlines)
            case ("reason", .null): break
            case ("reason", _): throw refused("reason: a string.")
            default: unknown.append(field.key)
            }
        }
        guard let on else { throw refused("\(flag): required, true or false.") }
        guard unknown.isEmpty else {
            throw refused("Unknown field \(unknown.sorted().joined(separator: ", ")): only \(flag) and reason.")
        }
        return SwitchBody(on: on, reason: reason)
    }

    static func refused(_ message: String) -> Refusal {
        Refusal(.unprocessableContent, code: "invalid_body", message)
    }
}
