import GRDB

/// A result a PC numbered, taken for its game (SPEC §4): its repeat is
/// confirmed again and changes nothing.
struct TakenResult: Sendable, Equatable {
    /// The PC's serial of the result.
    var serial: Int64
    /// The game it ended.
    var session: String
}

/// What a game taken up after a restart (SPEC §13) and the PC's numbered
/// results (SPEC §4) need from the games' records besides what they had:
/// the open game's duplicate-serial window, and the serial of the result
/// that ended a game.
extension GameStore {
    static func registerResumedGames(_ migrator: inout DatabaseMigrator) {
        migrator.registerMigration("v13-resumed-games-serials") { db in
            try db.execute(
                sql: """
                    ALTER TABLE games ADD COLUMN serials TEXT;
                    ALTER TABLE games ADD COLUMN result_serial INTEGER;
                    """)
        }
    }

    /// The open game's serial window as its record keeps it: decimal, comma-separated, oldest first.
    static func serialsText(_ serials: [Int64]) -> String {
        serials.map(String.init).joined(separator: ",")
    }

    /// The serials of ``serialsText(_:)``; what is not a number is skipped.
    static func serials(_ text: String?) -> [Int64] {
        (text ?? "").split(separator: ",").compactMap { Int64($0) }
    }

    /// The numbered result that ended the machine's last game, if it was one.
    static func lastResult(of machine: String, _ db: Database) throws -> TakenResult? {
        guard
            let row = try Row.fetchOne(
                db,
                sql: """
                    SELECT id, result_serial FROM games WHERE machine = ? AND ended_at IS NOT NULL
                    ORDER BY offered_at DESC, rowid DESC LIMIT 1
                    """,
                arguments: [machine]),
            let serial = row["result_serial"] as Int64?
        else { return nil }
        return TakenResult(serial: serial, session: row["id"])
    }
}
