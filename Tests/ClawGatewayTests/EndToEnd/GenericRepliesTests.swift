import AsyncHTTPClient
import Foundation
import Protocol
import Hummingbird
import Logging
import ServiceLifecycle
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// The generic provider's outbound replies, received by a local HTTP server
    /// that checks their signature the way an app server would: over
    /// "reply." + timestamp + "." + body, never the notification's string.
    @Suite struct GenericRepliesTests {
        @Test func repliesArePostedSignedAndFailuresReported() async throws {
            let secret = "outbound-secret"
            let received = Recorder<(body: String, valid: Bool)>()
            let port = try FreePort.next()
            let router = Router()
            router.post("/claw") { request, _ -> Response in
                var request = request
                let body = Array(try await request.collectBody(upTo: 1 << 16).readableBytesView)
                let timestamp = request.header(GenericEnvelope.timestampHeader) ?? ""
                let signature = request.header(GenericEnvelope.signatureHeader)
                let expected = Signatures.genericReplySignature(secret: secret, timestamp: timestamp, body: body)
                // The same bytes must never pass the ingress's check for a notification.
                let asNotification = Signatures.genericSignature(secret: secret, timestamp: timestamp, body: body)
                received.append((String(decoding: body, as: UTF8.self), signature == expected && signature != asNotification))
                return Response(status: .noContent)
            }
            let app = Application(router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: port)))
            let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [app], logger: Logger(label: "receiver")))
            let server = Task { try await group.run() }
            try await eventually("the receiver to listen") { await HTTP.reachable(port: port) }

            let settings = GenericSettings(
                secret: secret, outboundURL: nil, maxClockSkew: .seconds(300), replyTimeout: .seconds(2), replyConcurrency: 1)
            let reply = OutboundReply(player: "alice", machineAccount: "claw_m1", attach: #"{"command":4,"data":"true"}"#)
            let delivery = GenericReplies(settings: settings, url: "http://127.0.0.1:\(port)/claw", client: .shared)
            #expect(await delivery.deliver(reply) == .sent)
            let first = try #require(received.items.first)
            #expect(first.valid)
            let envelope = try #require(GenericEnvelope.decode(Array(first.body.utf8)))
            #expect(envelope.from == "claw_m1" && envelope.to == "alice")
            #expect(String(decoding: envelope.attach, as: UTF8.self) == #"{"command":4,"data":"true"}"#)

            let missing = GenericReplies(settings: settings, url: "http://127.0.0.1:\(port)/nowhere", client: .shared)
            #expect(await missing.deliver(reply) == .failed("HTTP 404"))

            await group.triggerGracefulShutdown()
            _ = try? await server.value
        }
    }
}
