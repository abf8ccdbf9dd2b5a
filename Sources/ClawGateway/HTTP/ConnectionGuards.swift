import Logging
import NIOCore
import NIOHTTPTypes
import Synchronization

/// How many HTTP connections are open; over `http.max_connections` a new one
/// is closed as it comes, so no client can hold every socket and file
/// descriptor of the gateway.
final class ConnectionLimit: Sendable {
    let maximum: Int
    private let open = Atomic<Int>(0)
    private let warnings = LogLimiter()
    private let logger: Logger

    init(maximum: Int, logger: Logger) {
        self.maximum = maximum
        self.logger = logger
    }

    /// Counts a new connection; false (and not counted) when it is one too many.
    func admit() -> Bool {
        let now = open.add(1, ordering: .relaxed).newValue
        guard now > maximum else { return true }
        open.subtract(1, ordering: .relaxed)
        warnings.log("full") { heldBack in
            logger.warning(
                "HTTP connection closed: too many open",
                metadata: ["http.max_connections": .stringConvertible(maximum), "log.held_back": .stringConvertible(heldBack)])
        }
        return false
    }

    func closed() {
        open.subtract(1, ordering: .relaxed)
    }

    var count: Int { open.load(ordering: .relaxed) }
}

/// The time a request may take to arrive, from its first byte to its last
/// (`http.read_timeout`): a client that trickles a request, its head or its
/// body, is disconnected when it runs out, while the idle timeout only
/// covers connections that send nothing. Two handlers share it: one before
/// the HTTP decoder starts the clock on a request's first bytes, one after
/// it stops the clock at the request's end.
final class RequestReadClock {
    private let timeout: TimeAmount
    private var running: Scheduled<Void>?

    init(timeout: Duration) {
        self.timeout = .nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
    }

    /// Bytes of a request arrived: start the clock if it is not running.
    fileprivate func start(_ context: ChannelHandlerContext) {
        guard running == nil else { return }
        let channel = context.channel
        running = context.eventLoop.scheduleTask(in: timeout) {
            channel.close(promise: nil)
        }
    }

    /// The whole request arrived.
    fileprivate func stop() {
        running?.cancel()
        running = nil
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
            clock.stop()
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
