import Foundation
import Protocol

/// A record that decoded and whose fields the database can hold, with its times read.
struct ValidRecord: Sendable {
    var record: ChainRecord
    var offeredAt: Date
    var startedAt: Date?
    var endedAt: Date?
    /// When its prize was won, if the game made one (SPEC §15).
    var prizeWonAt: Date? {
        record.game.prize.flatMap { Timestamp.date($0.wonAt) }
    }

    static let maxEpochBytes = ChainRecord.maxEpochBytes

    /// Every text field's longest value, in UTF-8 bytes (SPEC §10: every
    /// field has a limit): what a gateway itself writes, with room to spare.
    static let limits: [(name: String, bytes: Int)] = [
        ("site", 64), ("epoch", maxEpochBytes), ("id", 128), ("machine", 64), ("player", PlayerText.maxAccountBytes), ("provider", 16),
        ("nick", PlayerRequest.maxNickBytes),
    ]

    /// Why `record` cannot be written, or the record ready to write.
    static func check(_ record: ChainRecord) -> Result<ValidRecord, RecordProblem> {
        let game = record.game
        guard record.seq >= 1 else { return .failure(RecordProblem("seq \(record.seq) is not 1 or more")) }
        let values = [
            "site": record.site, "epoch": record.epoch, "id": game.id, "machine": game.machine, "player": game.player,
            "provider": game.provider, "nick": game.nick,
        ]
        for (name, value) in [("site", record.site), ("id", game.id), ("machine", game.machine), ("player", game.player), ("provider", game.provider)]
        where value.isEmpty {
            return .failure(RecordProblem("\(name) is empty"))
        }
        for (name, bytes) in limits where (values[name]?.utf8.count ?? 0) > bytes {
            return .failure(RecordProblem("\(name) is longer than \(bytes) bytes"))
        }
        if let problem = checkEvidence(game) { return .failure(problem) }
        if let problem = checkPrize(game) { return .failure(problem) }
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

extension ValidRecord {
    /// The most cameras a record's clips may name, and their fields' limits (SPEC §14's metadata).
    static let maxClips = 16
    static let evidenceLimits = (camera: 64, path: 1024, reason: 512)

    private static func checkEvidence(_ game: GameRecord) -> RecordProblem? {
        let clips = game.evidence ?? []
        let gaps = game.evidenceMissing ?? []
        guard clips.count <= maxClips, gaps.count <= maxClips else {
            return RecordProblem("evidence names more than \(maxClips) cameras")
        }
        for clip in clips {
            if clip.camera.isEmpty || clip.camera.utf8.count > evidenceLimits.camera {
                return RecordProblem("evidence.camera is empty or longer than \(evidenceLimits.camera) bytes")
            }
            if clip.path.utf8.count > evidenceLimits.path { return RecordProblem("evidence.path is longer than \(evidenceLimits.path) bytes") }
            if !clip.durationSeconds.isFinite || clip.durationSeconds < 0 { return RecordProblem("evidence.duration_s is not a duration") }
        }
        for gap in gaps {
            if gap.camera.isEmpty || gap.camera.utf8.count > evidenceLimits.camera {
                return RecordProblem("evidence_missing.camera is empty or longer than \(evidenceLimits.camera) bytes")
            }
            if gap.reason.utf8.count > evidenceLimits.reason {
                return RecordProblem("evidence_missing.reason is longer than \(evidenceLimits.reason) bytes")
            }
        }
        return nil
    }
}

extension ValidRecord {
    /// A prize's fields' limits (SPEC §15): what a site makes, with room to spare.
    static let prizeLimits = (id: PrizeRequests.maxIDBytes, prize: MachinePrize.maxIDBytes, name: MachinePrize.maxNameBytes)

    private static func checkPrize(_ game: GameRecord) -> RecordProblem? {
        guard let prize = game.prize else { return nil }
        guard game.outcome == .won else { return RecordProblem("prize on a game that was not won") }
        if prize.id.isEmpty || prize.id.utf8.count > prizeLimits.id { return RecordProblem("prize.id is empty or longer than \(prizeLimits.id) bytes") }
        if prize.prize.isEmpty || prize.prize.utf8.count > prizeLimits.prize {
            return RecordProblem("prize.prize is empty or longer than \(prizeLimits.prize) bytes")
        }
        if prize.name.isEmpty || prize.name.utf8.count > prizeLimits.name {
            return RecordProblem("prize.name is empty or longer than \(prizeLimits.name) bytes")
        }
        let amounts = 0...Int64(CreditsSettings.maxAmount)
        guard amounts.contains(prize.cost), amounts.contains(prize.exchange) else {
            return RecordProblem("prize.cost or prize.exchange is out of range")
        }
        guard Timestamp.date(prize.wonAt) != nil else { return RecordProblem("prize.won_at is not a timestamp") }
        return nil
    }
}

struct RecordProblem: Error, Equatable, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
