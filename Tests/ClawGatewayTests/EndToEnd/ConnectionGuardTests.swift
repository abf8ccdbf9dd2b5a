import Foundation
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// The HTTP server's guards over raw sockets: a request must arrive within
    /// `http.read_timeout`, and no more than `http.max_connections` are open.
    /// The per-client shares and the idle timeout: `FairHTTPTests`.
    @Suite(.serialized) struct ConnectionGuardTests {
        @Test func aTrickledRequestIsCutOffAtTheReadTimeout() async throws {
            try await E2ESite.with(simulate: false, http: "read_timeout: 1s") { site in
                try await site.waitReady()
                let slow = try RawSocket(port: site.site.httpPort)
                slow.send("POST /v1/notifications HTTP/1.1\r\nHost: gw\r\nX-Slow: ")
                let clock = ContinuousClock()
                let started = clock.now
                // A byte every 300 ms keeps an idle timeout away, not the read deadline.
                var closed = false
                while !closed, clock.now - started < .seconds(10) {
                    closed = !slow.send("a") || slow.isClosed(within: .milliseconds(300))
                }
                #expect(closed)
                #expect(clock.now - started < .seconds(5), "cut off near the 1 s deadline")
                #expect(try await HTTP.get("\(site.base)/healthz").status == 200, "others are served")
            }
        }

        @Test func aRequestThatArrivesInTimeIsServedWhateverCameBefore() async throws {
            try await E2ESite.with(simulate: false, http: "read_timeout: 1s") { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                // Three requests on one connection, 600 ms apart (the connection staying open
                // meanwhile): each arrives whole within its second, together they take longer.
                for _ in 0..<3 {
                    socket.send("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
                    #expect(socket.readResponses(1, timeout: .seconds(5)).first?.hasPrefix("HTTP/1.1 200") == true)
                    #expect(!socket.isClosed(within: .milliseconds(600)), "still open between requests")
                }
            }
        }

        @Test func connectionsOverTheCapAreClosedAsTheyCome() async throws {
            try await E2ESite.with(simulate: false, http: "max_connections: 6") { site in
                try await site.waitReady()
                var open: [RawSocket] = []
                var refused = false
                // The test's own HTTP client may hold a connection too: open until one is refused.
                for _ in 0..<8 where !refused {
                    let socket = try RawSocket(port: site.site.httpPort)
                    if socket.isClosed(within: .milliseconds(300)) {
                        refused = true
                    } else {
                        open.append(socket)
                    }
                }
                #expect(refused)
                #expect(open.count <= 6)
                open.removeAll()  // closes them
                // The gateway hears of the closes as its event loops get to them: on a loaded box, seconds.
                try await eventually("a new connection to be served", timeout: .seconds(30)) {
                    let socket = try RawSocket(port: site.site.httpPort)
                    socket.send("GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n")
                    return socket.readResponses(1, timeout: .seconds(2)).first?.hasPrefix("HTTP/1.1 200") == true
                }
            }
        }
    }
}
