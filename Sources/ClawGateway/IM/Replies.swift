import AsyncHTTPClient
import Logging
import ServiceLifecycle

/// Replies to players, as one service a daemon composes (the gateway and the
/// chain's router alike): the HTTP client they go out through, one
/// ``ReplyQueue`` per configured provider, and the ``ReplyRouter`` that picks
/// the queue of a reply's player (SPEC §5).
///
/// ``services`` are in start order (the client, then the queues); a service
/// group stops them in reverse, so that the queues drain before the client
/// they send through is shut down.
struct Replies {
    /// The client replies go out through; the app server's calls to the IM
    /// provider's API use it too.
    let client: HTTPClient
    /// Where the daemon's parts send replies.
    let channel: any PlayerChannel
    let services: [any Service]

    /// - Parameter players: replaces the providers' queues (tests): nothing is sent over HTTP.
    init(im: IMSettings, clock: GameClock, logger: Logger, players: (any PlayerChannel)? = nil) {
        client = Self.httpClient(im)
        var queues: [String: ReplyQueue] = [:]
        if players == nil {
            if let netease = im.netease {
                queues["netease"] = ReplyQueue(
                    delivery: NetEaseReplies(settings: netease, client: client), concurrency: netease.replyConcurrency,
                    logger: logger)
            }
            if let generic = im.generic, let url = generic.outboundURL {
                queues["generic"] = ReplyQueue(
                    delivery: GenericReplies(settings: generic, url: url, client: client), concurrency: generic.replyConcurrency,
                    logger: logger)
            }
        }
        channel = players ?? ReplyRouter(queues: queues, configured: im.providers, clock: clock, logger: logger)
        services = [ClientService(client: client)] + queues.values.sorted { $0.delivery.provider < $1.delivery.provider }
    }

    /// A reply is never retried, so a refused connection fails it at once:
    /// retrying connections until the reply's timeout let a dead IM API hold
    /// every worker for seconds per reply, starving the replies behind them
    /// (and the stop).
    private static func httpClient(_ im: IMSettings) -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        let timeouts = [im.netease?.replyTimeout, im.generic?.replyTimeout].compactMap { $0 }
        let connect = min(timeouts.max() ?? .seconds(5), .seconds(2))
        configuration.timeout.connect = .milliseconds(Int64(connect.milliseconds))
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }
}

extension IMSettings {
    /// The providers configured.
    var providers: Set<String> {
        Set([netease.map { _ in "netease" }, generic.map { _ in "generic" }].compactMap { $0 })
    }
}

/// Shuts the replies' HTTP client down once the reply queues have stopped
/// (it starts before them, so it stops after them).
struct ClientService: Service {
    let client: HTTPClient

    func run() async throws {
        try? await gracefulShutdown()
        try await client.shutdown()
    }
}
