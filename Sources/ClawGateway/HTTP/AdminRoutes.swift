import Foundation
import Hummingbird
import Logging
import Protocol

/// Operator actions behind `http.admin_token`, checked by the
/// ``AccessGuard`` of `.admin` that `router` carries. Without a token in the
/// config the routes do not exist.
/// Every change is written with its audit entry (SPEC §16) and logged
/// through ``OperatorAction``.
struct AdminRoutes<Context: OperatorRequestContext>: Sendable {
    let arcade: Arcade
    let logger: Logger

    func add(to router: some RouterMethods<Context>) {
        // Whether a token is the admin token, before it is used: the
        // dashboard asks once a token is typed, so a wrong one is said at once.
        router.get("/v1/admin") { _, _ in
            JSONResponse.make(.ok, AdminCheck(admin: true))
        }
        router.post("/v1/machines/:id/pause") { request, context in
            let machine = try authorized(request, context)
            let audit = context.audit(.pause, target: AuditTarget.machine(machine.id))
            return try await answer(machine, audit) { machine.pause(audit) }
        }
        router.post("/v1/machines/:id/resume") { request, context in
            let machine = try authorized(request, context)
            let audit = context.audit(.resume, target: AuditTarget.machine(machine.id))
            return try await answer(machine, audit) { machine.resume(audit) }
        }
        router.post("/v1/machines/:id/skip") { request, context in
            let machine = try authorized(request, context)
            let audit = context.audit(.skip, target: AuditTarget.machine(machine.id))
            return try await answer(machine, audit) { machine.skip(audit) }
        }
        router.post("/v1/machines/:id/reset") { request, context in
            let machine = try authorized(request, context)
            let audit = context.audit(.reset, target: AuditTarget.machine(machine.id))
            let (outcome, ticket) = machine.reset(audit)
            switch outcome {
            case .sent(let serial):
                return try await OperatorAction.perform(audit, logger: logger) {
                    try await durable(ticket)
                    return JSONResponse.make(.ok, AdminAnswer(machine: machine.id, action: "reset", changed: true, serial: serial))
                }
            case .offline:
                throw Refusal(
                    .conflict, code: ErrorCode.machineOffline.rawValue,
                    "\(machine.id) is offline: its PC cannot take a reset. Check the PC and its connection to the broker.")
            case .busy:
                throw Refusal(
                    .conflict, code: "game_in_progress",
                    "\(machine.id) has a player: a reset would end their game. Skip the turn first, or wait for it to end.")
            }
        }
        router.post("/v1/machines/:id/maintenance") { request, context in
            let machine = try authorized(request, context)
            let body = try await request.body.collect(upTo: Self.maxSettingsBody)
            let (on, reason) = try Self.maintenanceBody(Array(buffer: body))
            let audit = context.audit(.maintenance, target: AuditTarget.machine(machine.id), reason: reason)
            return try await answer(machine, audit) { machine.maintain(on: on, reason: reason, audit) }
        }
        router.put("/v1/machines/:id/settings") { request, context in
            let machine = try authorized(request, context)
            let body = Array(buffer: try await request.body.collect(upTo: Self.maxSettingsBody))
            let settings: MachineSettings
            do throws(MachineSettings.Rejected) {
                settings = try MachineSettings.update(machine.boardSettings.settings, with: body)
            } catch {
                throw Refusal(
                    .unprocessableContent, code: "invalid_settings",
                    error.problems.map { "\($0.path): \($0.message)" }.joined(separator: "; "))
            }
            // The reason beside the settings (SPEC §16); checked after them, so one answer names every problem of the settings.
            let reason = try AuditReason.required(AuditReason.field(in: body))
            let audit = context.audit(.settings, target: AuditTarget.machine(machine.id), reason: reason)
            return try await settingsAnswer(machine, audit) { machine.setSettings(settings, audit) }
        }
        router.delete("/v1/machines/:id/settings") { request, context in
            let machine = try authorized(request, context)
            let body = Array(buffer: try await request.body.collect(upTo: Self.maxSettingsBody))
            // `{"reason":…}` alone (SPEC §16).
            let reason = try AuditReason.required(body.isEmpty ? nil : AuditReason.field(in: body))
            let audit = context.audit(.settings, target: AuditTarget.machine(machine.id), reason: reason)
            return try await settingsAnswer(machine, audit) { machine.setSettings(nil, audit) }
        }
        router.delete("/v1/machines/:id/queue/:accid") { request, context in
            let machine = try authorized(request, context)
            let accid = try context.pathParameter("accid")
            // A player is the pair (provider, account): `?provider=` says which
            // when the account is there for both (SPEC §5).
            let provider = request.uri.queryParameters["provider"].map(String.init)
            let audit = context.audit(.remove, target: AuditTarget.machine(machine.id), reason: nil)
            let (removal, ticket) = machine.remove(accid: accid, provider: provider, audit)
            switch removal {
            case .removed:
                return try await answer(machine, audit) { (true, ticket) }
            case .notFound:
                let whose = provider.map { "\(accid) of \($0)" } ?? accid
                throw Refusal(.notFound, code: ErrorCode.notInQueue.rawValue, "\(whose) is not in the queue of \(machine.id).")
            case .ambiguous(let providers):
                throw Refusal(
                    .conflict, code: "ambiguous",
                    "\(accid) is in the queue of \(machine.id) for \(providers.joined(separator: " and ")); "
                        + "say which with ?provider=\(providers.joined(separator: " or ?provider=")).")
            }
        }
    }

    /// The answer once the action and its audit entry are durable.
    private func answer(_ machine: Machine, _ audit: AuditDraft, _ act: () -> (Bool, StorageWriter.Ticket?)) async throws -> Response {
        try await OperatorAction.perform(audit, logger: logger) {
            let (changed, ticket) = act()
            try await durable(ticket)
            return JSONResponse.make(.ok, AdminAnswer(machine: machine.id, action: audit.action.rawValue, changed: changed))
        }
    }

    private func durable(_ ticket: StorageWriter.Ticket?) async throws {
        if let ticket, await !arcade.durable(ticket) {
            throw Refusal.unavailable("The action was taken but could not be saved yet; storage is failing (see /readyz).")
        }
    }

    /// `{"on":true,"reason":"…"}` or `{"on":false}`: `on` required, `reason`
    /// required with `on: true` (SPEC §16) and only then, at most
    /// ``MachineState/maxMaintenanceReason`` characters.
    static func maintenanceBody(_ body: [UInt8]) throws -> (on: Bool, reason: String?) {
        let body = try SwitchBody.read(body, flag: "on")
        guard body.on else {
            guard body.reason == nil else { throw SwitchBody.refused("reason: only when taking the machine out (on: true).") }
            return (false, nil)
        }
        let reason = try AuditReason.required(body.reason)
        guard reason.count <= MachineState.maxMaintenanceReason else {
            throw SwitchBody.refused("reason: 1 to \(MachineState.maxMaintenanceReason) characters, not only spaces.")
        }
        return (true, reason)
    }

    /// A settings body is a few hundred bytes.
    static var maxSettingsBody: Int { 4096 }

    /// The machine's settings as they now are, once the change and its audit entry are durable.
    private func settingsAnswer(_ machine: Machine, _ audit: AuditDraft, _ act: () -> (Bool, StorageWriter.Ticket?)) async throws -> Response {
        try await OperatorAction.perform(audit, logger: logger) {
            if let ticket = act().1, await !arcade.durable(ticket) {
                throw Refusal.unavailable("The settings were taken but could not be saved yet; storage is failing (see /readyz).")
            }
            return JSONResponse.make(.ok, SettingsAnswer(machine))
        }
    }

    /// The route's machine; the request's token was checked by the guard before it came here.
    private func authorized(_ request: Request, _ context: Context) throws -> Machine {
        try arcade.machine(in: context)
    }
}

struct AdminAnswer: Codable, Equatable {
    var machine: String
    var action: String
    /// False when there was nothing to do (already paused, nobody to skip).
    var changed: Bool
    /// A reset's gateway serial: the PC's ack carries it.
    var serial: Int64? = nil
}

/// `GET /v1/admin`'s answer: the token was the admin token.
struct AdminCheck: Codable, Sendable {
    var admin: Bool
}
