import Foundation
import Hummingbird
import HummingbirdCore
import NIOCore
import Logging

/// The gateway's HTTP server: ingress, read API, health, admin, metrics.
enum HTTPServer {
    struct Parts: Sendable {
        var config: GatewayConfig
        var arcade: Arcade
        var isBrokerConnected: @Sendable () -> Bool
        var metrics: (@Sendable () -> String)?
        var now: @Sendable () -> Date = { Date() }
    }

    static func router(_ parts: Parts, logger: Logger) -> Router<BasicRequestContext> {
        let router = Router()
        router.add(middleware: JSONErrorMiddleware())
        IngressRoutes<BasicRequestContext>(
            arcade: parts.arcade, im: parts.config.im, recentMessages: RecentIDs(), logger: logger, now: parts.now
        ).add(to: router)
        ReadRoutes<BasicRequestContext>(arcade: parts.arcade, isBrokerConnected: parts.isBrokerConnected)
            .add(to: router)
        if let token = parts.config.http.adminToken {
            AdminRoutes<BasicRequestContext>(arcade: parts.arcade, token: token).add(to: router)
        }
        if let metrics = parts.metrics {
            router.get("/metrics") { _, _ in
                Response(
                    status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                    body: ResponseBody(byteBuffer: ByteBuffer(string: metrics())))
            }
        }
        return router
    }

    static func application(_ parts: Parts, logger: Logger) -> some ApplicationProtocol {
        Application(
            router: router(parts, logger: logger),
            server: .http1(
                configuration: HTTP1Channel.Configuration(
                    idleTimeout: .seconds(30),
                    httpDecoderConfiguration: .init(maxHeaderFieldSize: 8 * 1024, maxHeaderListSize: 32 * 1024, maxHeaderFieldCount: 100))),
            configuration: ApplicationConfiguration(
                address: .hostname(parts.config.http.host, port: parts.config.http.port), serverName: "claw-gateway"),
            logger: logger)
    }
}
