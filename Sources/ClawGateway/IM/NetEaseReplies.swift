import AsyncHTTPClient
import Foundation
import NIOCore
import Protocol

/// Replies through NetEase's server API: `POST <api_base>/msg/sendAttachMsg.action`
/// (SPEC §5), a custom system notification from the machine's account,
/// online only (`save=1`), not routed to other devices.
struct NetEaseReplies: ReplyDelivery {
    let settings: NetEaseSettings
    let client: HTTPClient
    var provider: String { "netease" }

    func deliver(_ reply: OutboundReply) async -> ReplyResult {
        let form = FormEncoding.encode([
            ("from", reply.machineAccount), ("msgtype", "0"), ("to", reply.player), ("attach", reply.attach),
            ("save", "1"), ("option", #"{"route":false,"badge":false}"#),
        ])
        let nonce = Signatures.nonce()
        let curTime = String(Int64(Date().timeIntervalSince1970))
        var request = HTTPClientRequest(url: settings.apiBase + "/msg/sendAttachMsg.action")
        request.method = .POST
        request.headers.add(name: "AppKey", value: settings.appKey)
        request.headers.add(name: "Nonce", value: nonce)
        request.headers.add(name: "CurTime", value: curTime)
        request.headers.add(
            name: "CheckSum", value: Signatures.netEaseAPIChecksum(secret: settings.appSecret, nonce: nonce, curTime: curTime))
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded;charset=utf-8")
        request.body = .bytes(ByteBuffer(string: form))
        do {
            let response = try await client.execute(request, timeout: TimeAmount(settings.replyTimeout))
            let body = try await response.body.collect(upTo: 64 * 1024)
            guard response.status == .ok else { return .failed("HTTP \(response.status.code)") }
            let code = (try? JSONObjectReader.fields(in: body.readableBytesView))?.first { $0.key == "code" }.map { field in
                if case .number(let number) = field.value { number.text } else { "not a number" }
            }
            return code == "200" ? .sent : .failed("code \(code ?? "missing")")
        } catch {
            return .failed(String(describing: error))
        }
    }
}

/// `application/x-www-form-urlencoded`.
enum FormEncoding {
    private static let unreserved = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~")

    static func encode(_ fields: [(String, String)]) -> String {
        fields.map { "\(escape($0.0))=\(escape($0.1))" }.joined(separator: "&")
    }

    static func escape(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: unreserved) ?? ""
    }

    /// Decodes a form body (for the tests' fake NetEase API and for diagnostics).
    static func decode(_ body: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in body.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let key = String(parts[0]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? ""
            let value = parts.count > 1 ? (String(parts[1]).replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? "") : ""
            fields[key] = value
        }
        return fields
    }
}
