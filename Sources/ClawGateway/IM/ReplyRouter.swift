import Logging
import Protocol
import Synchronization

/// The player channel of the daemon: a player's replies go back through the
/// provider that delivered that player's latest notification (SPEC §5).
final class ReplyRouter: PlayerChannel {
    private let queues: [String: ReplyQueue]
    /// Where replies go for a player not heard from in this run (restored
    /// from storage without a provider that is still configured).
    private let fallback: String?
    private let providers = Mutex<[String: String]>([:])
    private let logged: LoggedReplies

    /// - Parameter queues: by provider name (`netease`, `generic`); a provider
    ///   without a queue (generic without `outbound_url`) has its replies logged.
    init(queues: [String: ReplyQueue], fallback: String?, logger: Logger) {
        self.queues = queues
        self.fallback = fallback
        logged = LoggedReplies(logger: logger)
    }

    func remember(player: String, provider: String) {
        providers.withLock { map in
            if map[player] != provider { map[player] = provider }
        }
    }

    func send(_ message: WireMessage, to player: String, from machine: MachineConfig) {
        let provider = providers.withLock { $0[player] } ?? fallback
        guard let provider, let queue = queues[provider] else {
            GatewayMetrics.reply(provider: provider ?? "none", result: "logged")
            logged.send(message, to: player, from: machine)
            return
        }
        queue.enqueue(OutboundReply(player: player, machineAccount: machine.imAccount, attach: message.encodedString()))
    }
}
