import Hummingbird
import NIOCore

/// A request context that knows the connection the request came on: what
/// routes that give out per-client shares need (SPEC §5).
protocol ConnectionRequestContext: RequestContext {
    /// The client's address as the shares count it; nil for a Unix socket.
    var client: ClientAddress? { get }
    /// Completes when the connection is closed, by either side.
    var connectionClosed: EventLoopFuture<Void> { get }
}

/// The gateway's request context: the request, and the connection it came
/// on, so that what a request holds (a stream's slot) is given back as soon
/// as the client goes, reset or not, rather than at the next write that fails.
struct GatewayRequestContext: ConnectionRequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    private let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }

    var remoteAddress: SocketAddress? { channel.remoteAddress }

    var client: ClientAddress? { ClientAddress(channel.remoteAddress) }

    var connectionClosed: EventLoopFuture<Void> { channel.closeFuture }
}
