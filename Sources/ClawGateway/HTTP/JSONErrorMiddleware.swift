import Hummingbird
import Protocol

/// Turns every error that escapes a route (unknown route, body too large,
/// bad parameters) into a JSON error, and counts requests by route and status.
struct JSONErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let response: Response
        do {
            response = try await next(request, context)
        } catch let refusal as Refusal {
            response = JSONResponse.error(refusal)
        } catch let error as any HTTPResponseError {
            var refused = JSONResponse.error(Self.refusal(for: error.status))
            // The rest of a body over the limit is not read: the connection ends with this answer.
            if error.status == .contentTooLarge { refused.headers[.connection] = "close" }
            response = refused
        } catch {
            response = JSONResponse.error(.failed)
        }
        GatewayMetrics.httpRequest(route: context.endpointPath ?? "unmatched", status: response.status.code)
        return response
    }

    /// What Hummingbird's own errors (no route, a body too large) are refused as.
    static func refusal(for status: HTTPResponse.Status) -> Refusal {
        switch status {
        case .contentTooLarge: .payloadTooLarge
        case .notFound: .noRoute
        case .methodNotAllowed: .wrongMethod
        default: Refusal(status, code: "bad_request", status.reasonPhrase)
        }
    }
}
