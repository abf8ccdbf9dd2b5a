import Foundation
import HTTPTypes
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import NIOHTTPTypes
import NIOHTTPTypesHTTP1
import Synchronization

/// HTTP/1.1 as Hummingbird's `HTTP1Channel` sets a connection up, with the
/// ingress's raw path (``RawIngress``) first, and the guards: a cap on open
/// connections, a deadline for reading a request, and a bound on the answers
/// a client leaves unread. Without an ingress (the chain's router), the same
/// guards and NIO's HTTP/1 codec from the first byte.
struct GatewayHTTP1Channel: ServerChildChannel, HTTPChannelHandler {
    typealias Value = NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>

    let responder: HTTPChannelHandler.Responder
    let ingress: Ingress?
    let idleTimeout: Duration
    let readTimeout: Duration
    let connections: ConnectionLimit
    let decoderLimits: NIOHTTPDecoderLimitConfiguration
    let serverName: String

    private struct TooManyConnections: Error {}

    /// Unsent answers past `high` make the connection unwritable: nothing more
    /// is read from it until they are down to `low` (SPEC §5: 256 KiB).
    static let writeBufferWaterMark = ChannelOptions.Types.WriteBufferWaterMark(low: 128 * 1024, high: 256 * 1024)

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            // Refused here, the connection is closed before anything is read from it.
            let client = connections.share(of: channel.remoteAddress)
            guard connections.admit(client) else {
                channel.close(promise: nil)
                throw TooManyConnections()
            }
            channel.closeFuture.whenComplete { [connections] _ in connections.closed(client) }
            try channel.syncOptions?.setOption(ChannelOptions.writeBufferWaterMark, value: Self.writeBufferWaterMark)
            let clock = RequestReadClock(timeout: readTimeout)
            let pipeline = channel.pipeline.syncOperations
            try pipeline.addHandler(UnreadAnswers(timeout: readTimeout))
            try pipeline.addHandler(RequestReadClock.Start(clock))
            if let ingress {
                // Starts on the raw path; the full pipeline goes in behind it when needed.
                let raw = RawIngress(ingress: ingress, clock: clock, idleTimeout: idleTimeout, serverName: serverName) { context in
                    try addHTTPHandlers(context.pipeline.syncOperations, after: context.handler, clock: clock, logger: logger)
                }
                try pipeline.addHandler(raw)
            } else {
                try addHTTPHandlers(pipeline, after: nil, clock: clock, logger: logger)
            }
            return try NIOAsyncChannel(wrappingChannelSynchronously: channel, configuration: .init(isOutboundHalfClosureEnabled: true))
        }
    }

    /// NIO's HTTP/1 codec and the handlers behind it: at the end of the
    /// pipeline, or behind the raw ingress when it hands the connection over.
    private func addHTTPHandlers(
        _ pipeline: ChannelPipeline.SynchronousOperations, after raw: (any ChannelHandler)?, clock: RequestReadClock, logger: Logger
    ) throws {
        let behind: [any ChannelHandler] = [
            HTTP1ToHTTPServerCodec(secure: false), RequestReadClock.Stop(clock), QuiesceBetweenRequests(clock),
            HTTPConnectionStateHandler(idleTimeout: idleTimeout, logger: logger), CloseAfterAnswer(),
        ]
        let configure = { (position: ChannelPipeline.SynchronousOperations.Position) in
            try pipeline.configureHTTPServerPipeline(
                position: position, withPipeliningAssistance: false, withErrorHandling: false, withOutboundHeaderValidation: false,
                withEncoderConfiguration: .init(), withDecoderLimitConfiguration: decoderLimits)
        }
        if let raw {
            try pipeline.addHandlers(behind, position: .after(raw))
            try configure(.after(raw))
        } else {
            try configure(.last)
            try pipeline.addHandlers(behind, position: .last)
        }
    }

    func handle(value: Value, logger: Logger) async {
        await handleHTTP(asyncChannel: value, logger: logger)
    }
}

/// Closes the connection once an answer that says `Connection: close` is on
/// the socket: a body over the limit (413) is refused before the rest is
/// read, and a connection whose request was cut off cannot be reused.
/// Hummingbird closes only when the request asked for it.
final class CloseAfterAnswer: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart
    private var closing = false

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let head):
            if head.headerFields[.connection]?.lowercased() == "close" { closing = true }
            context.write(data, promise: promise)
        case .end where closing:
            let written = promise ?? context.eventLoop.makePromise()
            context.writeAndFlush(data, promise: written)
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            written.futureResult.whenComplete { _ in bound.value.close(promise: nil) }
        case .body, .end:
            context.write(data, promise: promise)
        }
    }
}

/// A graceful stop closes a connection between requests, never under one
/// that is arriving. Hummingbird's `HTTPConnectionStateHandler` closes at
/// once when no request is in progress, and it counts a request from its
/// decoded head: a request whose first bytes came but not yet its whole
/// head (a copy the raw path handed over at its `Connection: close` line,
/// the rest of it still on the way) would be closed unanswered. So the stop
/// (`ChannelShouldQuiesceEvent`) is held here while a request's bytes have
/// come (``RequestReadClock`` runs) and its head has not, and passed on with
/// that head, after which the state handler waits for its answer. A head
/// that never comes whole is cut off by the read clock.
final class QuiesceBetweenRequests: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    private let clock: RequestReadClock
    /// The head of the request being read has come (and its end not yet).
    private var inRequest = false
    private var held = false

    init(_ clock: RequestReadClock) {
        self.clock = clock
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head: inRequest = true
        case .body: break
        case .end: inRequest = false
        }
        context.fireChannelRead(data)
        if held, inRequest {
            held = false
            context.fireUserInboundEventTriggered(ChannelShouldQuiesceEvent())
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent, clock.isRunning, !inRequest {
            held = true
            return
        }
        context.fireUserInboundEventTriggered(event)
    }
}
