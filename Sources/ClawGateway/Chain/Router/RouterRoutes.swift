import Foundation
import Hummingbird
import Logging
import NIOCore

/// The router's HTTP routes (SPEC §9): the two ingresses, checked with the
/// gateway's own code (``NetEaseCopy/read(body:header:settings:now:)``,
/// ``Ingress/verifyGeneric(body:header:settings:now:)``) and handed to the
/// ``ChainRouter``; health and readiness; the sites and the metrics behind
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
        if let settings = im.netease {
            ingress.post(RouterPath(settings.callbackPath)) { request, _ in
                let (body, headers) = try await Self.read(request, headers: NetEaseCopy.headerNames)
                RouterMetrics.copies["netease"]?.increment()
                return JSONResponse.make(await netease(body: body, headers: headers, settings: settings))
            }
        }
        if let settings = im.generic {
            ingress.post(RouterPath(Ingress.genericPath)) { request, _ in
                let (body, headers) = try await Self.read(request, headers: Ingress.genericHeaders)
                RouterMetrics.copies["generic"]?.increment()
                return JSONResponse.make(await generic(body: body, headers: headers, settings: settings))
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

    private func netease(body: [UInt8], headers: [String: String], settings: NetEaseSettings) async -> IngressAnswer {
        let received = now()
        let arrived = ContinuousClock.now
        let copy: NetEaseCopy
        do {
            copy = try NetEaseCopy.read(body: body, header: { headers[$0] }, settings: settings, now: received)
        } catch {
            let unauthorized = error.kind == .unauthorized
            RouterMetrics.refused[unauthorized ? .unauthorized : .malformed]?.increment()
            warnRefused(unauthorized ? "netease.unauthorized" : "netease.malformed", "NetEase copy refused", reason: error.message)
            return .error(unauthorized ? .badSignature(error.message) : .badRequest(error.message))
        }
        switch copy {
        case .addressCheck:
            RouterMetrics.local[.addressCheck]?.increment()
            return Ingress.copyAccepted
        case .other:
            RouterMetrics.local[.otherEvent]?.increment()
            return Ingress.copyAccepted
        case .notification(let from, let to, let attach, _):
            return await router.route(
                RouterCopy(
                    provider: "netease", from: from, to: to, attach: Array(attach.utf8), body: body, headers: headers, received: received,
                    arrived: arrived))
        }
    }

    private func generic(body: [UInt8], headers: [String: String], settings: GenericSettings) async -> IngressAnswer {
        let received = now()
        let arrived = ContinuousClock.now
        do throws(Refusal) {
            _ = try Ingress.verifyGeneric(body: body, header: { headers[$0] }, settings: settings, now: received)
        } catch {
            RouterMetrics.refused[.unauthorized]?.increment()
            warnRefused("generic.unauthorized", "Generic notification refused", reason: error.message)
            return .error(error)
        }
        guard let envelope = GenericEnvelope.decode(body) else {
            RouterMetrics.refused[.malformed]?.increment()
            return .error(.badRequest(#"The body must be a JSON object {"from":string,"to":string,"attach":string or object}."#))
        }
        return await router.route(
            RouterCopy(
                provider: "generic", from: envelope.from, to: envelope.to, attach: envelope.attach, body: body, headers: headers,
                received: received, arrived: arrived))
    }

    private func warnRefused(_ kind: String, _ message: Logger.Message, reason: String) {
        refusalLog.warning(kind, message, ["http.reason": .string(reason)], on: logger)
    }
}
