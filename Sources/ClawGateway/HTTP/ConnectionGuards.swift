import Logging
import NIOCore
import NIOHTTPTypes
import Prometheus
import Synchronization

/// How many HTTP connections are open, in all and per client address: over
/// `http.max_connections`, or over `http.max_connections_per_client` from
/// one client, a new connection is closed as it comes, without touching any
/// other. So no client can hold every socket and file descriptor of the
/// gateway, nor the slots the IM service's copies need. A connection counts
/// against its peer: no header has been read when it is admitted. A trusted
/// proxy's connections have no share of their own to exceed (every client
/// behind the proxy comes through them), only the whole.
final class ConnectionLimit: Sendable {
    let maximum: Int
    let perClient: Int
    let trustedProxies: TrustedProxies
    private struct Open {
        var all = 0
        var byClient: [ClientAddress: Int] = [:]
    }

    private let open = Mutex(Open())
    private let warnings = LogLimiter()
    private let logger: Logger

    init(maximum: Int, perClient: Int, trustedProxies: TrustedProxies = .none, logger: Logger) {
        self.maximum = maximum
        self.perClient = perClient
        self.trustedProxies = trustedProxies
        self.logger = logger
        _ = (ConnectionRefusals.all, UnreadAnswersMetric.stalled)  // at 0 from the first scrape
    }

    /// Whose share a connection from `peer` counts against: nil for a trusted proxy.
    func share(of peer: SocketAddress?) -> ClientAddress? {
        trustedProxies.connectionShare(peer: peer)
    }

    /// Counts a new connection from `client`; false (and not counted) when it is one too many.
    func admit(_ client: ClientAddress?) -> Bool {
        enum Refusal { case full, overShare }
        let refusal: Refusal? = open.withLock { open in
            guard open.all < maximum else { return .full }
            if let client {
                let mine = open.byClient[client, default: 0]
                guard mine < perClient else { return .overShare }
                open.byClient[client] = mine + 1
            }
            open.all += 1
            return nil
        }
        switch refusal {
        case nil:
            return true
        case .full:
            ConnectionRefusals.maxConnections.increment()
            warnings.warning("full", "HTTP connection closed: too many open", ["http.max_connections": .stringConvertible(maximum)], on: logger)
        case .overShare:
            ConnectionRefusals.perClient.increment()
            warnings.warning(
                "over_share", "HTTP connection closed: over the client's share",
                [
                    "http.client": .stringConvertible(client?.description ?? "-"),
                    "http.max_connections_per_client": .stringConvertible(perClient),
                ], on: logger)
        }
        return false
    }

    /// A connection ``admit(_:)`` counted has closed.
    func closed(_ client: ClientAddress?) {
        open.withLock { open in
            open.all -= 1
            guard let client, let mine = open.byClient[client] else { return }
            open.byClient[client] = mine > 1 ? mine - 1 : nil
        }
    }

    var count: Int { open.withLock { $0.all } }

    /// Connections open from `client`.
    func count(from client: ClientAddress) -> Int { open.withLock { $0.byClient[client, default: 0] } }
}

/// `claw_http_connections_refused_total`, by why: made with the guards,
/// so that a scrape shows both reasons at 0 before anything was refused.
enum ConnectionRefusals {
    static let maxConnections = counter("max_connections")
    static let perClient = counter("per_client")
    static let all = [maxConnections, perClient]

    private static func counter(_ reason: String) -> Counter {
        GatewayMetrics.registry.makeCounter(
            descriptor: MetricNameDescriptor(
                namespace: "claw", metricName: "http_connections_refused", unitName: "total",
                helpText: "HTTP connections closed as they came: over http.max_connections, or over the client address's http.max_connections_per_client."),
            labels: [("reason", reason)])
    }
}

/// The time a request may take to arrive, from its first byte to its last
/// (`http.read_timeout`): a client that trickles a request, its head or its
/// body, is disconnected when it runs out, while the idle timeout only
/// covers connections that send nothing. Two handlers share it: one before
/// the HTTP decoder starts the clock on a request's first bytes, one after
/// it stops the clock at the request's end.
final class RequestReadClock {
    private let timer: ConnectionTimer

    init(timeout: Duration) {
        timer = ConnectionTimer(timeout: timeout)
    }

    /// Bytes of a request arrived: start the clock if it is not running.
    func start(_ context: ChannelHandlerContext) {
        guard !timer.isArmed else { return }
        timer.arm(context)
    }

    /// Bytes of a request came and its end has not yet.
    var isRunning: Bool { timer.isArmed }

    /// The whole request arrived.
    func stop() {
        timer.disarm()
    }

    /// The connection has ended.
    func cancel() {
        timer.cancel()
    }

    /// Goes first in the pipeline, where the bytes come in.
    final class Start: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = ByteBuffer
        typealias InboundOut = ByteBuffer
        private let clock: RequestReadClock

        init(_ clock: RequestReadClock) {
            self.clock = clock
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            clock.start(context)
            context.fireChannelRead(data)
        }

        func channelInactive(context: ChannelHandlerContext) {
            clock.cancel()
            context.fireChannelInactive()
        }
    }

    /// Goes after the HTTP decoding, where a request's end is seen.
    final class Stop: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = HTTPRequestPart
        typealias InboundOut = HTTPRequestPart
        private let clock: RequestReadClock

        init(_ clock: RequestReadClock) {
            self.clock = clock
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            if case .end = unwrapInboundIn(data) { clock.stop() }
            context.fireChannelRead(data)
        }
    }
}

/// A client that does not read its answers is not read from either, and not
/// for long (SPEC §5): the channel's write buffer water mark
/// (``GatewayHTTP1Channel/writeBufferWaterMark``) makes the connection
/// unwritable while its unsent answers are over 256 KiB, the raw ingress and
/// Hummingbird's async channel stop reading then, and this handler closes a
/// connection that stays unwritable for `http.read_timeout`.
final class UnreadAnswers: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    private let timer: ConnectionTimer

    init(timeout: Duration) {
        timer = ConnectionTimer(timeout: timeout)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(data)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable {
            timer.disarm()
        } else {
            UnreadAnswersMetric.stalled.increment()
            timer.arm(context)
        }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer.cancel()
        context.fireChannelInactive()
    }
}

/// `claw_http_unread_answers_total`: times a connection's unsent answers went over the water mark.
enum UnreadAnswersMetric {
    static let stalled = GatewayMetrics.registry.makeCounter(
        descriptor: MetricNameDescriptor(
            namespace: "claw", metricName: "http_unread_answers", unitName: "total",
            helpText: "Times an HTTP connection's unsent answers went over 256 KiB (the client does not read them): it is not read from until they go out, and closed after http.read_timeout."))
}

/// Closes a connection when a deadline passes: the request read clock's,
/// the raw ingress's idle timeout. Arming and disarming it, once or twice
/// for every request, only sets a deadline; one task on the event loop at
/// a time looks at it when it is due and schedules itself again for a
/// deadline that moved, so a busy connection costs no timer per request.
final class ConnectionTimer {
    private let timeout: TimeAmount
    private var deadline: NIODeadline?
    private var task: Scheduled<Void>?

    init(timeout: Duration) {
        self.timeout = TimeAmount(timeout)
    }

    var isArmed: Bool { deadline != nil }

    /// Closes the connection `timeout` from now, unless disarmed or armed again before.
    /// A closed connection arms nothing: its task would hold the channel until it fired.
    func arm(_ context: ChannelHandlerContext) {
        guard context.channel.isActive else { return }
        let due = NIODeadline.now() + timeout
        deadline = due
        if task == nil { schedule(at: due, channel: context.channel, loop: context.eventLoop) }
    }

    func disarm() {
        deadline = nil
    }

    /// Disarms it and drops its task: the connection has ended.
    func cancel() {
        deadline = nil
        task?.cancel()
        task = nil
    }

    private func schedule(at due: NIODeadline, channel: any Channel, loop: any EventLoop) {
        task = loop.assumeIsolated().scheduleTask(deadline: due) { [self] in
            task = nil
            guard let deadline else { return }
            if deadline <= .now() {
                self.deadline = nil
                channel.close(promise: nil)
            } else {
                schedule(at: deadline, channel: channel, loop: loop)
            }
        }
    }
}
