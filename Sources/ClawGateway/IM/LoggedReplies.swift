import Logging
import Protocol

/// Replies that go nowhere but the log: the local demo's player channel, and
/// the generic provider when no `outbound_url` is configured.
struct LoggedReplies: PlayerChannel {
    let logger: Logger

    func send(_ message: WireMessage, to player: String, from machine: MachineConfig) {
        logger.info(
            "Reply to player",
            metadata: [
                "player.accid": .string(player), "machine.id": .string(machine.id),
                "im.attach": .string(message.encodedString()),
            ])
    }
}
