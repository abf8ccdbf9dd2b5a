import Logging
import Protocol

/// The player channel of the daemon: a reply goes back through the provider
/// that delivered the player's notification to the machine (SPEC §5), which
/// the reply carries.
final class ReplyRouter: PlayerChannel {
    private let queues: [String: ReplyQueue]
    /// The providers of the config; a provider among them without a queue
    /// (generic without `outbound_url`) has its replies logged.
    private let configured: Set<String>
    /// Where replies go for a provider the config no longer has (a player
    /// restored from storage after the config changed).
    private let fallback: String?
    private let logged: LoggedReplies
    /// The machines' clock, to turn a reply's deadline into an instant.
    private let clock: GameClock

    init(queues: [String: ReplyQueue], configured: Set<String>, fallback: String?, clock: GameClock, logger: Logger) {
        self.queues = queues
        self.configured = configured
        self.fallback = fallback
        self.clock = clock
        logged = LoggedReplies(logger: logger)
    }

    func send(_ reply: PlayerReply, from machine: MachineConfig) {
        let provider = configured.contains(reply.to.provider) ? reply.to.provider : fallback
        guard let provider, let queue = queues[provider] else {
            GatewayMetrics.reply(provider: provider ?? "none", result: "logged")
            logged.send(reply, from: machine)
            return
        }
        let expires = reply.expires.map { ContinuousClock.now.advanced(by: $0 - clock.now()) }
        queue.enqueue(
            OutboundReply(
                player: reply.to.accid, machineAccount: machine.imAccount, attach: reply.message.encodedString(),
                kind: ReplyKind(reply), expires: expires))
    }
}
