import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle

/// The running parts of one router, wired together from `chain.yaml`.
///
/// `services` are in start order: the replies' HTTP client and queues, the
/// router's link to the cluster (with its beats), then HTTP. The service
/// group stops them in reverse: HTTP stops taking copies first, the link
/// goes next (a copy still waiting is answered 503), and the replies
/// already queued still go out.
struct ChainRouterApp {
    let config: RouterConfig
    let router: ChainRouter
    let services: [any Service]

    /// - Parameters:
    ///   - clock: the heartbeats' and beats' clock; tests pass one they move.
    ///   - players: replaces the IM providers' replies (tests).
    static func build(
        config: RouterConfig, logger: Logger, clock: GameClock = .system, players: (any PlayerChannel)? = nil
    ) throws -> ChainRouterApp {
        RouterMetrics.prepare()
        let replyClient = Gateway.replyHTTPClient(config.im)
        let queues = Gateway.replyQueues(config.im, client: replyClient, logger: logger)
        let channel = players ?? ReplyRouter(queues: queues, configured: config.im.providers, clock: clock, logger: logger)
        let router = try ChainRouter(
            bus: config.bus, receiptTimeout: config.router.receiptTimeout, maxCommandsPerSecond: config.router.maxCommandsPerSecond,
            players: channel, clock: clock, logger: logger)
        let routes = RouterRoutes(router: router, im: config.im, logger: logger, now: clock.wallNow)
        let http = application(config: config, routes: routes, logger: logger)
        var services: [any Service] = [ClientService(client: replyClient)]
        services += players == nil ? queues.values.sorted { $0.delivery.provider < $1.delivery.provider } as [any Service] : []
        services += [RouterService(router: router, clock: clock, logger: logger), http]
        return ChainRouterApp(config: config, router: router, services: services)
    }

    /// Every route; the ingresses and health checks take any `Host`, the rest
    /// is behind an ``AccessGuard`` of its scope, as on a gateway: the reads
    /// (`/v1/sites`, `/metrics`) and the chain's page (`/dashboard`).
    static func routes(config: RouterConfig, routes: RouterRoutes) -> Router<GatewayRequestContext> {
        let router = Router(context: GatewayRequestContext.self)
        router.add(middleware: JSONErrorMiddleware())
        routes.add(ingress: router)
        let access = AccessPolicy(http: config.router.http, section: "router", now: routes.now)
        let reads = router.group().add(middleware: AccessGuard(policy: access, scope: .read))
        routes.add(health: router, reads: reads)
        // The page's own files need only the Host check; the data it shows is /v1/sites, behind the read token.
        ChainDashboardRoutes<GatewayRequestContext>().add(page: router.group().add(middleware: AccessGuard(policy: access, scope: .page)))
        GatewayMetrics.prepare(routes: router.routes.map(\.path.description))
        return router
    }

    /// The HTTP server: the gateway's connection guards (open connections in
    /// all and per client address, the read deadline, the idle timeout), its
    /// decoder limits, without the ingress's fast path (a copy waits on its
    /// site's receipt, off the event loop).
    static func application(config: RouterConfig, routes: RouterRoutes, logger: Logger) -> some ApplicationProtocol {
        let decoderLimits = HTTPServer.decoderLimits
        let http = config.router.http
        let connections = ConnectionLimit(maximum: http.maxConnections, perClient: http.maxConnectionsPerClient, logger: logger)
        return Application(
            router: Self.routes(config: config, routes: routes),
            server: HTTPServerBuilder { responder in
                GatewayHTTP1Channel(
                    responder: responder, ingress: nil, idleTimeout: http.idleTimeout, readTimeout: http.readTimeout,
                    connections: connections, decoderLimits: decoderLimits, serverName: HTTPServer.serverName)
            },
            configuration: ApplicationConfiguration(address: .hostname(http.host, port: http.port), serverName: HTTPServer.serverName),
            logger: logger)
    }

}

/// The router's link as a service: connects at start, a beat round every
/// second on its clock, the copies' receipt deadlines, and on graceful
/// shutdown disconnects.
struct RouterService: Service {
    let router: ChainRouter
    let clock: GameClock
    let logger: Logger

    func run() async throws {
        router.start()
        let clock = clock, router = router
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask { await router.receipts.run() }
                var next = clock.now()
                while !Task.isCancelled {
                    next += .seconds(1)
                    do { try await clock.sleep(next) } catch { break }
                    router.tick()
                }
                group.cancelAll()
            }
        }
        await router.shutdown()
        logger.info("Router's link to the cluster stopped")
    }
}
