import Foundation
import Hummingbird
import Logging
import NIOCore
import Protocol
import ServiceLifecycle

/// The running parts of one recorder, wired together from `recorder.yaml`.
///
/// `services` are in start order: the PostgreSQL client (its connection
/// pool), the recorder's link to the cluster and its writer, then HTTP. The
/// service group stops them in reverse: HTTP first, then the link and the
/// writer (a record in hand is not acknowledged; its site sends it again),
/// the database's connections last.
struct RecorderApp {
    let config: RecorderConfig
    let recorder: ChainRecorder
    let services: [any Service]

    /// - Parameter clock: the retries' and the database watch's clock; tests may pass one they move.
    static func build(config: RecorderConfig, logger: Logger, clock: GameClock = .system) throws -> RecorderApp {
        RecorderMetrics.prepare()
        let store = RecorderStore(url: config.recorder.database, logger: logger)
        let vouchers = VoucherPolicy(key: config.recorder.ledgerKey, maxAge: config.recorder.voucherMaxAge)
        let recorder = try ChainRecorder(bus: config.bus, store: store, vouchers: vouchers, clock: clock, logger: logger)
        let routes = RecorderRoutes(recorder: recorder, logger: logger, now: clock.wallNow, credits: config.credits != nil)
        // The players' prizes, chain-wide (SPEC §15): told to their players through their games' sites.
        let prizes = config.prizes.map { settings in
            ChainPrizes(
                store: store, settings: settings, creditsOn: config.credits != nil, clock: clock, logger: logger,
                notify: { site, notice in recorder.tell(site: site, notice) })
        }
        let http = application(config: config, routes: routes, prizes: prizes, logger: logger)
        let services: [any Service] =
            [store.client, RecorderService(recorder: recorder, logger: logger)] + (prizes.map { [$0] } ?? []) + [http]
        return RecorderApp(config: config, recorder: recorder, services: services)
    }

    /// Every route: the health checks take any `Host`; the reads (history,
    /// reports, `/metrics`) are behind an ``AccessGuard`` of `.read`, and the
    /// page's group (`.page`: `Host` only) is where the charts page is added.
    static func routes(config: RecorderConfig, routes: RecorderRoutes, prizes: ChainPrizes? = nil) -> Router<GatewayRequestContext> {
        let router = Router(context: GatewayRequestContext.self)
        router.add(middleware: JSONErrorMiddleware())
        let access = AccessPolicy(http: config.recorder.http, section: "recorder", now: routes.now)
        let reads = router.group().add(middleware: AccessGuard(policy: access, scope: .read))
        routes.add(health: router, reads: reads)
        routes.add(page: router.group().add(middleware: AccessGuard(policy: access, scope: .page)))
        let admin = !config.recorder.http.hasAdmin ? nil : router.group().add(middleware: AccessGuard(policy: access, scope: .admin))
        if let admin {
            // The chain's trail (SPEC §16): the recorder's own operators' changes, and every site's entries.
            let store = routes.recorder.store
            AuditRoutes<GatewayRequestContext>(read: { try await store.audit($0) }, sites: true).add(admin: admin)
        }
        if let prizes {
            PrizeRoutes<GatewayRequestContext>(keeper: prizes, providers: GatewayMetrics.providers, logger: routes.logger)
                .add(reads: reads, admin: admin)
            if admin != nil {
                OperatorPageRoutes<GatewayRequestContext>.parcels.add(page: router.group().add(middleware: AccessGuard(policy: access, scope: .page)))
            }
        }
        // The chain's wallets (SPEC §11): the payment service's top-ups, the wallets, operators' adjustments.
        if let credits = config.credits {
            CreditsRoutes<GatewayRequestContext>(
                keeper: ChainWallets(store: routes.recorder.store, logger: routes.logger), settings: credits,
                providers: GatewayMetrics.providers, now: routes.now, tell: { _ in }
            ).add(to: router, reads: reads, admin: admin)
        }
        GatewayMetrics.prepare(routes: router.routes.map(\.path.description))
        return router
    }

    /// The HTTP server, as the router's: the gateway's guards, no ingress.
    static func application(
        config: RecorderConfig, routes: RecorderRoutes, prizes: ChainPrizes? = nil, logger: Logger
    ) -> HTTPService<RouterResponder<GatewayRequestContext>> {
        HTTPServer.service(
            router: Self.routes(config: config, routes: routes, prizes: prizes), http: config.recorder.http, ingress: nil, logger: logger)
    }
}

/// The recorder's link and writer as a service: connects at start, writes
/// records as they come and watches the database; on graceful shutdown
/// disconnects.
struct RecorderService: Service {
    let recorder: ChainRecorder
    let logger: Logger

    func run() async throws {
        recorder.start()
        let recorder = recorder
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask { await recorder.watchDatabase() }
                group.addTask { await recorder.run() }
                group.addTask { await recorder.runWallet() }
            }
        }
        await recorder.shutdown()
        logger.info("Recorder's link to the cluster stopped")
    }
}
