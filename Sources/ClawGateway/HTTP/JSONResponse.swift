import Foundation
import Hummingbird

/// Responses of the HTTP API: always JSON, errors as `{"code","message"}`.
enum JSONResponse {
    static let maxBody = 64 * 1024

    static func make(_ status: HTTPResponse.Status = .ok, _ value: some Encodable) -> Response {
        let data = (try? encoder.encode(value)) ?? Data("{}".utf8)
        return Response(
            status: status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// The ingress's answer as a response of the router.
    static func make(_ answer: IngressAnswer) -> Response {
        Response(
            status: answer.status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: answer.body)))
    }

    static func error(_ status: HTTPResponse.Status, code: String, _ message: String) -> Response {
        make(status, APIError(code: code, message: message))
    }

    private static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}

/// The body of every 4xx and 5xx.
struct APIError: Codable, Equatable {
    var code: String
    var message: String
}

/// Turns every error that escapes a route (unknown route, body too large,
/// bad parameters) into a JSON error, and counts requests by route and status.
struct JSONErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let response: Response
        do {
            response = try await next(request, context)
        } catch let failure as APIFailure {
            response = try failure.response(from: request, context: context)
        } catch let error as any HTTPResponseError {
            response = Self.response(for: error.status)
        } catch {
            response = JSONResponse.error(.internalServerError, code: "internal_error", "The gateway failed to handle the request.")
        }
        GatewayMetrics.httpRequest(route: context.endpointPath ?? "unmatched", status: response.status.code)
        return response
    }

    static func response(for status: HTTPResponse.Status) -> Response {
        switch status {
        case .contentTooLarge:
            JSONResponse.make(IngressAnswer.payloadTooLarge)
        case .notFound:
            JSONResponse.error(status, code: "not_found", "No such route.")
        case .methodNotAllowed:
            JSONResponse.error(status, code: "method_not_allowed", "This route does not take that method.")
        default:
            JSONResponse.error(status, code: "bad_request", status.reasonPhrase)
        }
    }
}
