import Foundation
import Hummingbird
import HummingbirdCore
import NIOCore
import NIOHTTP1
import Logging

/// The gateway's HTTP server: ingress, read API, health, admin, metrics.
enum HTTPServer {
    /// What the routes serve, each given by the gateway's wiring.
    struct Dependencies: Sendable {
        let config: GatewayConfig
        let arcade: Arcade
        /// The one ingress of the gateway (the chain's inbox answers through it too).
        let ingress: Ingress
        let isBrokerConnected: @Sendable () -> Bool
        /// `/metrics`; nil leaves the route out.
        let metrics: (@Sendable () -> String)?
        /// The live feed behind `/v1/stream` and the dashboard; nil leaves them out.
        let feed: ArcadeFeed?
        let uptime: @Sendable () -> Duration
        let now: @Sendable () -> Date
        /// Why the site's chain link is not up (SPEC §9), for `/readyz`; nil when it is or there is none.
        let chainProblem: @Sendable () -> String?
        /// The NetEase demo's app-server API (SPEC §8); nil leaves its routes out.
        let appServer: AppServer?
        /// The players' wallets when games cost credits (SPEC §11); nil leaves their routes out.
        let wallets: Wallets?
        /// The games' clips (SPEC §14); nil leaves their routes out.
        var evidence: EvidenceKeeper? = nil
        /// The players' prizes and their parcels at a site (SPEC §15); nil leaves their routes out.
        var prizes: PrizeDesk? = nil
        var logger = Logger(label: "claw-gateway")
    }

    static func router(_ parts: Dependencies) -> Router<GatewayRequestContext> {
        let router = Router(context: GatewayRequestContext.self)
        router.add(middleware: JSONErrorMiddleware())
        IngressRoutes<GatewayRequestContext>(ingress: parts.ingress).add(to: router)
        // Like the ingress, the app server answers any Host without a token: the demo clients send neither.
        if let appServer = parts.appServer {
            // The demo's prize routes only with secret sids: an account id is no one's proof of who they are (SPEC §8).
            AppServerRoutes<GatewayRequestContext>(
                appServer: appServer, arcade: parts.arcade, wallets: parts.wallets,
                prizes: appServer.settings.sessions == .secret ? parts.prizes : nil
            ).add(to: router)
        }
        // Every route but the ingress and the health checks is behind a guard of its scope.
        let access = AccessPolicy(http: parts.config.http, now: parts.now)
        let reads = router.group().add(middleware: AccessGuard(policy: access, scope: .read))
        ReadRoutes<GatewayRequestContext>(
            arcade: parts.arcade, isBrokerConnected: parts.isBrokerConnected, chainProblem: parts.chainProblem)
            .add(health: router, reads: reads)
        FairnessRoutes<GatewayRequestContext>(arcade: parts.arcade, credits: parts.wallets != nil).add(reads: reads)
        let admin = !parts.config.http.hasAdmin ? nil : router.group().add(middleware: AccessGuard(policy: access, scope: .admin))
        if let admin {
            AdminRoutes<GatewayRequestContext>(arcade: parts.arcade, logger: parts.logger).add(to: admin)
            // The audit trail and corrected results (SPEC §16).
            let store = parts.arcade.writer.store
            AuditRoutes<GatewayRequestContext>(read: { try await store.audit($0) }).add(admin: admin)
            CorrectionRoutes<GatewayRequestContext>(corrections: GameCorrections(arcade: parts.arcade, prizes: parts.prizes, inChain: parts.config.chain != nil), logger: parts.logger)
                .add(admin: admin)
            OperatorPageRoutes<GatewayRequestContext>.audit.add(page: router.group().add(middleware: AccessGuard(policy: access, scope: .page)))
        }
        if let wallets = parts.wallets {
            let arcade = parts.arcade
            CreditsRoutes<GatewayRequestContext>(
                keeper: wallets, settings: wallets.settings, providers: parts.config.im.providers.sorted(), now: parts.now,
                tell: { arcade.tell($0) }
            ).add(to: router, reads: reads, admin: admin)
        }
        if let evidence = parts.evidence {
            EvidenceRoutes<GatewayRequestContext>(arcade: parts.arcade, keeper: evidence).add(reads: reads, admin: admin)
        }
        if parts.config.prizes != nil {
            StockRoutes<GatewayRequestContext>(arcade: parts.arcade, logger: parts.logger).add(reads: reads, admin: admin)
        }
        if let prizes = parts.prizes {
            PrizeRoutes<GatewayRequestContext>(keeper: prizes, providers: parts.config.im.providers.sorted(), logger: parts.logger)
                .add(reads: reads, admin: admin)
            if admin != nil {
                OperatorPageRoutes<GatewayRequestContext>.parcels.add(page: router.group().add(middleware: AccessGuard(policy: access, scope: .page)))
            }
        }
        if let feed = parts.feed {
            DashboardRoutes<GatewayRequestContext>(
                feed: feed, arcade: parts.arcade, gatewayID: parts.config.gateway.id,
                statsInterval: parts.config.gateway.statsInterval, admin: parts.config.http.hasAdmin,
                parcels: parts.prizes != nil && admin != nil, credits: parts.wallets != nil, uptime: parts.uptime, now: parts.now
            ).add(page: router.group().add(middleware: AccessGuard(policy: access, scope: .page)), reads: reads)
        }
        if let metrics = parts.metrics {
            reads.get("/metrics") { _, _ in
                Response(
                    status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                    body: ResponseBody(byteBuffer: ByteBuffer(string: metrics())))
            }
            GatewayMetrics.prepare(routes: router.routes.map(\.path.description))
        }
        return router
    }

    static let serverName = "claw-gateway"

    /// What a request's head may hold: the gateway's and the chain router's alike.
    static var decoderLimits: NIOHTTPDecoderLimitConfiguration {
        var limits = NIOHTTPDecoderLimitConfiguration()
        limits.maxHeaderFieldSize = 8 * 1024
        limits.maxHeaderListSize = 32 * 1024
        limits.maxHeaderFieldCount = 100
        return limits
    }

    /// The server of a role: `router` behind the connection guards of
    /// `http`, with the ingress's raw path when there is one, on `listener`
    /// (the configured address unless systemd passed a socket).
    static func service(
        router: Router<GatewayRequestContext>, http: HTTPSettings, ingress: Ingress?, listener: HTTPListener? = nil, logger: Logger
    ) -> HTTPService<RouterResponder<GatewayRequestContext>> {
        let decoderLimits = decoderLimits
        let connections = ConnectionLimit(
            maximum: http.maxConnections, perClient: http.maxConnectionsPerClient, trustedProxies: http.trustedProxies, logger: logger)
        return HTTPService(
            responder: router.buildResponder(), listener: listener ?? .address(host: http.host, port: http.port), serverName: serverName,
            trustedProxies: http.trustedProxies, logger: logger
        ) { responder in
            GatewayHTTP1Channel(
                responder: responder, ingress: ingress, idleTimeout: http.idleTimeout, readTimeout: http.readTimeout,
                connections: connections, decoderLimits: decoderLimits, serverName: serverName)
        }
    }
}
