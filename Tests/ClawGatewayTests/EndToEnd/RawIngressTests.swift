import Foundation
import Protocol
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// The ingress read straight off the socket (RawIngress): every request
    /// of another shape, or malformed, is the full pipeline's to answer,
    /// whatever came before it on the connection. Over raw sockets against
    /// a real gateway.
    @Suite(.serialized) struct RawIngressTests {
        private typealias Fast = FastPathTests

        private static func queued(_ response: String?, position: Int) -> Bool {
            guard let response, response.hasPrefix("HTTP/1.1 200") else { return false }
            return Fast.body(response) == #"{"length":\#(position),"position":\#(position),"result":"queued"}"#
        }

        @Test func aRequestThatComesOneByteAtATimeIsAnswered() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                for byte in Fast.notification(from: "ann", #"{"command":6}"#).utf8 {
                    socket.send([byte])
                }
                #expect(Self.queued(socket.readResponses(1, timeout: .seconds(10)).first, position: 1))
                // And the connection is still good for the next one.
                socket.send(Fast.notification(from: "ben", #"{"command":6}"#))
                #expect(Self.queued(socket.readResponses(1, timeout: .seconds(10)).first, position: 2))
            }
        }

        @Test func headerNamesInAnyCaseAndSpacesAroundValuesAreRead() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                var request = Fast.notification(from: "ann", #"{"command":6}"#, headers: "connection: KEEP-ALIVE\r\n")
                request = request.replacingOccurrences(of: "X-Claw-Timestamp: ", with: "x-claw-TIMESTAMP:\t ")
                request = request.replacingOccurrences(of: "Content-Length: ", with: "content-length:   ")
                socket.send(request)
                #expect(Self.queued(socket.readResponses(1, timeout: .seconds(10)).first, position: 1))
            }
        }

        @Test func aConnectionSwitchesToTheFullPipelineMidwayAndKeepsTheOrder() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                // Raw, raw, the router (the switch), then a raw-shaped one that the full pipeline now answers.
                socket.send(
                    Fast.notification(from: "ann", #"{"command":6}"#) + Fast.notification(from: "ben", #"{"command":6}"#)
                        + "GET /v1/machines/m1 HTTP/1.1\r\nHost: localhost\r\n\r\n"
                        + Fast.notification(from: "cid", #"{"command":6}"#))
                let responses = socket.readResponses(4, timeout: .seconds(10))
                try #require(responses.count == 4)
                #expect(Self.queued(responses[0], position: 1))
                #expect(Self.queued(responses[1], position: 2))
                #expect(Fast.body(responses[2]).contains(#""queue_length":2"#), "both joins were durable before the read")
                #expect(Self.queued(responses[3], position: 3))
            }
        }

        @Test func chunkedBodiesAndHTTP10GoThroughTheFullPipeline() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let chunked = try RawSocket(port: site.site.httpPort)
                let plain = Fast.notification(from: "ann", #"{"command":6}"#)
                let head = plain.components(separatedBy: "\r\n\r\n")[0]
                    .replacingOccurrences(of: #"Content-Length: \d+"#, with: "Transfer-Encoding: chunked", options: .regularExpression)
                let body = Fast.body(plain)
                let half = body.utf8.count / 2
                let first = String(body.utf8.prefix(half))!, second = String(body.utf8.dropFirst(half))!
                chunked.send(
                    head + "\r\n\r\n" + String(first.utf8.count, radix: 16) + "\r\n" + first + "\r\n"
                        + String(second.utf8.count, radix: 16) + "\r\n" + second + "\r\n0\r\n\r\n")
                #expect(Self.queued(chunked.readResponses(1, timeout: .seconds(10)).first, position: 1))

                let old = try RawSocket(port: site.site.httpPort)
                old.send(Fast.notification(from: "ben", #"{"command":6}"#).replacingOccurrences(of: "HTTP/1.1\r\n", with: "HTTP/1.0\r\n"))
                let answer = old.readResponses(1, timeout: .seconds(10)).first
                #expect(answer.map { Fast.body($0) } == #"{"length":2,"position":2,"result":"queued"}"#)
            }
        }

        /// Ways to spoil a request that the raw path must leave to NIO's decoder.
        enum Spoilt: String, CaseIterable, Sendable {
            case twoContentLengths, nulInHeader, bareLF, spaceBeforeColon, foldedHeader

            func apply(_ request: String) -> String {
                switch self {
                case .twoContentLengths: request.replacingOccurrences(of: "Content-Length: ", with: "Content-Length: 1\r\nContent-Length: ")
                case .nulInHeader: request.replacingOccurrences(of: "Host: gw", with: "Host: g\u{0}w")
                case .bareLF: request.replacingOccurrences(of: "Host: gw\r\n", with: "Host: gw\nX-Sneaky: 1\r\n")
                case .spaceBeforeColon: request.replacingOccurrences(of: "Content-Length: ", with: "Content-Length : ")
                case .foldedHeader: request.replacingOccurrences(of: "Host: gw\r\n", with: "Host: gw\r\n folded\r\n")
                }
            }
        }

        @Test(arguments: Spoilt.allCases)
        func malformedRequestsAreNotPlayed(_ spoilt: Spoilt) async throws {
            let name = spoilt.rawValue
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                socket.send(spoilt.apply(Fast.notification(from: "eve", #"{"command":6}"#)))
                let answer = socket.readResponses(1, timeout: .seconds(3)).first
                #expect(answer?.hasPrefix("HTTP/1.1 2") != true, "\(name): \(answer ?? "closed")")
                // What the gateway did with it is settled by a request after it on another connection.
                let joined = try await site.generic(from: "ann", #"{"command":6}"#)
                #expect(joined.body == #"{"length":1,"position":1,"result":"queued"}"#, "\(name): eve was not queued")
            }
        }

        @Test func aBodyOverTheLimitIsRefusedAndTheConnectionClosed() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                socket.send(Fast.notification(from: "ann", #"{"command":6}"#))
                #expect(Self.queued(socket.readResponses(1, timeout: .seconds(10)).first, position: 1))
                socket.send(
                    "POST /v1/notifications HTTP/1.1\r\nHost: gw\r\nContent-Length: \(JSONResponse.maxBody + 1)\r\n\r\n"
                        + String(repeating: "x", count: JSONResponse.maxBody + 1))
                let answer = socket.readResponses(1, timeout: .seconds(10)).first
                #expect(answer?.hasPrefix("HTTP/1.1 413") == true, "\(answer ?? "closed")")
                #expect(socket.isClosed(within: .seconds(5)))
            }
        }

        @Test func aFloodPipelinedBehindAnAnswerThatWaitsForTheDiskIsAllAnsweredInOrder() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                // A join (answered once durable), then 1,000 moves: over RawIngress.maxAhead,
                // so the connection is read again only after the join's answer.
                var flood = Fast.notification(from: "ann", #"{"command":6}"#)
                for serial in 1...1000 {
                    flood += Fast.notification(from: "ann", #"{"command":1,"data":"left","serial":\#(serial)}"#)
                }
                #expect(flood.utf8.count > RawIngress.maxAhead)
                socket.send(flood)
                let responses = socket.readResponses(1001, timeout: .seconds(30))
                #expect(responses.count == 1001)
                #expect(Self.queued(responses.first, position: 1))
                #expect(responses.dropFirst().allSatisfy { Fast.body($0).contains(#""code":"#) }, "every move answered with its refusal")
            }
        }

        /// SPEC §5: a client that does not read its answers is not read from
        /// either, and is closed once stuck past `http.read_timeout`.
        /// On the raw path (54 bytes asking for a 4xx of about 260) and on
        /// the full pipeline (a `GET`, which leaves the raw path for good),
        /// again and again, never reading.
        @Test(arguments: [
            "POST /v1/notifications HTTP/1.1\r\nHost: gw\r\nContent-Length: 0\r\n\r\n",
            "GET /v1/machines HTTP/1.1\r\nHost: gw\r\n\r\n",
        ])
        func aClientThatNeverReadsItsAnswersIsNotReadFromAndIsClosed(_ request: String) async throws {
            try await E2ESite.with(simulate: false, http: "read_timeout: 2s") { site in
                try await site.waitReady()
                let gateway = try #require(site.gateway)
                let before = try #require(gateway.residentBytes)
                let socket = try RawSocket(port: site.site.httpPort)
                let sent = socket.flood(Array(request.utf8), for: .seconds(4))
                let after = try #require(gateway.residentBytes)
                // What the kernel buffers on loopback is a few MB; the gateway holds at most 256 KiB of answers.
                #expect(after - before < 32 << 20, "the gateway grew by \((after - before) >> 20) MiB while \(sent >> 10) KiB were sent")
                try await eventually("the connection to be closed", timeout: .seconds(10)) { !socket.isEstablished }
                let metrics = try await HTTP.get("\(site.base)/metrics").body
                #expect((try PrometheusText(metrics).samples["claw_http_unread_answers_total"] ?? 0) >= 1)
            }
        }

        /// SPEC §5: every request read is answered, also when the client shut
        /// its sending side after the last one (`nc -N`), with answers that
        /// wait for the disk and requests behind them.
        @Test func aHalfClosedConnectionGetsAnAnswerToEveryRequest() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                socket.send(
                    Fast.notification(from: "ann", #"{"command":6}"#) + Fast.notification(from: "ben", #"{"command":6}"#)
                        + Fast.notification(from: "eve", #"{"command":1,"data":"left","serial":1}"#)
                        + Fast.notification(from: "cid", #"{"command":6}"#))
                socket.shutdownWrite()
                let responses = socket.readResponses(4, timeout: .seconds(10))
                try #require(responses.count == 4, "answers: \(responses)")
                #expect(Self.queued(responses[0], position: 1))
                #expect(Self.queued(responses[1], position: 2))
                #expect(Fast.body(responses[2]).contains(#""result":"rejected""#), "the move of a player not playing: refused")
                #expect(Self.queued(responses[3], position: 3))
                #expect(socket.isClosed(within: .seconds(5)))
            }
        }

        @Test func aHalfClosedConnectionOnTheFullPipelineGetsAnAnswerToEveryRequest() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                socket.send(
                    "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n" + Fast.notification(from: "ann", #"{"command":6}"#)
                        + Fast.notification(from: "ben", #"{"command":6}"#))
                socket.shutdownWrite()
                let responses = socket.readResponses(3, timeout: .seconds(10))
                try #require(responses.count == 3, "answers: \(responses)")
                #expect(Self.queued(responses[1], position: 1))
                #expect(Self.queued(responses[2], position: 2))
                #expect(socket.isClosed(within: .seconds(5)))
            }
        }

        /// Another process holding SQLite's write lock on the site's file
        /// (`BEGIN IMMEDIATE`, as any writer does): the gateway's writes wait
        /// for it, and so do the answers that wait for them. SIGKILL lets go.
        static func holdWrites(_ site: E2ESite) async throws -> ChildProcess {
            let holding = site.site.directory.appendingPathComponent("sqlite3.holding")
            let holder = try ChildProcess(
                "/usr/bin/sqlite3", [site.site.database.path, "BEGIN IMMEDIATE;", ".shell touch '\(holding.path)' && exec sleep 60"])
            try await eventually("sqlite3 to hold the write lock") { FileManager.default.fileExists(atPath: holding.path) }
            return holder
        }

        /// SPEC §5, §13: every request read is answered, also when SIGTERM
        /// comes while it is on its way. A copy whose head is still arriving
        /// (the IM service's request split across segments; `Connection:
        /// close` in the part that came, which hands the connection to the
        /// full pipeline) is not closed under it: the rest comes after the
        /// gateway stopped accepting, its answer waits for its write (held
        /// up by another writer of the file), and it is answered.
        @Test(arguments: ["close", "keep-alive"])
        func aCopyInFlightWhenTheGatewayStopsIsAnsweredAfterItsWrite(_ connection: String) async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let gateway = try #require(site.gateway)
                let request = Fast.notification(from: "ann", #"{"command":6}"#, headers: "Connection: \(connection)\r\n")
                let cut = try #require(request.range(of: "Connection: \(connection)\r\n")).upperBound
                let socket = try RawSocket(port: site.site.httpPort)
                socket.send(String(request[..<cut]))
                gateway.signal(SIGTERM)
                // The listening socket closed: the connections have been asked to finish.
                try await eventually("the gateway to stop accepting") { (try? RawSocket(port: site.site.httpPort)) == nil }
                let holder = try await Self.holdWrites(site)
                socket.send(String(request[cut...]))
                try await eventually("the join's write held up") { site.site.logText.contains("Storage write failed") }
                holder.signal(SIGKILL)
                holder.wait()
                let answer = socket.readResponses(1, timeout: .seconds(10)).first
                #expect(answer.map { Fast.body($0) } == #"{"length":1,"position":1,"result":"queued"}"#, "\(answer ?? "closed unanswered")")
                #expect(await gateway.wait(timeout: 15) == 0)
            }
        }

        @Test func sigtermClosesAnIdleKeepAliveConnectionAndExits() async throws {
            let site = try await E2ESite(simulate: false)
            try await site.waitReady()
            let socket = try RawSocket(port: site.site.httpPort)
            socket.send(Fast.notification(from: "ann", #"{"command":6}"#))
            #expect(Self.queued(socket.readResponses(1, timeout: .seconds(10)).first, position: 1))
            let gateway = try #require(site.gateway)
            gateway.signal(SIGTERM)
            #expect(await gateway.wait(timeout: 15) == 0)
            #expect(socket.isClosed(within: .seconds(1)))
            await site.stop()
        }
    }
}
