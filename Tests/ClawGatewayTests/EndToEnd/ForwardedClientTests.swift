import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// Behind a reverse proxy (SPEC §5, `http.trusted_proxies`), through the
    /// real gateway on a real port: 127.0.0.2 is the trusted proxy, 127.0.0.3
    /// a client that writes `X-Forwarded-For` itself. Streams, failed tokens,
    /// failed sids and new tourists count per forwarded client (an IPv6 one
    /// per /64) from the proxy, and per peer from anyone else; the proxy
    /// has no connection share of its own to run out of.
    @Suite(.serialized) struct ForwardedClientTests {
        static let proxy = "127.0.0.2"
        static let spoofer = "127.0.0.3"
        static let readToken = "forwarded-read-token-0123"

        /// Opens `GET /v1/stream` from `source` with `headers` (lines); the socket and what came: `hello`, or the refusal.
        static func stream(from source: String, port: Int, _ headers: String) throws -> (RawSocket, String) {
            let socket = try RawSocket(port: port, from: source)
            socket.send("GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\(headers)\r\n")
            let head = socket.read(until: "\r\n\r\n", timeout: .seconds(5))
            let end = head.hasPrefix("HTTP/1.1 200") ? "event: hello" : "}"
            return (socket, head.contains(end) ? head : head + socket.read(until: end, timeout: .seconds(5)))
        }

        /// One request from `source` on a connection of its own; the answer's status line.
        static func status(from source: String, port: Int, _ request: String) throws -> String {
            let socket = try RawSocket(port: port, from: source)
            socket.send(request)
            return socket.readResponses(1, timeout: .seconds(5)).first?.components(separatedBy: "\r\n").first ?? "closed"
        }

        static func forwardedFor(_ address: String) -> String { "X-Forwarded-For: \(address)\r\n" }

        @Test func streamsCountPerForwardedClientFromTheProxyAndPerPeerFromAnyoneElse() async throws {
            try await E2ESite.with(simulate: false, http: "trusted_proxies: [\(Self.proxy)]", gateway: "stats_interval: 0") { site in
                try await site.waitReady()
                let port = site.site.httpPort
                var held: [RawSocket] = []
                func fill(from source: String, _ headers: [String]) throws {
                    for header in headers {
                        let (socket, text) = try Self.stream(from: source, port: port, header)
                        #expect(text.contains("event: hello"), "\(source) \(header): \(text.prefix(200))")
                        held.append(socket)
                    }
                }
                let share = ArcadeFeed.maxClientsPerAddress

                // Through the proxy: one client's share is its own, another's is untouched.
                try fill(from: Self.proxy, Array(repeating: Self.forwardedFor("198.51.100.1"), count: share))
                #expect(try Self.stream(from: Self.proxy, port: port, Self.forwardedFor("198.51.100.1")).1.hasPrefix("HTTP/1.1 429"))
                // The client appended last by the proxy counts, whatever it wrote itself to the left.
                #expect(try Self.stream(from: Self.proxy, port: port, Self.forwardedFor("203.0.113.77, 198.51.100.1")).1.hasPrefix("HTTP/1.1 429"))
                try fill(from: Self.proxy, [Self.forwardedFor("198.51.100.2")])
                // RFC 7239's header, with a quoted IPv6 address and its port, before X-Forwarded-For.
                try fill(from: Self.proxy, (1...share).map { "Forwarded: for=\"[2001:db8:1:2::\($0)]:4711\"\r\n" + Self.forwardedFor("198.51.100.3") })
                #expect(try Self.stream(from: Self.proxy, port: port, Self.forwardedFor("2001:db8:1:2:ffff:ffff:ffff:ffff")).1.hasPrefix("HTTP/1.1 429"),
                    "one /64 is one client")
                try fill(from: Self.proxy, [Self.forwardedFor("2001:db8:1:3::1"), Self.forwardedFor("198.51.100.3")])

                // From anyone else the header is ignored: four streams, whatever each one claims, and no fifth.
                try fill(from: Self.spoofer, (1...share).map { Self.forwardedFor("198.51.100.\(100 + $0)") })
                let (_, fifth) = try Self.stream(from: Self.spoofer, port: port, Self.forwardedFor("198.51.100.200"))
                #expect(fifth.hasPrefix("HTTP/1.1 429") && fifth.contains(#""code":"too_many_streams""#), "\(fifth.prefix(200))")
                // Garbage and an overlong header from the proxy count as the proxy itself.
                try fill(from: Self.proxy, [Self.forwardedFor("not-an-address"), Self.forwardedFor(String(repeating: "9", count: 7000))])
            }
        }

        @Test func aTrustedProxyHasNoShareOfConnectionsToRunOutOf() async throws {
            try await E2ESite.with(simulate: false, http: "trusted_proxies: [\(Self.proxy)]\nmax_connections_per_client: 4") { site in
                try await site.waitReady()
                let port = site.site.httpPort
                func served(from source: String, _ count: Int) throws -> Int {
                    let sockets = try (0..<count).map { _ in try RawSocket(port: port, from: source) }
                    return sockets.filter { socket in
                        socket.send("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
                        return socket.readResponses(1, timeout: .seconds(5)).first?.hasPrefix("HTTP/1.1 200") == true
                    }.count
                }
                #expect(try served(from: Self.proxy, 10) == 10, "every client behind the proxy comes through its connections")
                #expect(try served(from: Self.spoofer, 10) == 4, "anyone else has max_connections_per_client")
            }
        }

        @Test func wrongTokensBlockTheForwardedClientOnlyAndASpooferAsItself() async throws {
            try await E2ESite.with(simulate: false, http: "trusted_proxies: [\(Self.proxy)]\nread_token: \(Self.readToken)") { site in
                try await site.waitReady()
                let port = site.site.httpPort
                func read(from source: String, as client: String, token: String) throws -> String {
                    try Self.status(
                        from: source, port: port,
                        "GET /v1/machines HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nAuthorization: Bearer \(token)\r\n\(Self.forwardedFor(client))\r\n")
                }
                for _ in 0..<TokenThrottle.limit {
                    #expect(try read(from: Self.proxy, as: "198.51.100.1", token: "wrong-token-0123456789").hasPrefix("HTTP/1.1 401"))
                }
                #expect(try read(from: Self.proxy, as: "198.51.100.1", token: Self.readToken).hasPrefix("HTTP/1.1 429"), "the guesser is blocked")
                #expect(try read(from: Self.proxy, as: "198.51.100.2", token: Self.readToken).hasPrefix("HTTP/1.1 200"), "everyone else behind the proxy is not")

                // A client naming a new address in each request is still one client.
                for index in 0..<TokenThrottle.limit {
                    #expect(try read(from: Self.spoofer, as: "198.51.100.\(10 + index)", token: "wrong-token-0123456789").hasPrefix("HTTP/1.1 401"))
                }
                #expect(try read(from: Self.spoofer, as: "198.51.100.99", token: Self.readToken).hasPrefix("HTTP/1.1 429"))
                #expect(try read(from: Self.proxy, as: "198.51.100.99", token: Self.readToken).hasPrefix("HTTP/1.1 200"), "the address it named is not blocked")
            }
        }

        @Test func newTouristsAndBadSidsCountPerForwardedClient() async throws {
            // The tests' HTTP client connects from 127.0.0.1: that is the proxy here.
            try await AppServerSite.with(http: "trusted_proxies: [127.0.0.1]") { site in
                func tourist(_ client: String, sid: String = "") async throws -> Int? {
                    let answer = try await site.post(
                        "tourist", "sid=\(sid)",
                        headers: [("Content-Type", "application/x-www-form-urlencoded"), ("X-Forwarded-For", client)])
                    return answer.json["code"] as? Int
                }
                for _ in 0..<Tourists.maxNewPerMinute { #expect(try await tourist("198.51.100.1") == 200) }
                #expect(try await tourist("198.51.100.1") == 429, "one client's new accounts")
                #expect(try await tourist("198.51.100.2") == 200, "another client behind the same proxy")
                #expect(try await tourist("2001:db8:9:9::1") == 200)

                func roomList(_ client: String, sid: String) async throws -> Int? {
                    try await site.post(
                        "room/list", "sid=\(sid)",
                        headers: [("Content-Type", "application/x-www-form-urlencoded"), ("X-Forwarded-For", client)]
                    ).json["code"] as? Int
                }
                for index in 0..<TokenThrottle.limit {
                    #expect(try await roomList("2001:db8:7:7::\(index + 1)", sid: "guessed-\(index)") == 401)
                }
                #expect(try await roomList("2001:db8:7:7::ffff", sid: "guessed-x") == 429, "ten bad sids from one /64 block that /64")
                #expect(try await roomList("2001:db8:7:8::1", sid: "guessed-y") == 401, "the next /64 is not blocked")

                // From a peer that is no trusted proxy, the header names no one.
                let port = site.httpPort
                var codes: [String] = []
                for index in 0...Tourists.maxNewPerMinute {
                    let socket = try RawSocket(port: port, from: Self.spoofer)
                    socket.send(
                        "POST /dollsCatcher/tourist HTTP/1.1\r\nHost: gw\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                            + "Content-Length: 4\r\n\(Self.forwardedFor("203.0.113.\(index + 1)"))\r\nsid=")
                    let answer = socket.readResponses(1, timeout: .seconds(5)).first ?? ""
                    codes.append(answer.contains(#""code":429"#) ? "429" : answer.contains(#""code":200"#) ? "200" : answer)
                }
                #expect(codes == Array(repeating: "200", count: Tourists.maxNewPerMinute) + ["429"], "\(codes)")
            }
        }
    }
}
