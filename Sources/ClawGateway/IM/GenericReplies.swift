import AsyncHTTPClient
import Foundation
import NIOCore
import Protocol

/// Replies of the generic provider: the same messages as NetEase's, POSTed
/// as `{"from","to","attach"}` to `im.generic.outbound_url`, with
/// `X-Claw-Timestamp` and `X-Claw-Signature` like the ingress, but signed
/// over `"reply." + timestamp + "." + body` (SPEC §5) so that a reply can
/// never pass for a notification.
struct GenericReplies: ReplyDelivery {
    let settings: GenericSettings
    let url: String
    let client: HTTPClient
    var provider: String { "generic" }

    func deliver(_ reply: OutboundReply) async -> ReplyResult {
        let request = GenericEnvelope.signedRequest(
            url: url, secret: settings.secret, from: reply.machineAccount, to: reply.player, attach: reply.attach, as: .reply)
        do {
            let response = try await client.execute(request, timeout: TimeAmount(settings.replyTimeout))
            _ = try await response.body.collect(upTo: 64 * 1024)
            return (200..<300).contains(response.status.code) ? .sent : .failed("HTTP \(response.status.code)")
        } catch {
            return .failed(String(describing: error))
        }
    }
}

/// The JSON the generic webhook carries in both directions: `{"from","to","attach"}`.
enum GenericEnvelope {
    static let timestampHeader = "X-Claw-Timestamp"
    static let signatureHeader = "X-Claw-Signature"

    /// What a signed envelope is: each is signed over a different string.
    enum Purpose {
        /// A player's notification to the gateway (`notify`, tests).
        case notification
        /// A reply to a player from the gateway.
        case reply
    }

    /// A POST of the envelope to `url`, signed with `secret` (SPEC §5).
    /// `id`, when given, goes into the envelope: two notifications of the
    /// same words within a second are then two signed bodies, not a replay
    /// (`notify` gives each call its own).
    static func signedRequest(
        url: String, secret: String, from: String, to: String, attach: String, id: String? = nil, as purpose: Purpose = .notification
    ) -> HTTPClientRequest {
        let body = encode(from: from, to: to, attach: attach, id: id)
        let timestamp = String(Int64(Date().timeIntervalSince1970))
        let signature =
            switch purpose {
            case .notification: Signatures.genericSignature(secret: secret, timestamp: timestamp, body: body)
            case .reply: Signatures.genericReplySignature(secret: secret, timestamp: timestamp, body: body)
            }
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: timestampHeader, value: timestamp)
        request.headers.add(name: signatureHeader, value: signature)
        request.body = .bytes(ByteBuffer(bytes: body))
        return request
    }

    static func encode(from: String, to: String, attach: String, id: String? = nil) -> [UInt8] {
        var fields: [(String, JSONObjectWriter.Value)] = [("from", .string(from)), ("to", .string(to)), ("attach", .string(attach))]
        if let id { fields.append(("id", .string(id))) }
        return JSONObjectWriter.object(fields)
    }

    /// Reads an inbound envelope; `attach` may be a string or a JSON object,
    /// whose bytes are taken as they came.
    static func decode(_ body: [UInt8]) -> (from: String, to: String, attach: [UInt8])? {
        guard let fields = try? JSONObjectReader.fields(in: body) else { return nil }
        func value(_ key: String) -> JSONValue? { fields.first { $0.key == key }?.value }
        guard case .string(let from)? = value("from"), case .string(let to)? = value("to") else { return nil }
        switch value("attach") {
        case .string(let text)?:
            return (from, to, Array(text.utf8))
        case .object(let range)?:
            return (from, to, Array(body[range]))
        default:
            return nil
        }
    }
}
