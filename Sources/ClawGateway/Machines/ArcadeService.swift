import Logging
import ServiceLifecycle

/// The machines' games as a service. It starts before MQTT and stops after
/// it: by the time it stops, no message can reach a machine any more, so it
/// ends the timers and closes the SQLite file.
struct ArcadeService: Service {
    let arcade: Arcade
    let store: GameStore
    let logger: Logger

    func run() async throws {
        try? await gracefulShutdown()
        arcade.stop()
        do {
            try store.close()
            logger.info("Storage closed", metadata: ["storage.path": .string(store.path)])
        } catch {
            logger.error("Storage not closed cleanly", metadata: ["error": .string(error.description)])
        }
    }
}
