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
        let replies = Replies(im: config.im, clock: clock, logger: logger, players: players)
        let router = try ChainRouter(
            bus: config.bus, receiptTimeout: config.router.receiptTimeout, maxCommandsPerSecond: config.router.maxCommandsPerSecond,
            ledgerKey: config.router.ledgerKey, players: replies.channel, clock: clock, logger: logger)
        let routes = RouterRoutes(router: router, im: config.im, logger: logger, now: clock.wallNow)
        let http = HTTPServer.service(router: Self.routes(config: config, routes: routes), http: config.router.http, ingress: nil, logger: logger)
        let services: [any Service] = replies.services + [RouterService(router: router, clock: clock, logger: logger), http]
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
                await clock.tick(every: .seconds(1)) { router.tick() }
                group.cancelAll()
            }
        }
        await router.shutdown()
        logger.info("Router's link to the cluster stopped")
    }
}
