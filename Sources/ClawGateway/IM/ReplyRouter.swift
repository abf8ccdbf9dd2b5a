import Logging
import Protocol

/// The player channel of the daemon: a reply goes back through the provider
/// its player is an account of (SPEC §5: a player is the pair of provider
/// and account), which the reply carries.
final class ReplyRouter: PlayerChannel {
    private let queues: [String: ReplyQueue]
    /// The providers of the config. A reply for a provider without a queue
    /// (generic without `outbound_url`, or one the config no longer has, for
    /// a player restored from storage) is logged: sent through another
    /// provider it would reach another player.
    private let configured: Set<String>
    private let logged: LoggedReplies
    /// The machines' clock, to turn a reply's deadline into an instant.
    private let clock: GameClock

    init(queues: [String: ReplyQueue], configured: Set<String>, clock: GameClock, logger: Logger) {
        self.queues = queues
        self.configured = configured
        self.clock = clock
        logged = LoggedReplies(logger: logger)
    }

    func send(_ reply: PlayerReply, from machine: MachineConfig) {
        let provider = reply.to.provider
        guard configured.contains(provider), let queue = queues[provider] else {
            GatewayMetrics.reply(provider: configured.contains(provider) ? provider : "none", result: "logged")
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
