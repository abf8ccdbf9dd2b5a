import ArgumentParser

// MARK: Records

/// `claw-bench records`: how fast one recorder writes a site's game records
/// into PostgreSQL (SPEC §10), and how long a site's backlog takes to catch up.
struct RecordsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "records",
        abstract: "Records a second one recorder writes, and a site's backlog catching up (PostgreSQL, a broker, a recorder and a site it starts)."
    )

    func run() async throws {
        throw BenchError("records: not built yet")
    }
}
