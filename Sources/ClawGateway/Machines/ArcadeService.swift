import Logging
import ServiceLifecycle

/// The machines' games as a service: it owns the arcade's time (the
/// deadlines' loop) and its storage writer, whose reports it reads. It
/// starts before MQTT and stops after it: by the time it stops, no message
/// can reach a machine any more, so it ends the deadlines (nothing fires
/// after this) and the reading of the writer's reports, stops the machines
/// (nothing is published or told after this), lets the writer commit what
/// is queued and closes the SQLite file.
struct ArcadeService: Service {
    let arcade: Arcade
    let logger: Logger

    func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await arcade.runDeadlines() }
            group.addTask { await arcade.runStorageReports() }
            group.addTask { await arcade.runLedgerReports() }
            try? await gracefulShutdown()
            group.cancelAll()
        }
        arcade.stop()
        await arcade.writer.stop()
    }
}
