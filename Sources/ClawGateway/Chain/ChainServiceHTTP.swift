import Hummingbird
import HummingbirdCore
import Logging

/// The HTTP server of a chain service (router, recorder): the gateway's
/// connection guards (open connections in all and per client address, the
/// read deadline, the idle timeout) and its decoder limits, without the
/// ingress's fast path.
enum ChainServiceHTTP {
    static func application(http: HTTPSettings, router: Router<GatewayRequestContext>, logger: Logger) -> some ApplicationProtocol {
        let decoderLimits = HTTPServer.decoderLimits
        let connections = ConnectionLimit(maximum: http.maxConnections, perClient: http.maxConnectionsPerClient, logger: logger)
        return Application(
            router: router,
            server: HTTPServerBuilder { responder in
                GatewayHTTP1Channel(
                    responder: responder, ingress: nil, idleTimeout: http.idleTimeout, readTimeout: http.readTimeout,
                    connections: connections, decoderLimits: decoderLimits, serverName: HTTPServer.serverName)
            },
            configuration: ApplicationConfiguration(address: .hostname(http.host, port: http.port), serverName: HTTPServer.serverName),
            logger: logger)
    }
}
