import Foundation
import Protocol
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// The ingress answered on the event loop (IngressFastPath) beside the
    /// router: over raw sockets, so that requests can be pipelined and
    /// connections watched, against a real gateway.
    @Suite(.serialized) struct FastPathTests {
        /// A signed generic notification as raw HTTP/1.1.
        static func notification(from player: String, _ attach: String, headers extra: String = "") -> String {
            let body = GenericEnvelope.encode(from: player, to: "m1", attach: attach)
            let timestamp = String(Int64(Date().timeIntervalSince1970))
            let signature = Signatures.genericSignature(secret: E2ESite.webhookSecret, timestamp: timestamp, body: body)
            return "POST /v1/notifications HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                + "X-Claw-Timestamp: \(timestamp)\r\nX-Claw-Signature: \(signature)\r\n\(extra)"
                + "Content-Length: \(body.count)\r\n\r\n" + String(decoding: body, as: UTF8.self)
        }

        static func body(_ response: String) -> String {
            response.components(separatedBy: "\r\n\r\n").dropFirst().joined(separator: "\r\n\r\n")
        }

        @Test func pipelinedRequestsAreAnsweredInTheirOrder() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                // Router, fast path (a join: answered after its write), fast path, router.
                socket.send(
                    "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n" + Self.notification(from: "ann", #"{"command":6}"#)
                        + Self.notification(from: "ben", #"{"command":7,"serial":4}"#)
                        // A read route answers only to the gateway's own names (SPEC §5).
                        + "GET /v1/machines/m1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
                let responses = socket.readResponses(4, timeout: .seconds(10))
                #expect(responses.count == 4)
                guard responses.count == 4 else { return }
                #expect(Self.body(responses[0]).contains(#""status":"ok""#))
                #expect(Self.body(responses[1]) == #"{"length":1,"position":1,"result":"queued"}"#)
                #expect(Self.body(responses[2]).contains(#""code":"not_in_queue""#))
                #expect(Self.body(responses[3]).contains(#""accid":"ann""#), "the join was durable before it was answered")
                #expect(responses.allSatisfy { $0.hasPrefix("HTTP/1.1 200") })
                #expect(responses[1].lowercased().contains("server: claw-gateway"))
                #expect(responses[1].lowercased().contains("date: "))
            }
        }

        @Test func aConnectionMayCarryManyNotifications() async throws {
            try await E2ESite.with(game: "max_commands_per_second: 10000") { site in
                try await site.generic(from: "ann", #"{"command":6}"#)
                let session = try await HTTP.get("\(site.base)/v1/machines/m1").json["player"].flatMap { ($0 as? [String: Any])?["session"] as? String }
                try await site.generic(from: "ann", #"{"command":12,"data":"\#(session ?? "")"}"#)
                let socket = try RawSocket(port: site.site.httpPort)
                for serial in 1...300 {
                    socket.send(Self.notification(from: "ann", #"{"command":1,"data":"left","serial":\#(serial)}"#))
                    let answer = socket.readResponses(1, timeout: .seconds(5))
                    guard answer.count == 1, Self.body(answer[0]).contains(#""result":"forwarded""#) else {
                        Issue.record("move \(serial) answered \(answer)")
                        return
                    }
                }
            }
        }

        @Test func aRequestToCloseTheConnectionIsAnsweredAndClosed() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                socket.send(Self.notification(from: "ann", #"{"command":6}"#, headers: "Connection: close\r\n"))
                let responses = socket.readResponses(1, timeout: .seconds(10))
                #expect(responses.first.map(Self.body) == #"{"length":1,"position":1,"result":"queued"}"#)
                #expect(socket.isClosed(within: .seconds(5)))
            }
        }

        @Test func refusalsOnTheFastPathAreTheRoutersAnswers() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let socket = try RawSocket(port: site.site.httpPort)
                var unsigned = Self.notification(from: "ann", #"{"command":6}"#)
                unsigned = unsigned.replacingOccurrences(of: "X-Claw-Signature: ", with: "X-Claw-Signature: 00")
                socket.send(unsigned)
                let refused = socket.readResponses(1, timeout: .seconds(5))
                #expect(refused.first?.hasPrefix("HTTP/1.1 401") == true)
                #expect(refused.first.map(Self.body)?.contains(#""code":"unauthorized""#) == true)
                socket.send(Self.notification(from: "ann", "not json"))
                let invalid = socket.readResponses(1, timeout: .seconds(5))
                #expect(invalid.first?.hasPrefix("HTTP/1.1 422") == true)
                #expect(invalid.first.map(Self.body)?.contains(#""code":"invalid_payload""#) == true)
            }
        }
    }
}
