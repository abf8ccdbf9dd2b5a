import Foundation
import Hummingbird
import Logging
import Protocol

/// Corrected results (SPEC §16): an operator puts a game's result right
/// (`won` or `lost`) for a game that ended `won`, `lost`, `no_result` or
/// `machine_fault`. The record keeps what the machine said and gains the
/// correction; the prize and the stock move with it (through the machine's
/// transition, and with prizes in the prize desk's lane, so an exchange of
/// the same prize never crosses it); the clips are held; the player is
/// told. One correction at a time: each reads the game as the last left it.
struct GameCorrections: Sendable {
    let arcade: Arcade
    /// The site's prize desk when prizes are kept.
    let prizes: PrizeDesk?
    /// A site of a chain: its prizes are the recorder's to change (SPEC §15),
    /// and corrections do not travel to the chain yet, so a correction that
    /// would make or take back a prize is refused there.
    let inChain: Bool
    private let lane = ReadGate(permits: 1)

    init(arcade: Arcade, prizes: PrizeDesk?, inChain: Bool = false) {
        self.arcade = arcade
        self.prizes = prizes
        self.inChain = inChain
    }

    /// The outcomes a machine decides, and so an operator may correct.
    static let correctable: Set<GameOutcome> = [.won, .lost, .noResult, .machineFault]

    /// Corrects `game` of `machine` to `outcome`; returns the record as it now is.
    func correct(
        machine: Machine, game id: String, to outcome: GameOutcome, reason: String, audit: AuditDraft
    ) async throws -> GameRecord {
        guard arcade.writer.isWritable else {
            throw Refusal.unavailable("Storage is failing (see /readyz): nothing can be corrected until it writes again.")
        }
        try await lane.acquire()
        defer { lane.release() }
        guard let (record, prize) = try await arcade.writer.store.correctable(game: id, machine: machine.id) else {
            throw Refusal(.notFound, code: "unknown_game", "\(machine.id) has no game \(id.debugDescription).")
        }
        guard record.endedAt != nil, let said = record.outcome else {
            throw Refusal(.conflict, code: "game_in_progress", "Game \(id) of \(machine.id) is still in progress: correct it once it has ended.")
        }
        guard Self.correctable.contains(said) else {
            throw Refusal(
                .conflict, code: "not_correctable",
                "Game \(id) ended \(said.rawValue): only a game the machine decided (won, lost, no_result, machine_fault) has a result to correct.")
        }
        guard record.countedOutcome != outcome else {
            throw Refusal(.conflict, code: "no_change", "Game \(id) already counts as \(outcome.rawValue); nothing was changed.")
        }
        if inChain, machine.prizeStock.prize != nil, (record.countedOutcome == .won) != (outcome == .won) {
            throw Refusal(
                .conflict, code: "prize_at_recorder",
                "\(machine.id) gives prizes and this site is in a chain: the prize of game \(id) is the chain recorder's, "
                    + "and a correction does not reach the recorder yet. Nothing was changed.")
        }
        let correction = GameCorrection(
            outcome: outcome, by: audit.operatorName, at: Timestamp.string(arcade.clock.wallNow()), reason: reason)
        let apply = { (prize: PrizeRow?) async throws -> (GameRecord, ticket: StorageWriter.Ticket?, prize: PrizeRow?) in
            let (result, ticket) = machine.correct(ResultCorrection(game: record, correction: correction, prize: prize), audit)
            switch result {
            case .prizeGone(let state):
                throw Refusal(
                    .conflict, code: "prize_gone",
                    "The prize of game \(id) is \(state.rawValue): it has left the player's hands, so the win cannot be taken back. "
                        + "Nothing was changed; settle it with the player (an adjust moves credits).")
            case .corrected(let prize):
                if let ticket, await !arcade.durable(ticket) {
                    throw Refusal.unavailable("The correction was taken but could not be saved yet; storage is failing (see /readyz).")
                }
                var corrected = record
                corrected.corrected = correction
                return (corrected, ticket, prize)
            }
        }
        if let prizes {
            return try await prizes.correcting(game: id, apply)
        }
        return try await apply(prize).0
    }
}

/// `POST /v1/machines/<m>/games/<g>/correct` (admin): `{"outcome":"won"|"lost","reason":"…"}`.
struct CorrectionRoutes<Context: OperatorRequestContext>: Sendable {
    let corrections: GameCorrections
    let logger: Logger

    func add(admin: RouterGroup<Context>) {
        admin.post("/v1/machines/:id/games/:game/correct") { request, context in
            let machine = try corrections.arcade.machine(in: context)
            let game = try context.pathParameter("game")
            let (outcome, reason) = try Self.body(Array(buffer: try await request.body.collect(upTo: 4096)))
            let audit = context.audit(.correct, target: AuditTarget.game(machine: machine.id, game: game), reason: reason)
            return try await OperatorAction.perform(audit, logger: logger) {
                let record = try await corrections.correct(machine: machine, game: game, to: outcome, reason: reason, audit: audit)
                return JSONResponse.make(.ok, record)
            }
        }
    }

    /// The outcome (`won` or `lost`) and the reason, or a 422 naming what is wrong.
    static func body(_ body: [UInt8]) throws(Refusal) -> (GameOutcome, String) {
        let fields: [JSONField]
        do throws(JSONReadError) {
            fields = try JSONObjectReader.fields(in: body)
        } catch {
            throw SwitchBody.refused(#"Send a JSON object: {"outcome":"won","reason":"…"}."#)
        }
        var outcome: GameOutcome?
        var reason: String?
        for field in fields {
            switch (field.key, field.value) {
            case ("outcome", .string(let text)) where text == "won" || text == "lost": outcome = GameOutcome(rawValue: text)
            case ("outcome", _): throw SwitchBody.refused("outcome: \"won\" or \"lost\".")
            case ("reason", .string(let text)): reason = text
            case ("reason", .null): reason = nil
            case ("reason", _): throw SwitchBody.refused("reason: a string.")
            default: throw SwitchBody.refused("Unknown field \(field.key): only outcome and reason.")
            }
        }
        guard let outcome else { throw SwitchBody.refused("outcome: required, \"won\" or \"lost\".") }
        return (outcome, try AuditReason.required(reason))
    }
}
