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
/// ingress's fast path (``IngressFastPath``) behind the connection-state
/// handler, so that handler still sees every request and response; and two
/// guards: a cap on open connections and a deadline for reading a request.
/// Without an ingress (the chain's router), the same guards and no fast path.
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

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            // Refused here, the connection is closed before anything is read from it.
            let client = ClientAddress(channel.remoteAddress)
            guard connections.admit(client) else {
                channel.close(promise: nil)
                throw TooManyConnections()
            }
            channel.closeFuture.whenComplete { [connections] _ in connections.closed(client) }
            let clock = RequestReadClock(timeout: readTimeout)
            let pipeline = channel.pipeline.syncOperations
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
        var behind: [any ChannelHandler] = [
            HTTP1ToHTTPServerCodec(secure: false), RequestReadClock.Stop(clock),
            HTTPConnectionStateHandler(idleTimeout: idleTimeout, logger: logger),
        ]
        if let ingress { behind.append(IngressFastPath(ingress: ingress, serverName: serverName)) }
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

/// The players' notifications answered on the event loop that read them.
///
/// Hummingbird hands every request to an async task and its response back
/// to the event loop: on the ingress, which is most of the gateway's traffic,
/// that cost more CPU than the gateway's own work (docs/BENCHMARKS.md). This
/// handler answers `POST` to the ingress paths itself, with the same
/// ``Ingress`` the router uses, and passes everything else on to Hummingbird
/// unchanged: other routes, a request that asks to close the connection or
/// expects `100-continue`, and any request that arrives while an earlier one
/// on the connection is still being answered by Hummingbird, so that
/// answers keep the order of the requests. Requests that arrive while a fast
/// answer waits for its write to be durable are held back until it is sent.
final class IngressFastPath: ChannelDuplexHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private enum State {
        case idle
        /// Reading a request this handler answers.
        case reading(Ingress.Route, path: String, headers: [String: String], body: ByteBuffer)
        /// Its answer waits for a write; what arrives meanwhile is held.
        case answering
        /// Passing a request on to Hummingbird, up to its end.
        case passing
        /// The connection is closing (a body over the limit).
        case closing
    }

    private let ingress: Ingress
    private let serverName: String
    private var state = State.idle
    /// Requests passed on whose answer has not gone out yet.
    private var passedOn = 0
    private var held: [HTTPRequestPart] = []

    init(ingress: Ingress, serverName: String) {
        self.ingress = ingress
        self.serverName = serverName
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if case .answering = state {
            held.append(part)
            return
        }
        read(part, context: context)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .end = unwrapOutboundIn(data) { passedOn -= 1 }
        context.write(data, promise: promise)
    }

    private func read(_ part: HTTPRequestPart, context: ChannelHandlerContext) {
        switch (state, part) {
        case (.idle, .head(let head)):
            if passedOn == 0, let (route, path, names) = fastRoute(head) {
                state = .reading(route, path: path, headers: head.headerFields.values(named: names), body: context.channel.allocator.buffer(capacity: 0))
            } else {
                passedOn += 1
                state = .passing
                context.fireChannelRead(wrapInboundOut(part))
            }
        case (.reading(let route, let path, let headers, var body), .body(var chunk)):
            guard body.readableBytes + chunk.readableBytes <= JSONResponse.maxBody else {
                // Refused before the rest is read; the connection cannot be reused.
                state = .closing
                respond(
                    .error(.payloadTooLarge),
                    path: path, context: context, close: true)
                return
            }
            state = .idle  // drop the buffer's other reference before appending
            body.writeBuffer(&chunk)
            state = .reading(route, path: path, headers: headers, body: body)
        case (.reading(let route, let path, let headers, let body), .end):
            state = .answering
            answer(route, path: path, headers: headers, body: body, context: context)
        case (.passing, .end):
            state = .idle
            context.fireChannelRead(wrapInboundOut(part))
        case (.passing, _), (.idle, _):
            context.fireChannelRead(wrapInboundOut(part))
        case (.closing, _), (.reading, .head), (.answering, _):
            break
        }
    }

    /// The route of a request this handler answers itself, with the headers it reads.
    private func fastRoute(_ head: HTTPRequest) -> (Ingress.Route, String, Set<String>)? {
        guard head.method == .post, let path = head.path, let route = ingress.route(path) else { return nil }
        let fields = head.headerFields
        if fields[.expect] != nil { return nil }
        if let connection = fields[.connection], connection.lowercased().contains("close") { return nil }
        switch route {
        case .netease: return (route, path, Ingress.neteaseHeaders)
        case .generic: return (route, path, Ingress.genericHeaders)
        }
    }

    private func answer(_ route: Ingress.Route, path: String, headers: [String: String], body: ByteBuffer, context: ChannelHandlerContext) {
        let result = ingress.handle(route, body: Array(body.readableBytesView), header: { headers[$0] })
        switch result {
        case .now(let answer):
            respond(answer, path: path, context: context)
        case .afterWrite(let ticket, let answer) where ingress.arcade.writer.isDurable(ticket):
            respond(answer(true), path: path, context: context)
        case .afterWrite(let ticket, let answer):
            let bound = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
            ingress.arcade.writer.whenDurable(ticket, timeout: Arcade.durabilityWait, on: context.eventLoop) { durable in
                let (handler, context) = bound.value
                handler.respond(answer(durable), path: path, context: context)
            }
        }
    }

    /// Writes the answer; then reads on what arrived meanwhile.
    private func respond(_ answer: IngressAnswer, path: String, context: ChannelHandlerContext, close: Bool = false) {
        GatewayMetrics.httpRequest(route: path, status: answer.status.code)
        guard context.channel.isActive else { return }
        var fields = HTTPFields()
        fields[.contentType] = "application/json"
        fields[.contentLength] = String(answer.body.count)
        fields[.date] = HTTPDate.now()
        fields[.server] = serverName
        if close { fields[.connection] = "close" }
        context.write(wrapOutboundOut(.head(HTTPResponse(status: answer.status, headerFields: fields))), promise: nil)
        context.write(wrapOutboundOut(.body(context.channel.allocator.buffer(bytes: answer.body))), promise: nil)
        // Not through this handler's own `write`: this answer was never passed on.
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        if close {
            context.close(promise: nil)
            return
        }
        state = .idle
        let parts = held
        held = []
        for part in parts {
            if case .answering = state { held.append(part) } else { read(part, context: context) }
        }
        // What was passed on here is handed to Hummingbird at a read's
        // completion, which does not follow an answer sent after a write.
        if !parts.isEmpty { context.fireChannelReadComplete() }
    }
}

/// The `Date` header's value, made at most once a second.
enum HTTPDate {
    private static let cache = Mutex<(second: Int, text: String)>((-1, ""))

    static func now() -> String {
        var clock = timespec()
        clock_gettime(CLOCK_REALTIME, &clock)
        let second = Int(clock.tv_sec)
        if let cached = cache.withLock({ $0.second == second ? $0.text : nil }) { return cached }
        var time = time_t(second)
        var parts = tm()
        gmtime_r(&time, &parts)
        var buffer = [CChar](repeating: 0, count: 40)
        let count = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
        let text = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        cache.withLock { $0 = (second, text) }
        return text
    }
}
