import Logging
import Protocol

/// Replies that go nowhere but the log: the local demo's player channel, and
/// the generic provider when no `outbound_url` is configured.
struct LoggedReplies: PlayerChannel {
    let logger: Logger

    func send(_ reply: PlayerReply, from machine: MachineConfig) {
        logger.info(
            "Reply to player",
            metadata: [
                "player.accid": .string(reply.to.accid), "machine.id": .string(machine.id),
                "im.attach": .string(reply.message.encodedString()),
            ])
    }
}
