import Foundation
import Hummingbird
import Protocol

/// Responses of the HTTP API: always JSON, errors as `{"code","message"}`.
enum JSONResponse {
    static let maxBody = 64 * 1024

    static func make(_ status: HTTPResponse.Status = .ok, _ value: some Encodable) -> Response {
        Response(
            status: status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: JSONCoding.encode(value))))
    }

    /// A refusal's `{"code","message"}`, with `Retry-After` when it has one.
    static func error(_ refusal: Refusal) -> Response {
        var response = Response(
            status: refusal.status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: refusal.body)))
        if let seconds = refusal.retryAfter { response.headers[.retryAfter] = String(seconds) }
        return response
    }
}
