import Foundation
import GRDB
import Hummingbird
import Protocol

/// A machine's odds over a window (SPEC §16): the games a machine decided
/// (`won` + `lost`, as corrected), its wins, the strong (full-power) games
/// and their wins, the credits its games took and the cost of the prizes it
/// gave out. For players, owners and regulators alike: a site's report of
/// one machine, and each row of the recorder's report, encode these fields.
struct FairnessFigures: Sendable, Equatable, Encodable {
    var games: Int
    var wins: Int
    var strongGames: Int
    var strongWins: Int
    /// Credits the window's games took, refunds deducted; nil where games are free.
    var creditsTaken: Int64?
    /// What the prizes the window's wins made cost.
    var prizeCost: Int64

    /// Wins over games; nil without games.
    var winRate: Double? { games == 0 ? nil : Double(wins) / Double(games) }
    /// Prize cost over credits taken; nil without credits, or when none were taken.
    var payout: Double? { creditsTaken.flatMap { $0 > 0 ? Double(prizeCost) / Double($0) : nil } }

    enum CodingKeys: String, CodingKey {
        case games, wins, payout
        case strongGames = "strong_games"
        case strongWins = "strong_wins"
        case winRate = "win_rate"
        case creditsTaken = "credits_taken"
        case prizeCost = "prize_cost"
    }

    /// Every field, `null` where there is no value.
    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(games, forKey: .games)
        try container.encode(wins, forKey: .wins)
        try container.encode(strongGames, forKey: .strongGames)
        try container.encode(strongWins, forKey: .strongWins)
        try container.encode(winRate, forKey: .winRate)
        try container.encode(creditsTaken, forKey: .creditsTaken)
        try container.encode(prizeCost, forKey: .prizeCost)
        try container.encode(payout, forKey: .payout)
    }
}

/// `GET /v1/machines/<id>/fairness`: one machine's figures over `[from, to)`.
struct FairnessReport: Sendable, Equatable, Encodable {
    var machine: String
    var from: Date
    var to: Date
    var figures: FairnessFigures

    private enum CodingKeys: String, CodingKey { case machine, from, to }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(machine, forKey: .machine)
        try container.encode(Timestamp.string(from), forKey: .from)
        try container.encode(Timestamp.string(to), forKey: .to)
        try figures.encode(to: encoder)
    }
}

extension GameStore {
    /// The fairness report of `machine` over the games that ended in
    /// `[from, to)`; `credits` says whether games cost credits here.
    func fairness(machine: String, from: Date, to: Date, credits: Bool) async throws(StorageError) -> FairnessReport {
        let outcome = Self.countedOutcome
        do {
            return try await pool.read { db in
                let window: StatementArguments = [machine, Timestamp.string(from), Timestamp.string(to)]
                let counts = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT COALESCE(SUM(\(outcome) IN ('won', 'lost')), 0) AS games,
                               COALESCE(SUM(\(outcome) = 'won'), 0) AS wins,
                               COALESCE(SUM(strong = 1 AND \(outcome) IN ('won', 'lost')), 0) AS strong_games,
                               COALESCE(SUM(strong = 1 AND \(outcome) = 'won'), 0) AS strong_wins
                        FROM games WHERE machine = ? AND ended_at >= ? AND ended_at < ?
                        """,
                    arguments: window)
                let cost = try Int64.fetchOne(
                    db,
                    sql: """
                        SELECT COALESCE(SUM(p.cost), 0) FROM prizes p JOIN games g ON g.id = p.game
                        WHERE g.machine = ? AND g.ended_at >= ? AND g.ended_at < ? AND p.state <> 'voided'
                        """,
                    arguments: window) ?? 0
                // A game's debit and its refund are keyed by its session: what it took is their sum.
                let taken: Int64? =
                    credits
                    ? try Int64.fetchOne(
                        db,
                        sql: """
                            SELECT COALESCE(-SUM(l.credits), 0) FROM ledger l JOIN games g ON g.id = l.key
                            WHERE l.kind IN ('debit', 'refund') AND g.machine = ? AND g.ended_at >= ? AND g.ended_at < ?
                            """,
                        arguments: window) ?? 0
                    : nil
                return FairnessReport(
                    machine: machine, from: from, to: to,
                    figures: FairnessFigures(
                        games: counts?["games"] ?? 0, wins: counts?["wins"] ?? 0, strongGames: counts?["strong_games"] ?? 0,
                        strongWins: counts?["strong_wins"] ?? 0, creditsTaken: taken, prizeCost: cost))
            }
        } catch {
            throw StorageError(path: path, operation: "read the fairness of \(machine)", underlying: error)
        }
    }
}

/// `GET /v1/machines/<id>/fairness?from=&to=` (read token, SPEC §16): the
/// machine's ``FairnessReport``; the window defaults to today (from the
/// gateway's local midnight to now).
struct FairnessRoutes<Context: RequestContext>: Sendable {
    let arcade: Arcade
    /// Whether games cost credits here.
    let credits: Bool

    func add(reads: RouterGroup<Context>) {
        reads.get("/v1/machines/:id/fairness") { request, context in
            let machine = try arcade.machine(in: context)
            let parameters = try RecorderRoutes.Query(request, allowed: ["from", "to"])
            let now = arcade.clock.wallNow()
            let from = try parameters.time("from") ?? Calendar.current.startOfDay(for: now)
            let to = try parameters.time("to") ?? now.addingTimeInterval(0.001)
            guard from < to else { throw Refusal.badParameter("from", "must be before to") }
            do {
                return JSONResponse.make(
                    .ok, try await arcade.writer.store.fairness(machine: machine.id, from: from, to: to, credits: credits))
            } catch {
                throw Refusal.unavailable("The games cannot be read now: storage is failing (see /readyz).")
            }
        }
    }
}
