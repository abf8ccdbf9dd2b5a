import Foundation

/// A record that decoded and whose fields the database can hold, with its times read.
struct ValidRecord: Sendable {
    var record: ChainRecord
    var offeredAt: Date
    var startedAt: Date?
    var endedAt: Date?

    /// Why `record` cannot be written, or the record ready to write.
    static func check(_ record: ChainRecord) -> Result<ValidRecord, RecordProblem> {
        let game = record.game
        guard record.seq >= 1 else { return .failure(RecordProblem("seq \(record.seq) is not 1 or more")) }
        for (name, value) in [("site", record.site), ("id", game.id), ("machine", game.machine), ("player", game.player), ("provider", game.provider)]
        where value.isEmpty {
            return .failure(RecordProblem("\(name) is empty"))
        }
        guard game.commands >= 0, game.commands <= Int(Int32.max) else {
            return .failure(RecordProblem("commands \(game.commands) is out of range"))
        }
        guard let offered = Timestamp.date(game.offeredAt) else { return .failure(RecordProblem("offered_at is not a timestamp")) }
        func optional(_ name: String, _ text: String?) -> Result<Date?, RecordProblem> {
            guard let text else { return .success(nil) }
            guard let date = Timestamp.date(text) else { return .failure(RecordProblem("\(name) is not a timestamp")) }
            return .success(date)
        }
        switch (optional("started_at", game.startedAt), optional("ended_at", game.endedAt)) {
        case (.failure(let problem), _), (_, .failure(let problem)):
            return .failure(problem)
        case (.success(let started), .success(let ended)):
            return .success(ValidRecord(record: record, offeredAt: offered, startedAt: started, endedAt: ended))
        }
    }
}

struct RecordProblem: Error, Equatable, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
