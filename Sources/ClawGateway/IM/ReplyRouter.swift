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

    init(queues: [String: ReplyQueue], configured: Set<String>, fallback: String?, logger: Logger) {
        self.queues = queues
        self.configured = configured
        self.fallback = fallback
        logged = LoggedReplies(logger: logger)
    }

    func send(_ reply: PlayerReply, from machine: MachineConfig) {
        let provider = configured.contains(reply.to.provider) ? reply.to.provider : fallback
        guard let provider, let queue = queues[provider] else {
            GatewayMetrics.reply(provider: provider ?? "none", result: "logged")
            logged.send(reply, from: machine)
            return
        }
        queue.enqueue(OutboundReply(player: reply.to.accid, machineAccount: machine.imAccount, attach: reply.message.encodedString()))
    }
}
