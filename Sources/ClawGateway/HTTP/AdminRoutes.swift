import Foundation
import Hummingbird

/// Operator actions behind `http.admin_token` (Bearer, compared in constant
/// time). Without a token in the config the routes do not exist.
struct AdminRoutes<Context: RequestContext>: Sendable {
    let arcade: Arcade
    let token: String

    func add(to router: Router<Context>) {
        router.post("/v1/machines/:id/pause") { request, context in
            let machine = try authorized(request, context)
            return JSONResponse.make(.ok, AdminAnswer(machine: machine.id, action: "pause", changed: machine.pause()))
        }
        router.post("/v1/machines/:id/resume") { request, context in
            let machine = try authorized(request, context)
            return JSONResponse.make(.ok, AdminAnswer(machine: machine.id, action: "resume", changed: machine.resume()))
        }
        router.post("/v1/machines/:id/skip") { request, context in
            let machine = try authorized(request, context)
            return JSONResponse.make(.ok, AdminAnswer(machine: machine.id, action: "skip", changed: machine.skip()))
        }
        router.delete("/v1/machines/:id/queue/:accid") { request, context in
            let machine = try authorized(request, context)
            let accid = context.parameters.get("accid") ?? ""
            guard machine.remove(player: accid) else {
                return JSONResponse.error(.notFound, code: "not_in_queue", "\(accid) is not in the queue of \(machine.id).")
            }
            return JSONResponse.make(.ok, AdminAnswer(machine: machine.id, action: "remove", changed: true))
        }
    }

    private func authorized(_ request: Request, _ context: Context) throws -> Machine {
        let header = request.header("Authorization") ?? ""
        let prefix = "Bearer "
        guard header.hasPrefix(prefix), Signatures.constantTimeEqual(String(header.dropFirst(prefix.count)), token) else {
            throw APIFailure.unauthorized
        }
        return try arcade.machine(in: context)
    }
}

struct AdminAnswer: Codable, Equatable {
    var machine: String
    var action: String
    /// False when there was nothing to do (already paused, nobody to skip).
    var changed: Bool
}
