import Foundation
import Hummingbird
import Protocol
import Synchronization

/// Who may use the operators' routes (SPEC §5), decided in one place for
/// every route behind an ``AccessGuard``.
///
/// - `Host` must name this gateway: the listen address, `localhost`
///   (`127.0.0.1` and `::1` too when it listens on loopback or on every
///   address) or one of `http.allowed_hosts`; else 421. A page on another
///   site that re-points its own name at this address (DNS rebinding)
///   sends its own name, so it reads nothing through a visitor's browser.
/// - The read routes need a credential when any read credential is set
///   (`http.read_token` or an operator of role `read`: SPEC §16), the admin
///   routes an admin credential (`http.admin_token` or an operator of role
///   `admin`); else 401. The operator whose token came is the request's
///   (``GatewayRequestContext/operatorName``): what the audit trail writes.
/// - A client address that sends a wrong token ``TokenThrottle/limit`` times
///   within a minute is answered 429 on every route that needs a token, for
///   a minute, whatever it sends meanwhile.
///
/// The ingress routes and `/healthz`, `/readyz` are not behind it: IM
/// services and proxies in front name the gateway as they like.
struct AccessPolicy: Sendable {
    enum Scope: Sendable {
        /// The page's own files: the same bytes in every installation, no
        /// arcade data, so only `Host` is checked; what the page reads is `.read`.
        case page
        case read
        case admin
    }

    /// Every token accepted, with its operator's name and role.
    let credentials: [Operator]
    /// Whether the read routes need a token.
    let readsClosed: Bool
    /// The names `Host` may carry, as ``hostName(ofHostHeader:)`` reads them.
    let hosts: Set<String>
    let throttle: TokenThrottle
    /// Where the tokens are set, named in a 401: `http` (a gateway), `router`, `recorder`.
    let section: String

    init(http: HTTPSettings, section: String = "http", now: @escaping @Sendable () -> Date) {
        self.section = section
        credentials = http.credentials
        readsClosed = http.readsClosed
        var hosts: Set<String> = ["localhost"]
        let listen = Self.hostName(ofHostHeader: http.host) ?? http.host.lowercased()
        hosts.insert(listen)
        if Self.listensOnLoopback(listen) { hosts.formUnion(["127.0.0.1", "::1"]) }
        hosts.formUnion(http.allowedHosts)
        self.hosts = hosts
        throttle = TokenThrottle(now: now)
    }

    /// Throws the answer (421, 429, 401) when `request` may not go on;
    /// returns the operator whose token came (nil where none is needed).
    /// - Parameter client: the throttle's key (nil: a Unix socket's client).
    @discardableResult
    func check(_ request: Request, client: ClientAddress?, scope: Scope) throws(Refusal) -> Operator? {
        let host = request.head.authority.flatMap(Self.hostName(ofHostHeader:))
        guard let host, hosts.contains(host) else { throw .misdirected }
        let accepted: [Operator]
        switch scope {
        case .page: return nil
        case .read:
            guard readsClosed else { return nil }
            accepted = credentials
        case .admin:
            // Admin routes exist only with an admin credential; none here refuses all.
            accepted = credentials.filter { $0.role == .admin }
        }
        if let seconds = throttle.blockedFor(client) { throw .throttled(retryAfter: seconds) }
        guard let presented = Self.bearer(request) else { throw .unauthorized(scope, section: section) }
        // Every candidate compared, so the time does not tell which one was near.
        var match: Operator?
        for candidate in accepted where Signatures.constantTimeEqual(presented, candidate.token) {
            match = match ?? candidate
        }
        guard let match else {
            throttle.failed(client)
            throw .unauthorized(scope, section: section)
        }
        return match
    }

    /// The token of `Authorization: Bearer <token>` (the scheme in any case).
    static func bearer(_ request: Request) -> String? {
        guard let header = request.header("Authorization") else { return nil }
        let scheme = "bearer "
        guard header.count > scheme.count, header.prefix(scheme.count).lowercased() == scheme else { return nil }
        return String(header.dropFirst(scheme.count)).trimmingCharacters(in: .whitespaces)
    }

    /// The host of a `Host` header, without its port, in lower case, IPv6
    /// without brackets, without a final dot: `Arcade.example.:8080` and
    /// `arcade.example` are one name. Nil when there is no name.
    static func hostName(ofHostHeader value: String) -> String? {
        var text = Substring(value.lowercased())
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            let rest = text[text.index(after: close)...]
            guard rest.isEmpty || (rest.hasPrefix(":") && rest.dropFirst().allSatisfy(\.isASCIIDigit)) else { return nil }
            text = text[text.index(after: text.startIndex)..<close]
        } else if text.filter({ $0 == ":" }).count == 1, let colon = text.firstIndex(of: ":") {
            guard text[text.index(after: colon)...].allSatisfy(\.isASCIIDigit) else { return nil }
            text = text[..<colon]
        }
        if text.hasSuffix(".") { text = text.dropLast() }
        return text.isEmpty ? nil : String(text)
    }

    /// Whether a listen address takes loopback connections: loopback itself, or every address.
    private static func listensOnLoopback(_ host: String) -> Bool {
        host == "localhost" || host.hasPrefix("127.") || host == "::1" || host == "0.0.0.0" || host == "::"
    }
}

/// The middleware that applies an ``AccessPolicy`` to the routes added after
/// it (a `RouterGroup` per scope in ``HTTPServer/router(_:logger:)``), so a
/// new route in a group cannot forget it.
struct AccessGuard: RouterMiddleware {
    typealias Context = GatewayRequestContext
    let policy: AccessPolicy
    let scope: AccessPolicy.Scope

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var context = context
        context.operatorName = try policy.check(request, client: context.client, scope: scope)?.name
        return try await next(request, context)
    }
}

/// Wrong tokens per client address: ``limit`` within ``window`` blocks the
/// address for ``window``. Guessing a 16-byte token is hopeless anyway; this
/// keeps a guesser from filling the log and the CPU, and tells the operator
/// (the 429s in `claw_http_requests_total`).
final class TokenThrottle: Sendable {
    static let limit = 10
    static let window: TimeInterval = 60
    /// Addresses remembered at most: one client with many addresses cannot
    /// grow the table without bound; the stalest go first.
    static let capacity = 4096

    private struct Record {
        var failures: [Date] = []
        var blockedUntil: Date?
        var lastSeen: Date
    }

    private let records = Mutex<[ClientAddress?: Record]>([:])
    private let now: @Sendable () -> Date

    init(now: @escaping @Sendable () -> Date) {
        self.now = now
    }

    /// Whole seconds until `client` may try again; nil when it may now.
    func blockedFor(_ client: ClientAddress?) -> Int? {
        let now = now()
        return records.withLock { records in
            guard let until = records[client]?.blockedUntil else { return nil }
            guard until > now else {
                records[client]?.blockedUntil = nil
                return nil
            }
            return max(1, Int(until.timeIntervalSince(now).rounded(.up)))
        }
    }

    /// `client` sent a wrong token.
    func failed(_ client: ClientAddress?) {
        let now = now()
        records.withLock { records in
            if records[client] == nil, records.count >= Self.capacity { Self.evict(&records, now: now) }
            var record = records[client] ?? Record(lastSeen: now)
            record.failures = record.failures.filter { now.timeIntervalSince($0) < Self.window } + [now]
            record.lastSeen = now
            if record.failures.count >= Self.limit {
                record.blockedUntil = now.addingTimeInterval(Self.window)
                record.failures = []
            }
            records[client] = record
        }
    }

    /// Forgets the addresses that no longer count, or else the stalest one
    /// that is not blocked (a blocked one only when every one is).
    private static func evict(_ records: inout [ClientAddress?: Record], now: Date) {
        func isBlocked(_ record: Record) -> Bool { record.blockedUntil.map { $0 > now } ?? false }
        records = records.filter { _, record in isBlocked(record) || now.timeIntervalSince(record.lastSeen) < window }
        guard records.count >= capacity else { return }
        let stalest = records.filter { !isBlocked($0.value) }.min { $0.value.lastSeen < $1.value.lastSeen }
            ?? records.min { $0.value.lastSeen < $1.value.lastSeen }
        if let stalest { records[stalest.key] = nil }
    }
}

extension Refusal {
    /// No token, or a wrong one, for a route of this scope; `section` is
    /// where the tokens are set (`http`, `router`, `recorder`).
    static func unauthorized(_ scope: AccessPolicy.Scope, section: String = "http") -> Refusal {
        switch scope {
        case .admin:
            Refusal(
                .unauthorized, code: "unauthorized",
                "Send the admin token (\(section).admin_token) or an admin operator's token as Authorization: Bearer <token>.")
        default:
            Refusal(
                .unauthorized, code: "unauthorized",
                "Send the read token (\(section).read_token), the admin token or an operator's token as Authorization: Bearer <token>.")
        }
    }
}
