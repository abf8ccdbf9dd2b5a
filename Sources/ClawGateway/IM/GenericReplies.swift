import AsyncHTTPClient
import Foundation
import NIOCore

/// Replies of the generic provider: the same messages as NetEase's, POSTed
/// as `{"from","to","attach"}` to `im.generic.outbound_url`, signed the way
/// the generic ingress is (`X-Claw-Timestamp`, `X-Claw-Signature`).
struct GenericReplies: ReplyDelivery {
    let settings: GenericSettings
    let url: String
    let client: HTTPClient
    var provider: String { "generic" }

    func deliver(_ reply: OutboundReply) async -> ReplyResult {
        let request = GenericEnvelope.signedRequest(
            url: url, secret: settings.secret, from: reply.machineAccount, to: reply.player, attach: reply.attach)
        do {
            let response = try await client.execute(request, timeout: .nanoseconds(Int64(settings.replyTimeout.seconds * 1e9)))
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

    /// A POST of the envelope to `url`, signed with `secret` (SPEC §5): both
    /// the outbound replies and `notify` send these.
    static func signedRequest(url: String, secret: String, from: String, to: String, attach: String) -> HTTPClientRequest {
        let body = encode(from: from, to: to, attach: attach)
        let timestamp = String(Int64(Date().timeIntervalSince1970))
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: timestampHeader, value: timestamp)
        request.headers.add(name: signatureHeader, value: Signatures.genericSignature(secret: secret, timestamp: timestamp, body: body))
        request.body = .bytes(ByteBuffer(bytes: body))
        return request
    }

    static func encode(from: String, to: String, attach: String) -> [UInt8] {
        let object = ["from": from, "to": to, "attach": attach]
        return Array((try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data("{}".utf8))
    }

    /// Reads an inbound envelope; `attach` may be a string or a JSON object.
    static func decode(_ body: [UInt8]) -> (from: String, to: String, attach: [UInt8])? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any],
            let from = object["from"] as? String, let to = object["to"] as? String
        else { return nil }
        switch object["attach"] {
        case let text as String:
            return (from, to, Array(text.utf8))
        case let value as [String: Any]:
            guard let data = try? JSONSerialization.data(withJSONObject: value) else { return nil }
            return (from, to, Array(data))
        default:
            return nil
        }
    }
}
