import Foundation
import Protocol

// What the recorder's history and reports answer with (docs/RECORDER.md).

/// `GET /v1/games`'s filters.
struct GameFilter: Sendable, Equatable {
    var site: String?
    var machine: String?
    var player: String?
    var provider: String?
    var outcome: GameOutcome?
    var since: Date?
    var until: Date?
    var limit = 50
    var offset = 0
}

/// A game of the chain: SPEC §5's shape plus `site`, every key present.
struct ChainGame: Encodable, Sendable, Equatable {
    var site: String
    var game: GameRecord

    private enum CodingKeys: String, CodingKey { case site }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(site, forKey: .site)
        try game.encode(to: encoder)
    }
}

/// One row of `GET /v1/report/daily`.
struct DailyFigures: Encodable, Sendable, Equatable {
    var day: String
    var site: String
    var machine: String
    /// Games played: the coin was dropped (`started_at` set).
    var games: Int
    var wins: Int
    var noResult: Int

    /// wins / games; nil (`null`) for a day with no game played.
    var winRate: Double? { games == 0 ? nil : Double(wins) / Double(games) }

    private enum CodingKeys: String, CodingKey {
        case day, site, machine, games, wins
        case winRate = "win_rate"
        case noResult = "no_result"
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(day, forKey: .day)
        try container.encode(site, forKey: .site)
        try container.encode(machine, forKey: .machine)
        try container.encode(games, forKey: .games)
        try container.encode(wins, forKey: .wins)
        try container.encode(winRate, forKey: .winRate)
        try container.encode(noResult, forKey: .noResult)
    }
}

/// One row of `GET /v1/report/hourly`.
struct HourlyFigures: Encodable, Sendable, Equatable {
    /// The hour's start, UTC (`2026-11-25T07:00:00.000Z`).
    var hour: String
    var site: String
    var games: Int
    var wins: Int
}

struct GamePage: Encodable {
    var games: [ChainGame]
}

struct DailyReport: Encodable {
    /// The first day's midnight, UTC.
    var since: String
    var days: [DailyFigures]
}

struct HourlyReport: Encodable {
    /// The first hour's start, UTC.
    var since: String
    var hours: [HourlyFigures]
}
