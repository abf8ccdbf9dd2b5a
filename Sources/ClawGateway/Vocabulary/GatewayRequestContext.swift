import Hummingbird
import Logging
import NIOCore

/// A request context that knows the connection the request came on: what
/// routes that give out per-client shares need (SPEC §5).
protocol ConnectionRequestContext: RequestContext {
    /// The client the shares count the request against
    /// (``TrustedProxies/client(peer:headers:)``); nil for a Unix socket's.
    var client: ClientAddress? { get }
    /// Completes when the connection is closed, by either side.
    var connectionClosed: EventLoopFuture<Void> { get }
}

/// What ``HTTPService`` makes a request's context from: the connection, and
/// the client the request counts as, decided once per request before any
/// route or middleware sees it.
struct GatewayRequestContextSource: RequestContextSource {
    let channel: any Channel
    let logger: Logger
    let client: ClientAddress?
}

/// The gateway's request context: the request, and the connection it came
/// on, so that what a request holds (a stream's slot) is given back as soon
/// as the client goes, reset or not, rather than at the next write that fails.
struct GatewayRequestContext: ConnectionRequestContext, RemoteAddressRequestContext {
    typealias Source = GatewayRequestContextSource
    var coreContext: CoreRequestContextStorage
    private let channel: any Channel
    let client: ClientAddress?
    /// The operator whose token the ``AccessGuard`` accepted (SPEC §16);
    /// nil on routes that need none.
    var operatorName: String?

    init(source: GatewayRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
        client = source.client
    }

    var remoteAddress: SocketAddress? { channel.remoteAddress }

    var connectionClosed: EventLoopFuture<Void> { channel.closeFuture }
}
