import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import ServiceLifecycle

/// The HTTP server of every role (the gateway, the chain's router and
/// recorder): a router's responder behind ``GatewayHTTP1Channel`` (the
/// ingress's raw path, the connection guards), on a socket it binds or one
/// systemd handed it. What Hummingbird's `Application` does to run a
/// router, with the one thing it cannot do: take an inherited socket.
///
/// On graceful shutdown it stops accepting, waits until every connection it
/// has accepted is set up and has its task, then closes the socket (an
/// inherited socket stays open in systemd, which queues new connections for
/// the next start) and lets the open connections finish the requests they
/// are in: a connection taken just before the stop is answered too.
struct HTTPService<Responder: HTTPResponder>: Service
where Responder.Context: InitializableFromSource<GatewayRequestContextSource> {
    let responder: Responder
    let listener: HTTPListener
    let serverName: String
    /// Who may name the client a request is for (`http.trusted_proxies`).
    let trustedProxies: TrustedProxies
    let logger: Logger
    /// The connection setup, given the responder.
    let channel: @Sendable (@escaping HTTPChannelHandler.Responder) -> GatewayHTTP1Channel

    private struct ResponseNotWritten: Error {}

    func run() async throws {
        let responder = responder, logger = logger, serverName = serverName, proxies = trustedProxies
        let child = channel { request, writer, channel in
            let client = proxies.client(peer: channel.remoteAddress, headers: request.headers)
            let context = Responder.Context(source: GatewayRequestContextSource(channel: channel, logger: logger, client: client))
            var response: Response
            do {
                response = try await responder.respond(to: request, context: context)
            } catch let error as HTTPParserError {
                throw error
            } catch {
                logger.debug("Unrecognised error", metadata: ["error.type": "\(error)"])
                response = Response(status: .internalServerError)
            }
            response.headers[.date] = HTTPDate.now()
            response.headers[.server] = serverName
            do {
                try await writer.write(response: response.head, body: response.body)
            } catch is HTTPParserError {
                // Not thrown as it is: a parser error is answered 400, after this answer.
                throw ResponseNotWritten()
            }
        }
        let group = MultiThreadedEventLoopGroup.singleton
        let quiescing = ServerQuiescingHelper(group: group)
        let arriving = ArrivingConnections()
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(ChannelOptions.backlog, value: 256)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(ChannelOptions.allowRemoteHalfClosure, value: true)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiescing.makeServerChannelHandler(channel: channel))
                    try channel.pipeline.syncOperations.addHandler(ArrivingConnections.Handler(arriving))
                }
            }
        let server: NIOAsyncChannel<GatewayHTTP1Channel.Value, Never>
        switch listener {
        case .address(let host, let port):
            server = try await bootstrap.bind(host: host, port: port, serverBackPressureStrategy: nil) { child.setup(channel: $0, logger: logger) }
            logger.info("HTTP server listening", metadata: ["http.address": "\(host):\(server.channel.localAddress?.port ?? port)"])
        case .inherited(let descriptor):
            server = try await bootstrap.bind(descriptor, serverBackPressureStrategy: nil) { child.setup(channel: $0, logger: logger) }
            logger.info(
                "HTTP server listening on the socket systemd passed",
                metadata: ["http.address": "\(server.channel.localAddress.map { "\($0)" } ?? "fd \(descriptor)")"])
        case .bound(let descriptor, let address):
            server = try await bootstrap.bind(descriptor, serverBackPressureStrategy: nil) { child.setup(channel: $0, logger: logger) }
            logger.info("HTTP server listening", metadata: ["http.address": .string(address)])
        }
        await withGracefulShutdownHandler {
            await withDiscardingTaskGroup { connections in
                do {
                    try await server.executeThenClose { inbound in
                        for try await connection in inbound {
                            arriving.handedOver(connection.channel)
                            connections.addTask { await child.handle(value: connection, logger: logger) }
                        }
                    }
                } catch {
                    logger.error("HTTP server stopped accepting", metadata: ["error.message": "\(error)"])
                }
            }
        } onGracefulShutdown: {
            // Accept no more; close the socket and quiesce the connections once
            // every connection already accepted has its task (ArrivingConnections).
            server.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in
                arriving.whenNoneArriving { quiescing.initiateShutdown(promise: nil) }
            }
        }
        logger.info("HTTP server stopped")
    }
}
