import Foundation
import HTTPTypes
import Hummingbird
import Logging
import Protocol

/// The ingress (``Ingress``) as Hummingbird routes: what the raw path
/// (``RawIngress``) leaves to the full pipeline, such as a request that asks
/// to close the connection or is chunked, and everything after it on its
/// connection.
struct IngressRoutes<Context: RequestContext>: Sendable {
    let ingress: Ingress

    func add(to router: Router<Context>) {
        for (path, route) in ingress.routes {
            router.post(RouterPath(path)) { request, _ in
                try await handle(request, route: route)
            }
        }
    }

    private func handle(_ request: Request, route: Ingress.Route) async throws -> Response {
        var request = request
        let body = Array(try await request.collectBody(upTo: JSONResponse.maxBody).readableBytesView)
        let headers = request.headers(named: route.headerNames)
        return JSONResponse.make(await ingress.answer(ingress.handle(route, body: body, header: { headers[$0] })))
    }
}

extension Request {
    /// A header by name, case-insensitive.
    func header(_ name: String) -> String? {
        HTTPField.Name(name).flatMap { headers[$0] }
    }

    /// The headers of these lower-case names, in one pass (the first of a repeated one).
    func headers(named names: Set<String>) -> [String: String] {
        headers.values(named: names)
    }
}

extension HTTPFields {
    /// The fields of these lower-case names, in one pass (the first of a repeated one).
    func values(named names: Set<String>) -> [String: String] {
        var found: [String: String] = [:]
        for field in self where names.contains(field.name.canonicalName) && found[field.name.canonicalName] == nil {
            found[field.name.canonicalName] = field.value
        }
        return found
    }
}
