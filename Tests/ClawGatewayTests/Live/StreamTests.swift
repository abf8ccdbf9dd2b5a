import AsyncHTTPClient
import Foundation
import NIOCore
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// `GET /v1/stream` end to end: the whole arcade on connect, a change as
    /// it happens, and a stop that is not held up by open streams.
    @Suite(.serialized) struct StreamTests {
        /// Reads Server-Sent Events from a streaming response.
        final class Reader: @unchecked Sendable {
            struct Message: Equatable {
                var event: String
                var data: String
            }

            private let lock = NSLock()
            private var text = ""
            private(set) var ended = false
            private var task: Task<Void, Never>?

            init(_ url: String) async throws {
                let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
                #expect(response.status == .ok)
                #expect(response.headers.first(name: "content-type") == "text/event-stream")
                task = Task { [self] in
                    do {
                        for try await buffer in response.body {
                            lock.withLock { text += String(buffer: buffer) }
                        }
                    } catch {}
                    lock.withLock { ended = true }
                }
            }

            var messages: [Message] {
                lock.withLock { text }.components(separatedBy: "\n\n").dropLast().compactMap { frame in
                    var event = "message", data = ""
                    for line in frame.split(separator: "\n") {
                        if line.hasPrefix("event: ") { event = String(line.dropFirst(7)) }
                        if line.hasPrefix("data: ") { data = String(line.dropFirst(6)) }
                    }
                    return data.isEmpty ? nil : Message(event: event, data: data)
                }
            }

            var isEnded: Bool { lock.withLock { ended } }

            func cancel() { task?.cancel() }
        }

        @Test func theWholeArcadeThenEveryChangeAndAStopEndsTheStream() async throws {
            try await E2ESite.with { site in
                let stream = try await Reader("\(site.base)/v1/stream")
                try await eventually("the whole arcade") {
                    stream.messages.filter { $0.event == "snapshot" }.count >= 2
                }
                let first = stream.messages
                #expect(first.first?.event == "hello")
                let hello = try JSONDecoder().decode(StreamHello.self, from: Data(try #require(first.first?.data).utf8))
                #expect(hello.machines.map(\.id) == ["m1", "m2"] && hello.gateway == "test" && !hello.admin && !hello.credits)
                #expect(first.contains { $0.event == "gateway" && $0.data.contains(#""broker_connected":true"#) })

                try await site.generic(from: "ann", #"{"command":6,"data":"Ann"}"#)
                try await site.generic(from: "zoe", #"{"command":6,"data":"Zoe"}"#)
                try await eventually("zoe waiting, as the stream shows") {
                    stream.messages.contains { $0.event == "snapshot" && $0.data.contains(#""waiting":[{"accid":"zoe","provider":"generic","nick":"Zoe""#) }
                }
                #expect(stream.messages.contains { $0.event == "event" && $0.data.contains(#""type":"offered""#) && $0.data.contains("ann") })
                try await eventually("a round of stats", timeout: .seconds(10)) {
                    stream.messages.contains { $0.event == "stats" } && stream.messages.contains { $0.event == "gateway_stats" }
                }

                // A stop is not held up by the open stream: the feed ends it first.
                let gateway = try #require(site.gateway)
                let clock = ContinuousClock()
                let start = clock.now
                gateway.signal(SIGTERM)
                #expect(await gateway.wait(timeout: 10) == 0)
                #expect(clock.now - start < .seconds(5), "stopped in \(clock.now - start)")
                try await eventually("the stream to end") { stream.isEnded }
            }
        }

        @Test func theDashboardIsServedWithItsPolicy() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                // A plain socket: an HTTP client would follow the redirect.
                let socket = try RawSocket(port: site.site.httpPort)
                socket.send("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                let root = try #require(socket.readResponses(1, timeout: .seconds(5)).first)
                #expect(root.hasPrefix("HTTP/1.1 302") && root.lowercased().contains("location: /dashboard\r\n"), "\(root)")
                for (path, type) in [("/dashboard", "text/html"), ("/dashboard/app.js", "text/javascript"), ("/dashboard/app.css", "text/css")] {
                    let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(site.base)\(path)"), timeout: .seconds(5))
                    let body = String(buffer: try await response.body.collect(upTo: 1 << 20))
                    #expect(response.status == .ok)
                    #expect(response.headers.first(name: "content-type")?.hasPrefix(type) == true)
                    let policy = response.headers.first(name: "content-security-policy") ?? ""
                    #expect(policy.contains("script-src 'self'") && !policy.contains("unsafe-inline") && policy.contains("frame-ancestors 'none'"))
                    #expect(response.headers.first(name: "x-content-type-options") == "nosniff")
                    #expect(!body.isEmpty)
                }
                let page = try await HTTP.get("\(site.base)/dashboard").body
                #expect(!page.contains("<script>") && !page.contains("http://") && !page.contains("https://"), "no inline script, nothing from elsewhere")
            }
        }
    }
}
