import AsyncHTTPClient
import Foundation
import Hummingbird
import NIOCore
import Protocol
import Synchronization
import Testing

@testable import ClawGateway

/// ``AccessPolicy`` on its own: which `Host` passes, which token, and the
/// throttle of wrong tokens on a clock the test moves.
@Suite struct AccessPolicyTests {
    static let readToken = "read-token-0123456789"
    static let adminToken = "admin-token-0123456789"

    /// A clock the test sets.
    final class Now: Sendable {
        private let date = Mutex(Date(timeIntervalSince1970: 1_795_000_000))
        var value: Date { date.withLock { $0 } }
        func advance(_ seconds: TimeInterval) { date.withLock { $0 += seconds } }
    }

    static func policy(listen: String = "127.0.0.1", read: String? = readToken, allowed: [String] = ["arcade-7.example.com"], now: Now = Now())
        -> AccessPolicy
    {
        AccessPolicy(
            http: HTTPSettings(host: listen, port: 8080, adminToken: adminToken, readToken: read, allowedHosts: allowed),
            now: { now.value })
    }

    static func request(host: String? = "127.0.0.1:8080", token: String? = nil, authorization: String? = nil) -> Request {
        var head = HTTPRequest(method: .get, scheme: "http", authority: host, path: "/v1/machines")
        if let value = authorization ?? token.map({ "Bearer \($0)" }) { head.headerFields[.authorization] = value }
        return Request(head: head, body: RequestBody(buffer: ByteBuffer()))
    }

    static func client(_ text: String) -> ClientAddress? {
        TrustedProxies.none.client(peer: try? SocketAddress(ipAddress: text, port: 40000), headers: [:])
    }

    /// What `check` answers: "ok", or the status it throws.
    static func answer(_ policy: AccessPolicy, _ request: Request, from client: String = "127.0.0.1", _ scope: AccessPolicy.Scope = .read)
        -> String
    {
        do {
            try policy.check(request, client: Self.client(client), scope: scope)
            return "ok"
        } catch {
            return String(error.status.code)
        }
    }

    @Test(
        "Host as the policy reads it: no port, lower case, no brackets or final dot",
        arguments: [
            ("127.0.0.1:8080", "127.0.0.1"), ("LocalHost", "localhost"), ("localhost.:80", "localhost"), ("[::1]:8080", "::1"),
            ("[::1]", "::1"), ("Arcade-7.Example.com", "arcade-7.example.com"), ("::1", "::1"),
        ])
    func hostNames(_ header: String, _ name: String) {
        #expect(AccessPolicy.hostName(ofHostHeader: header) == name)
    }

    @Test("Host headers that name nothing", arguments: ["", ":8080", "[::1", "[::1]x", "host:port", "[::1]:80:80", "."])
    func notHostNames(_ header: String) {
        #expect(AccessPolicy.hostName(ofHostHeader: header) == nil)
    }

    @Test func onlyTheGatewaysOwnNamesPassTheHostCheck() {
        let policy = Self.policy()
        for host in ["127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:8080", "arcade-7.example.com", "Arcade-7.example.com.:443"] {
            #expect(Self.answer(policy, Self.request(host: host, token: Self.readToken)) == "ok", "\(host)")
        }
        // A rebinding page sends its own name; so does one that only starts or ends like ours.
        for host in ["evil.example", "127.0.0.1.nip.io", "localhost.evil.example", "arcade-7.example.com.evil.example", "evil-arcade-7.example.com", "10.0.0.1"] {
            #expect(Self.answer(policy, Self.request(host: host, token: Self.readToken)) == "421", "\(host)")
        }
        #expect(Self.answer(policy, Self.request(host: nil, token: Self.readToken)) == "421", "no Host at all")
        // Checked on the page and the admin routes too, before any token.
        #expect(Self.answer(policy, Self.request(host: "evil.example"), .page) == "421")
        #expect(Self.answer(policy, Self.request(host: "evil.example", token: Self.adminToken), .admin) == "421")
        #expect(Self.answer(policy, Self.request(host: "localhost"), .page) == "ok")
    }

    @Test func loopbackNamesPassOnlyWhenTheGatewayListensThere() {
        let lan = Self.policy(listen: "192.168.1.10")
        #expect(Self.answer(lan, Self.request(host: "192.168.1.10:8080", token: Self.readToken)) == "ok")
        #expect(Self.answer(lan, Self.request(host: "127.0.0.1:8080", token: Self.readToken)) == "421")
        #expect(Self.answer(lan, Self.request(host: "localhost:8080", token: Self.readToken)) == "ok")
        let everywhere = Self.policy(listen: "0.0.0.0")
        #expect(Self.answer(everywhere, Self.request(host: "127.0.0.1:8080", token: Self.readToken)) == "ok")
        #expect(Self.answer(everywhere, Self.request(host: "192.168.1.10:8080", token: Self.readToken)) == "421", "a LAN name must be listed")
        let v6 = Self.policy(listen: "::1")
        #expect(Self.answer(v6, Self.request(host: "[::1]:8080", token: Self.readToken)) == "ok")
    }

    @Test func theReadRoutesTakeTheReadOrTheAdminTokenTheAdminRoutesOnlyTheAdminOne() {
        let policy = Self.policy()
        #expect(Self.answer(policy, Self.request()) == "401")
        #expect(Self.answer(policy, Self.request(token: "wrong-token-0123456789")) == "401")
        #expect(Self.answer(policy, Self.request(token: Self.readToken + "x")) == "401")
        #expect(Self.answer(policy, Self.request(token: String(Self.readToken.dropLast()))) == "401")
        #expect(Self.answer(policy, Self.request(authorization: "Basic \(Self.readToken)")) == "401")
        #expect(Self.answer(policy, Self.request(authorization: "Bearer")) == "401")
        #expect(Self.answer(policy, Self.request(token: Self.readToken)) == "ok")
        #expect(Self.answer(policy, Self.request(authorization: "bearer \(Self.readToken)")) == "ok", "the scheme in any case")
        #expect(Self.answer(policy, Self.request(token: Self.adminToken)) == "ok")
        #expect(Self.answer(policy, Self.request(token: Self.readToken), .admin) == "401", "the read token does not act")
        #expect(Self.answer(policy, Self.request(token: Self.adminToken), .admin) == "ok")
        #expect(Self.answer(policy, Self.request(), .page) == "ok", "the page's files are the same everywhere")
        let open = Self.policy(read: nil)
        #expect(Self.answer(open, Self.request()) == "ok", "without read_token the read routes are open")
        #expect(Self.answer(open, Self.request(), .admin) == "401")
    }

    @Test func tenWrongTokensInAMinuteBlockThatAddressForAMinuteAndNoOther() {
        let now = Now()
        let policy = Self.policy(now: now)
        let wrong = Self.request(token: "wrong-token-0123456789"), right = Self.request(token: Self.adminToken)
        for _ in 0..<9 { #expect(Self.answer(policy, wrong, from: "127.0.0.2", .admin) == "401") }
        #expect(Self.answer(policy, right, from: "127.0.0.2", .admin) == "ok", "nine are not ten")
        // Another address failing at the same time counts for itself.
        for _ in 0..<9 { #expect(Self.answer(policy, wrong, from: "127.0.0.3", .admin) == "401") }
        // Wrong tokens on the read routes guess the admin token just as well.
        #expect(Self.answer(policy, wrong, from: "127.0.0.2", .read) == "401")
        #expect(Self.answer(policy, right, from: "127.0.0.2", .admin) == "429", "blocked, even with the right token")
        #expect(Self.answer(policy, Self.request(token: Self.readToken), from: "127.0.0.2", .read) == "429")
        do {
            try policy.check(right, client: Self.client("127.0.0.2"), scope: .admin)
            Issue.record("not blocked")
        } catch {
            #expect(error.code == "too_many_failures")
            #expect(error.retryAfter == 60)
        }
        #expect(Self.answer(policy, Self.request(host: "evil.example"), from: "127.0.0.2", .page) == "421", "the Host check still answers first")
        #expect(Self.answer(policy, Self.request(), from: "127.0.0.2", .page) == "ok", "the page's files need no token")
        #expect(Self.answer(policy, right, from: "127.0.0.3", .admin) == "ok", "another address is not blocked")
        #expect(Self.answer(policy, right, from: "::1", .admin) == "ok")

        now.advance(59)
        #expect(Self.answer(policy, right, from: "127.0.0.2", .admin) == "429")
        now.advance(1)
        #expect(Self.answer(policy, right, from: "127.0.0.2", .admin) == "ok", "a minute later")
        #expect(Self.answer(policy, wrong, from: "127.0.0.2", .admin) == "401", "and its count starts again")
        #expect(Self.answer(policy, right, from: "127.0.0.2", .admin) == "ok")
    }

    @Test func failuresOlderThanAMinuteDoNotCount() {
        let now = Now()
        let policy = Self.policy(now: now)
        let wrong = Self.request(token: "wrong-token-0123456789"), right = Self.request(token: Self.adminToken)
        for _ in 0..<9 {
            #expect(Self.answer(policy, wrong, .admin) == "401")
            now.advance(7)
        }
        // The first of the nine is 63 s old now: ten wrong in all, nine within the minute.
        #expect(Self.answer(policy, wrong, .admin) == "401")
        #expect(Self.answer(policy, right, .admin) == "ok")
        #expect(Self.answer(policy, wrong, .admin) == "401")
        #expect(Self.answer(policy, right, .admin) == "429", "ten within the minute")
    }

    @Test func aTableFullOfGuessersForgetsTheStalestNotTheBlocked() {
        let now = Now()
        let throttle = TokenThrottle(now: { now.value })
        let blocked = Self.client("10.9.9.9")
        for _ in 0..<TokenThrottle.limit { throttle.failed(blocked) }
        for index in 0..<(TokenThrottle.capacity + 100) {
            throttle.failed(Self.client("10.\(index / 65536).\(index / 256 % 256).\(index % 256)"))
        }
        #expect(throttle.blockedFor(blocked) == 60, "still blocked after \(TokenThrottle.capacity + 100) other addresses")
    }
}

extension HeavySuites {
    /// `http.read_token`, `http.allowed_hosts`, the admin throttle and
    /// percent-decoded path parameters over real HTTP against `claw-gateway run`.
    @Suite(.serialized) struct ReadAccessTests {
        static let readToken = "read-token-0123456789"
        static let adminToken = "admin-token-0123456789"
        static let http = "read_token: \(readToken)\nallowed_hosts: [arcade-7.example.com]"

        static func get(_ url: String, token: String? = nil, host: String? = nil) async throws -> HTTP.Answer {
            try await HTTP.request(.GET, url, headers: headers(token: token, host: host))
        }

        static func headers(token: String? = nil, host: String? = nil) -> [(String, String)] {
            (token.map { [("Authorization", "Bearer \($0)")] } ?? []) + (host.map { [("Host", $0)] } ?? [])
        }

        /// The status of `GET /v1/stream`, and whether its first bytes are the arcade's hello.
        static func stream(_ site: E2ESite, token: String? = nil, host: String? = nil) async throws -> (Int, Bool) {
            var request = HTTPClientRequest(url: "\(site.base)/v1/stream")
            for (name, value) in headers(token: token, host: host) { request.headers.add(name: name, value: value) }
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
            var text = ""
            for try await buffer in response.body {
                text += String(buffer: buffer)
                if response.status != .ok || text.contains("event: hello") { break }
            }
            return (Int(response.status.code), text.contains("event: hello"))
        }

        @Test func withAReadTokenEveryReadRouteNeedsItAndOnlyThose() async throws {
            try await E2ESite.with(simulate: false, adminToken: Self.adminToken, http: Self.http) { site in
                try await site.waitReady()
                for path in ["/v1/machines", "/v1/machines/m1", "/v1/machines/m1/games", "/metrics", "/v1/machines/m9"] {
                    let none = try await Self.get(site.base + path)
                    #expect(none.status == 401, "\(path) without a token")
                    #expect(none.json["code"] as? String == "unauthorized", "\(path): \(none.body)")
                    #expect((none.json["message"] as? String)?.contains("http.read_token") == true)
                    #expect(try await Self.get(site.base + path, token: "wrong-token-0123456789").status == 401, "\(path)")
                    let expected = path.hasSuffix("m9") ? 404 : 200
                    #expect(try await Self.get(site.base + path, token: Self.readToken).status == expected, "\(path) with the read token")
                    #expect(try await Self.get(site.base + path, token: Self.adminToken).status == expected, "\(path) with the admin token")
                }
                #expect(try await Self.stream(site) == (401, false))
                #expect(try await Self.stream(site, token: Self.readToken) == (200, true))
                #expect(try await Self.stream(site, token: Self.adminToken) == (200, true))

                // The page's own files need no token: the page asks for it.
                for path in ["/dashboard", "/dashboard/app.js", "/dashboard/app.css", "/healthz", "/readyz"] {
                    #expect(try await Self.get(site.base + path).status == 200, "\(path)")
                }
                // The read token does not act.
                let pause = try await HTTP.request(.POST, "\(site.base)/v1/machines/m1/pause", headers: Self.headers(token: Self.readToken))
                #expect(pause.status == 401)
                #expect(pause.json["message"] as? String == "Send the admin token (http.admin_token) or an admin operator's token as Authorization: Bearer <token>.")
                // The ingress needs none of it.
                #expect(try await site.generic(from: "ann", #"{"command":6}"#).status == 200)
            }
        }

        @Test func aHostThatIsNotTheGatewaysGets421OnEveryRouteButTheIngressAndHealth() async throws {
            try await E2ESite.with(simulate: false, adminToken: Self.adminToken, http: Self.http) { site in
                try await site.waitReady()
                let port = site.site.httpPort
                let guarded = ["/v1/machines", "/v1/machines/m1", "/v1/machines/m1/games", "/metrics", "/dashboard", "/dashboard/app.js", "/"]
                for (index, host) in ["evil.example", "127.0.0.1.evil.example:\(port)", "localhost.evil.example"].enumerated() {
                    for path in guarded {
                        let answer = try await Self.get(site.base + path, token: Self.readToken, host: host)
                        #expect(answer.status == 421, "\(path) for \(host)")
                        #expect(answer.json["code"] as? String == "unknown_host", "\(path): \(answer.body)")
                    }
                    #expect(try await Self.stream(site, token: Self.readToken, host: host).0 == 421)
                    let pause = try await HTTP.request(
                        .POST, "\(site.base)/v1/machines/m1/pause", headers: Self.headers(token: Self.adminToken, host: host))
                    #expect(pause.status == 421)
                    #expect(try await Self.get(site.base + "/healthz", host: host).status == 200)
                    #expect(try await Self.get(site.base + "/readyz", host: host).status == 200)
                    // The copies and notifications of an IM service behind a proxy that names itself.
                    let body = GenericEnvelope.encode(from: "player-\(index)", to: "m1", attach: #"{"command":6}"#)
                    let timestamp = String(Int64(Date().timeIntervalSince1970))
                    let signature = Signatures.genericSignature(secret: E2ESite.webhookSecret, timestamp: timestamp, body: body)
                    let notified = try await E2ESite.postGeneric(
                        base: site.base, body: body,
                        headers: [
                            ("Content-Type", "application/json"), (GenericEnvelope.timestampHeader, timestamp),
                            (GenericEnvelope.signatureHeader, signature), ("Host", host),
                        ])
                    #expect(notified.status == 200, "\(notified.body)")
                    var copyHeaders = E2ESite.signedCopyHeaders(Array("{}".utf8))
                    copyHeaders.append(("Host", host))
                    #expect(try await site.postCopy(body: Array("{}".utf8), headers: copyHeaders).status == 200)
                }
                for host in ["arcade-7.example.com", "ARCADE-7.example.com:443", "localhost:\(port)", "127.0.0.1:\(port)"] {
                    #expect(try await Self.get(site.base + "/v1/machines", token: Self.readToken, host: host).status == 200, "\(host)")
                }
                // A request with no Host at all names no one.
                let socket = try RawSocket(port: port)
                socket.send("GET /v1/machines HTTP/1.0\r\nAuthorization: Bearer \(Self.readToken)\r\n\r\n")
                let raw = socket.read(timeout: .seconds(5))
                #expect(raw.hasPrefix("HTTP/1.1 421") || raw.hasPrefix("HTTP/1.0 421"), "\(raw)")
            }
        }

        @Test func tenWrongAdminTokensFromAnAddressGet429EvenWithTheRightOne() async throws {
            try await E2ESite.with(simulate: false, adminToken: Self.adminToken) { site in
                try await site.waitReady()
                let pause = "\(site.base)/v1/machines/m1/pause"
                for attempt in 1...10 {
                    let wrong = try await HTTP.request(.POST, pause, headers: Self.headers(token: "guess-\(attempt)-0123456789"))
                    #expect(wrong.status == 401, "attempt \(attempt)")
                }
                let blocked = try await HTTP.request(.POST, pause, headers: Self.headers(token: Self.adminToken))
                #expect(blocked.status == 429)
                #expect(blocked.json["code"] as? String == "too_many_failures", "\(blocked.body)")
                #expect(try await HTTP.get("\(site.base)/v1/machines/m1").json["paused"] as? Bool == false, "nothing was done")
                #expect(try await HTTP.get("\(site.base)/v1/machines").status == 200, "the open read routes stay open")
                let metrics = try await HTTP.get("\(site.base)/metrics").body
                #expect(metrics.contains(#"claw_http_requests_total{route="/v1/machines/{id}/pause",status="429"} 1"#), "\(metrics)")
            }
        }

        @Test func percentEncodedNamesAreRemovedFromTheQueue() async throws {
            try await E2ESite.with(adminToken: Self.adminToken) { site in
                let admin = Self.headers(token: Self.adminToken)
                try await site.generic(from: "ann", #"{"command":6}"#)
                for player in ["小明", "a b", "c/d"] {
                    let joined = try await site.generic(from: player, #"{"command":6}"#)
                    #expect(joined.json["result"] as? String == "queued", "\(player): \(joined.body)")
                }
                let detail = try await Self.get("\(site.base)/v1/machines/%6D1")
                #expect(detail.status == 200 && detail.json["id"] as? String == "m1", "the machine's id is decoded too")
                for encoded in ["%E5%B0%8F%E6%98%8E", "a%20b", "c%2Fd"] {
                    let removed = try await HTTP.request(.DELETE, "\(site.base)/v1/machines/m1/queue/\(encoded)", headers: admin)
                    #expect(removed.status == 200, "\(encoded): \(removed.body)")
                }
                let waiting = try await Self.get("\(site.base)/v1/machines/m1").json["waiting"] as? [[String: Any]]
                #expect(waiting?.isEmpty == true, "\(String(describing: waiting))")

                // What does not decode to UTF-8 is a 400 that says which parameter.
                for path in ["/v1/machines/m1/queue/%ZZ", "/v1/machines/m1/queue/%FF", "/v1/machines/m1/queue/%E5%B0"] {
                    let socket = try RawSocket(port: site.site.httpPort)
                    socket.send("DELETE \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer \(Self.adminToken)\r\nConnection: close\r\n\r\n")
                    let raw = socket.read(timeout: .seconds(5))
                    #expect(raw.hasPrefix("HTTP/1.1 400"), "\(path): \(raw)")
                    #expect(raw.contains("accid is not valid percent-encoded UTF-8"), "\(raw)")
                }
                let socket = try RawSocket(port: site.site.httpPort)
                socket.send("GET /v1/machines/%ZZ HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                #expect(socket.read(timeout: .seconds(5)).hasPrefix("HTTP/1.1 400"))
            }
        }
    }
}
