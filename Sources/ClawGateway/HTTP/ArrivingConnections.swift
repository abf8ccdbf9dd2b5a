import NIOCore
import Synchronization

/// The connections the server has accepted but not yet handed to a task of
/// its own: between the kernel's accept and the server's loop, each is set
/// up on its event loop (``GatewayHTTP1Channel``) and then passed back
/// through the listening socket's pipeline.
///
/// A graceful stop must not close the listening socket while one is on its
/// way: NIO closes a connection whose setup completes on a closed server,
/// so a copy the kernel had already taken (its client sent it, and waits)
/// would be closed unanswered, and a request that the full pipeline reads
/// (`Connection: close`, chunked) would find no task to answer it. So
/// ``HTTPService`` first stops accepting, then waits until none is on its
/// way (``whenNoneArriving(_:)``), and only then closes the socket and asks
/// every connection to finish (SPEC §5: every request read is answered).
final class ArrivingConnections: Sendable {
    private struct State {
        var arriving: Set<ObjectIdentifier> = []
        var waiters: [@Sendable () -> Void] = []
    }

    private let state = Mutex(State())

    /// A connection was accepted: it is on its way until it is handed over or closed.
    func accepted(_ channel: any Channel) {
        let id = ObjectIdentifier(channel)
        state.withLock { _ = $0.arriving.insert(id) }
        channel.closeFuture.whenComplete { [self] _ in arrived(id) }
    }

    /// The server's loop has it: a task of its own answers it.
    func handedOver(_ channel: any Channel) {
        arrived(ObjectIdentifier(channel))
    }

    /// Calls `done` once no accepted connection is on its way (at once when none is).
    func whenNoneArriving(_ done: @escaping @Sendable () -> Void) {
        let now: Bool = state.withLock { state in
            guard !state.arriving.isEmpty else { return true }
            state.waiters.append(done)
            return false
        }
        if now { done() }
    }

    private func arrived(_ id: ObjectIdentifier) {
        let ready: [@Sendable () -> Void] = state.withLock { state in
            guard state.arriving.remove(id) != nil, state.arriving.isEmpty else { return [] }
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in ready { waiter() }
    }

    /// Goes first in the listening socket's pipeline, where accepted connections come in.
    final class Handler: ChannelInboundHandler {
        typealias InboundIn = any Channel
        typealias InboundOut = any Channel
        private let arriving: ArrivingConnections

        init(_ arriving: ArrivingConnections) {
            self.arriving = arriving
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            arriving.accepted(unwrapInboundIn(data))
            context.fireChannelRead(data)
        }
    }
}
