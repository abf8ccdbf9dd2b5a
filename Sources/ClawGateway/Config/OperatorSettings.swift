import Yams

/// An operator by name (SPEC §16): what their token lets them do, and the
/// name the audit trail writes for what they did.
struct Operator: Sendable, Equatable {
    enum Role: String, Sendable, Equatable, CaseIterable {
        /// The read API, the stream, metrics, the pages.
        case read
        /// All of `read`, and every change (the admin routes).
        case admin
    }

    var name: String
    /// Compared in constant time (``AccessPolicy``); never logged.
    var token: String
    var role: Role

    /// The name of what a reload or the gateway itself does in the trail.
    static let system = "system"
    /// The names `http.admin_token` and `http.read_token` act under.
    static let adminTokenName = "admin"
    static let readTokenName = "read"
    /// Names as an audit filter and a log read them: letters, digits, `.`, `_`, `-`, `@`.
    static let maxNameLength = 64
}

extension HTTPSettings {
    /// Every credential, by name: the configured operators, and the two
    /// tokens as operators named `admin` and `read`.
    var credentials: [Operator] {
        var all = operators
        if let adminToken { all.append(Operator(name: Operator.adminTokenName, token: adminToken, role: .admin)) }
        if let readToken { all.append(Operator(name: Operator.readTokenName, token: readToken, role: .read)) }
        return all
    }

    /// Whether the admin routes exist: some credential may use them.
    var hasAdmin: Bool { credentials.contains { $0.role == .admin } }

    /// Whether the read routes need a token: any read credential closes them (SPEC §16).
    var readsClosed: Bool { credentials.contains { $0.role == .read } }
}

extension Schema {
    /// `operators:` `[{name, token, role}]` (SPEC §16): names and tokens
    /// unique, also against `http.admin_token` (`admin`) and
    /// `http.read_token` (`read`); tokens as long as any token.
    func readOperators(_ items: [(path: String, node: Node)]?, http: HTTPSettings?) -> [Operator] {
        var operators: [Operator] = []
        var names: [String: String] = [:]
        var tokens: [String: String] = [:]
        if let http {
            if http.adminToken != nil { names[Operator.adminTokenName] = "http.admin_token" }
            if http.readToken != nil { names[Operator.readTokenName] = "http.read_token" }
            if let token = http.adminToken { tokens[token] = "http.admin_token" }
            if let token = http.readToken { tokens[token] = "http.read_token" }
        }
        for (path, node) in items ?? [] {
            guard let section = reader.section(node, at: path, keys: ["name", "token", "role"]) else { continue }
            let name = section.nonEmpty("name", required: true)
            let token = section.has("token") ? self.token(section, "token") : { reader.report(section.path("token"), "is required"); return nil }()
            let role = section.choice("role", default: Operator.Role.read, from: Operator.Role.allCases.map { ($0.rawValue, $0) })
            if !section.has("role") { reader.report(section.path("role"), "is required: admin or read") }
            if let name {
                let allowed = name.unicodeScalars.allSatisfy {
                    ("a"..."z").contains($0) || ("A"..."Z").contains($0) || ("0"..."9").contains($0) || "._-@".unicodeScalars.contains($0)
                }
                if !allowed || name.count > Operator.maxNameLength {
                    reader.report(
                        section.path("name"),
                        "\"\(name.debugEscaped)\" is not a name the audit trail can carry: letters, digits, . _ - @, at most \(Operator.maxNameLength)")
                } else if name == Operator.system {
                    reader.report(section.path("name"), "\"system\" is the name of what the gateway does itself (a reload); choose another")
                } else if let first = names[name] {
                    reader.report(section.path("name"), "\"\(name)\" is taken by \(first): each operator has a name of their own")
                } else {
                    names[name] = section.path("name")
                }
            }
            if let token {
                if let first = tokens[token] {
                    reader.report(section.path("token"), "is the same token as \(first): a token names one operator")
                } else {
                    tokens[token] = section.path("token")
                }
            }
            if let name, let token { operators.append(Operator(name: name, token: token, role: role)) }
        }
        return operators
    }
}
