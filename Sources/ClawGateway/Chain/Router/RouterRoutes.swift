import Foundation
import Hummingbird
import Logging
import NIOCore

/// The router's HTTP routes (SPEC §9): the two ingresses, verified and read
/// as a site reads them (``Ingress/Route/read(body:header:now:)``) and
/// handed to the ``ChainRouter``; health and readiness; the sites and the metrics behind
/// the read token.
///
/// The address check and events that are no player's notification are
/// answered 200 here, as a gateway answers them. Nothing is deduplicated
/// or checked for replays here: the site does both, with its own memory,
/// and its answer is what the IM service gets.
struct RouterRoutes: Sendable {
    let router: ChainRouter
    let im: IMSettings
    let logger: Logger
    let now: @Sendable () -> Date
    /// Warnings about refused requests, one per reason every 10 s.
    var refusalLog = LogLimiter()

    func add(ingress: Router<GatewayRequestContext>) {
        for (path, route) in Ingress.routes(of: im) {
            ingress.post(RouterPath(path)) { request, _ in
                let (body, headers) = try await Self.read(request, headers: route.headerNames)
                RouterMetrics.copies[route.provider]?.increment()
                return JSONResponse.make(await handle(route, body: body, headers: headers))
            }
        }
    }

    /// - Parameters:
    ///   - health: `/healthz`, `/readyz`: any `Host`, no token.
    ///   - reads: `/v1/sites`, `/metrics`, behind the ``AccessGuard`` of `.read`.
    func add(health: Router<GatewayRequestContext>, reads: RouterGroup<GatewayRequestContext>) {
        health.get("/healthz") { _, _ in
            JSONResponse.make(.ok, ["status": "ok"])
        }
        health.get("/readyz") { _, _ in
            guard let problem = router.problem() else { return JSONResponse.make(.ok, ["status": "ready"]) }
            return JSONResponse.error(.notReady([problem]))
        }
        reads.get("/v1/sites") { _, _ in
            JSONResponse.make(.ok, router.sites.list)
        }
        reads.get("/metrics") { _, _ in
            RouterMetrics.export(router)
            var buffer: [UInt8] = []
            GatewayMetrics.registry.emit(into: &buffer)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: buffer)))
        }
    }

    private static func read(_ request: Request, headers names: Set<String>) async throws -> ([UInt8], [String: String]) {
        var request = request
        let body = Array(try await request.collectBody(upTo: JSONResponse.maxBody).readableBytesView)
        return (body, request.headers(named: names))
    }

    private func handle(_ route: Ingress.Route, body: [UInt8], headers: [String: String]) async -> IngressAnswer {
        let received = now()
        let arrived = ContinuousClock.now
        let request: IngressRequest
        do throws(IngressRefusal) {
            request = try route.read(body: body, header: { headers[$0] }, now: received)
        } catch {
            RouterMetrics.refused[error.reason == .unauthorized ? .unauthorized : .malformed]?.increment()
            refusalLog.warning(error.logKind, error.logMessage, error.shape.metadata(), on: logger)
            return .error(error.refusal)
        }
        switch request {
        case .addressCheck:
            RouterMetrics.local[.addressCheck]?.increment()
            return Ingress.copyAccepted
        case .otherEvent:
            RouterMetrics.local[.otherEvent]?.increment()
            return Ingress.copyAccepted
        case .notification(let notification):
            return await router.route(
                RouterCopy(
                    provider: notification.provider, from: notification.from, to: notification.to, attach: notification.attach, body: body,
                    headers: headers, received: received, arrived: arrived))
        }
    }
}
