import Foundation
import NIOCore
import Testing

@testable import ClawGateway

/// `http.max_connections_per_client` and `http.idle_timeout`: read, defaulted and refused as documented.
@Suite struct FairHTTPConfigTests {
    static let minimal = """
        gateway: { id: arcade-1 }
        mqtt: { url: "mqtt://127.0.0.1:1883" }
        machines:
          - id: m1

        """

    static func problems(_ http: String) -> [String] {
        do {
            _ = try ConfigLoader.parse(Self.minimal + "http:\n" + http, file: "test.yaml", baseDirectory: "/tmp", environment: [:])
            return []
        } catch {
            return error.problems.map(\.description)
        }
    }

    @Test func defaultsAndValues() throws {
        let defaults = try ConfigLoader.parse(Self.minimal, file: "test.yaml", baseDirectory: "/tmp", environment: [:])
        #expect(defaults.http.maxConnectionsPerClient == 16 && defaults.http.idleTimeout == .seconds(60))
        let set = try ConfigLoader.parse(
            Self.minimal + "http:\n  max_connections_per_client: 3\n  idle_timeout: 2m\n", file: "test.yaml", baseDirectory: "/tmp", environment: [:])
        #expect(set.http.maxConnectionsPerClient == 3 && set.http.idleTimeout == .seconds(120))
        let small = try ConfigLoader.parse(Self.minimal + "http:\n  max_connections: 6\n", file: "test.yaml", baseDirectory: "/tmp", environment: [:])
        #expect(small.http.maxConnectionsPerClient == 6, "a share is never more than the whole")
    }

    @Test(arguments: [
        ("  max_connections_per_client: 0\n", "http.max_connections_per_client: must be between 1 and 1024, not 0"),
        ("  max_connections_per_client: lots\n", #"http.max_connections_per_client: must be a whole number, not "lots""#),
        ("  max_connections: 8\n  max_connections_per_client: 9\n", "http.max_connections_per_client: must be between 1 and 8, not 9"),
        ("  idle_timeout: 500ms\n", "http.idle_timeout: must be at least 1s"),
        ("  idle_timeout: soon\n", #"http.idle_timeout: "soon" is not a duration; write e.g. 500ms, 10s, 2m, 1h or 30d"#),
    ])
    func badValuesAreRefusedNamingTheKey(http: String, problem: String) {
        #expect(Self.problems(http) == [problem])
    }
}

/// Whom a connection counts against.
@Suite struct ClientAddressTests {
    static func client(_ ip: String, port: Int = 1234) throws -> ClientAddress? {
        TrustedProxies.none.client(peer: try SocketAddress(ipAddress: ip, port: port), headers: [:])
    }

    @Test func anIPv4AddressIsItselfWhateverThePort() throws {
        #expect(try Self.client("127.0.0.2")?.description == "127.0.0.2")
        #expect(try Self.client("127.0.0.2") == Self.client("127.0.0.2", port: 9))
        #expect(try Self.client("127.0.0.2") != Self.client("127.0.0.3"))
    }

    @Test func anIPv6HostCountsAsItsWhole64AndAMappedIPv4AsTheIPv4Address() throws {
        #expect(try Self.client("2001:db8:1:2::1") == Self.client("2001:db8:1:2:ffff:1:2:3"), "one host, one share")
        #expect(try Self.client("2001:db8:1:2::1") != Self.client("2001:db8:1:3::1"))
        #expect(try Self.client("2001:db8:1:2::1")?.description == "2001:db8:1:2::/64")
        #expect(try Self.client("::ffff:10.0.0.7") == Self.client("10.0.0.7"))
    }
}

extension HeavySuites {
    /// One client cannot take what others need (SPEC §5, "Connections"):
    /// connections and streams held from 127.0.0.2 (the whole of 127/8 is
    /// this host) while 127.0.0.3 is served as if nothing happened.
    @Suite(.serialized) struct FairHTTPTests {
        static let holder = "127.0.0.2"
        static let other = "127.0.0.3"

        /// A correctly signed NetEase copy from `source`, over a connection of its own;
        /// the answer's status line and how long it took.
        static func copy(from source: String, port: Int, player: String) throws -> (String, Duration) {
            let body = NetEaseCopyBody.encode(from: player, to: "claw_m1", attach: #"{"command":6,"data":"\#(player)"}"#)
            let headers = E2ESite.signedCopyHeaders(body).map { "\($0.0): \($0.1)\r\n" }.joined()
            let clock = ContinuousClock()
            let start = clock.now
            let socket = try RawSocket(port: port, from: source)
            socket.send(
                "POST /im/netease HTTP/1.1\r\nHost: gw\r\nContent-Length: \(body.count)\r\n\(headers)\r\n")
            socket.send(body)
            let answer = socket.readResponses(1, timeout: .seconds(5)).first ?? ""
            return (answer.components(separatedBy: "\r\n").first ?? "", clock.now - start)
        }

        static func metrics(_ site: E2ESite) async throws -> PrometheusText {
            try PrometheusText(try await HTTP.get("\(site.base)/metrics").body)
        }

        static func lines(_ site: E2ESite, containing text: String) -> Int {
            site.site.logText.split(separator: "\n").filter { $0.contains(text) }.count
        }

        @Test func oneAddressOverItsShareIsRefusedWhileAnotherAddressIsServed() async throws {
            // The defaults: 1024 in all, 16 per client address.
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let port = site.site.httpPort
                let before = try await Self.metrics(site)
                for reason in ["max_connections", "per_client"] {
                    #expect(before.samples[#"claw_http_connections_refused_total{reason="\#(reason)"}"#] == 0, "at 0 from the first scrape")
                }
                let attempts = 100
                var sockets: [RawSocket] = []
                for _ in 0..<attempts { sockets.append(try RawSocket(port: port, from: Self.holder)) }
                // Each asks for /healthz: the ones within the share answer, the others were closed as they came.
                var served: [RawSocket] = []
                for socket in sockets {
                    socket.send("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
                    if socket.readResponses(1, timeout: .seconds(5)).first?.hasPrefix("HTTP/1.1 200") == true { served.append(socket) }
                }
                #expect(served.count == 16, "the share of one client address")

                // Holding all 16 open, 127.0.0.2 takes nothing from 127.0.0.3.
                for index in 0..<3 {
                    let (status, took) = try Self.copy(from: Self.other, port: port, player: "other\(index)")
                    #expect(status == "HTTP/1.1 200 OK")
                    #expect(took < .seconds(1), "answered in \(took)")
                }
                // Nor are its own 16 touched by the refusals.
                for socket in served {
                    socket.send("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
                    #expect(socket.readResponses(1, timeout: .seconds(5)).first?.hasPrefix("HTTP/1.1 200") == true)
                }
                let refused = try await Self.metrics(site).samples[#"claw_http_connections_refused_total{reason="per_client"}"#]
                #expect(refused == Double(attempts - 16))
                try await eventually("the refusals in the log") { Self.lines(site, containing: "over the client's share") >= 1 }
                #expect(Self.lines(site, containing: "over the client's share") == 1, "\(attempts - 16) refusals, one line")

                // Closed, the share is free again.
                sockets.removeAll()
                served.removeAll()
                try await eventually("127.0.0.2 served again") {
                    let socket = try RawSocket(port: port, from: Self.holder)
                    socket.send("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
                    return socket.readResponses(1, timeout: .seconds(2)).first?.hasPrefix("HTTP/1.1 200") == true
                }
            }
        }

        @Test func anIdleConnectionIsClosedAfterTheIdleTimeout() async throws {
            try await E2ESite.with(simulate: false, http: "idle_timeout: 1s") { site in
                try await site.waitReady()
                let clock = ContinuousClock()
                // A keep-alive connection after its answer, and one that never sends a byte.
                let used = try RawSocket(port: site.site.httpPort, from: Self.holder)
                used.send("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
                #expect(used.readResponses(1, timeout: .seconds(5)).first?.hasPrefix("HTTP/1.1 200") == true)
                let answered = clock.now
                let silent = try RawSocket(port: site.site.httpPort, from: Self.holder)
                let opened = clock.now
                #expect(used.isClosed(within: .seconds(5)))
                let usedFor = clock.now - answered
                #expect(silent.isClosed(within: .seconds(5)))
                let silentFor = clock.now - opened
                #expect(usedFor >= .milliseconds(900) && usedFor < .seconds(3), "closed after \(usedFor)")
                #expect(silentFor >= .milliseconds(900) && silentFor < .seconds(3), "closed after \(silentFor)")
            }
        }

        @Test func aTrickledHeadIsCutOffAtTheReadTimeoutWhileOthersAreServed() async throws {
            try await E2ESite.with(simulate: false, http: "read_timeout: 1s") { site in
                try await site.waitReady()
                let slow = try RawSocket(port: site.site.httpPort, from: Self.holder)
                slow.send("POST /im/netease HTTP/1.1\r\nHost: gw\r\nX-Slow: ")
                let clock = ContinuousClock()
                let started = clock.now
                // A header byte every 200 ms: never idle, never a whole head.
                var closed = false
                while !closed, clock.now - started < .seconds(10) {
                    closed = !slow.send("a") || slow.isClosed(within: .milliseconds(200))
                }
                #expect(closed)
                #expect(clock.now - started >= .milliseconds(900) && clock.now - started < .seconds(3), "cut off after \(clock.now - started)")
                let (status, took) = try Self.copy(from: Self.other, port: site.site.httpPort, player: "other")
                #expect(status == "HTTP/1.1 200 OK" && took < .seconds(1))
            }
        }

        /// Opens `GET /v1/stream` from `source`; the socket once `hello` came, or the refusal.
        static func stream(from source: String, port: Int) throws -> (RawSocket, String) {
            let socket = try RawSocket(port: port, from: source)
            socket.send("GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n")
            let head = socket.read(until: "\r\n\r\n", timeout: .seconds(5))
            let end = head.hasPrefix("HTTP/1.1 200") ? "event: hello" : "}"
            return (socket, head.contains(end) ? head : head + socket.read(until: end, timeout: .seconds(5)))
        }

        @Test func aFifthStreamIsAnswered429AndAResetStreamGivesItsSlotBack() async throws {
            // No stats and no machines: nothing is written to a quiet stream for 15 s, so only
            // the connection's close can give a reset stream's slot back within the wait below.
            try await E2ESite.with(simulate: false, gateway: "stats_interval: 0") { site in
                try await site.waitReady()
                let port = site.site.httpPort
                var streams: [RawSocket] = []
                for _ in 0..<ArcadeFeed.maxClientsPerAddress {
                    let (socket, text) = try Self.stream(from: Self.holder, port: port)
                    #expect(text.contains("event: hello"), "\(text.prefix(200))")
                    streams.append(socket)
                }
                let (_, fifth) = try Self.stream(from: Self.holder, port: port)
                #expect(fifth.hasPrefix("HTTP/1.1 429"), "\(fifth.prefix(200))")
                #expect(fifth.lowercased().contains("content-type: application/json") && fifth.contains(#""code":"too_many_streams""#))
                let (_, theirs) = try Self.stream(from: Self.other, port: port)
                #expect(theirs.contains("event: hello"), "another address is served")

                streams.removeLast().reset()
                try await eventually("the reset stream's slot back", timeout: .seconds(3)) {
                    try Self.stream(from: Self.holder, port: port).1.contains("event: hello")
                }
                #expect(streams.count == ArcadeFeed.maxClientsPerAddress - 1)
            }
        }

        @Test func aFloodOfBadSignaturesLeavesOneLinePerReason() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let flood = 300
                let clock = ContinuousClock()
                let start = clock.now
                for index in 0..<flood {
                    let answer = try await site.copy(from: "mallory", "{\"command\":6,\"data\":\"m\(index)\"}") { headers, _ in
                        headers = headers.map { $0.0 == "CheckSum" ? ($0.0, String(repeating: "0", count: 40)) : $0 }
                    }
                    #expect(answer.status == 401)
                }
                let took = clock.now - start
                try await eventually("every copy counted") {
                    try await Self.metrics(site).samples[#"claw_notifications_total{provider="netease",result="unauthorized"}"#] == Double(flood)
                }
                // One line per reason every 10 s: as many as 10 s periods the flood spanned.
                let allowed = Int(took.seconds / 10) + 1
                let refused = Self.lines(site, containing: "NetEase copy refused")
                #expect(refused >= 1 && refused <= allowed, "\(refused) lines for \(flood) copies in \(took)")

                // Another reason has a line of its own, flood or not.
                let body = Array("not json".utf8)
                let answer = try await site.postCopy(body: body, headers: E2ESite.signedCopyHeaders(body))
                #expect(answer.status == 400)
                try await eventually("the bad payload's line") {
                    site.site.logText.split(separator: "\n").contains { $0.contains("NetEase copy refused") && $0.contains("not valid JSON") }
                }
            }
        }
    }
}
