import Logging
import ServiceLifecycle

/// The chain link as a service: up with the gateway's own MQTT, a tick every
/// second (heartbeat, beat watchdog), game records shipped, down on graceful shutdown. It starts
/// after MQTT and stops before it.
struct ChainLinkService: Service {
    let link: ChainLink
    let clock: GameClock
    let logger: Logger

    func run() async throws {
        link.start()
        let clock = clock, link = link
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                group.addTask { await clock.tick(every: .seconds(1)) { link.tick() } }
                // Game records go out from here, one batch at a time: woken
                // every second and whenever the recorder's acknowledgement
                // makes room (SPEC §10).
                group.addTask {
                    for await _ in link.shippingWakes { await link.ship() }
                }
            }
        }
        await link.shutdown()
        logger.info("Chain link stopped")
    }
}
