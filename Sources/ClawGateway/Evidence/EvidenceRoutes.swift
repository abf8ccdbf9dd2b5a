import Foundation
import Hummingbird
import NIOCore
import Protocol

/// A game's clips over HTTP (SPEC §14): served with Range requests (a
/// browser's `<video>` seeks) to the read token; held for a dispute by an
/// operator. A clip is found by its machine, game and camera in the store,
/// never by a path from the request: nothing outside the evidence folder is
/// ever served.
struct EvidenceRoutes<Context: OperatorRequestContext>: Sendable {
    let arcade: Arcade
    let keeper: EvidenceKeeper

    func add(reads: some RouterMethods<Context>, admin: (some RouterMethods<Context>)?) {
        reads.get("/v1/machines/:id/games/:game/evidence/:camera") { request, context in
            let machine = try arcade.machine(in: context)
            let game = try context.pathParameter("game")
            let camera = try context.pathParameter("camera")
            let row = try await arcade.writer.store.evidence(machine: machine.id, game: game, camera: camera)
            guard let row, let path = row.path, path.hasPrefix(keeper.dir.path + "/"), !path.contains("/../") else {
                throw Refusal(
                    .notFound, code: "no_clip",
                    row?.missing.map { "\(machine.id) has no clip of \(game) by camera \(camera): \($0)." }
                        ?? "\(machine.id) has no game \(game) with a clip by camera \(camera).")
            }
            return try await Self.serve(path, range: request.headers[.range], context: context)
        }
        admin?.post("/v1/machines/:id/games/:game/evidence/hold") { request, context in
            let machine = try arcade.machine(in: context)
            let game = try context.pathParameter("game")
            let body = try await request.body.collect(upTo: 4096)
            let (hold, reason) = try Self.holdBody(Array(buffer: body))
            let audit = context.audit(.hold, target: AuditTarget.game(machine: machine.id, game: game), reason: reason)
            let touched = try await arcade.writer.store.hold(
                machine: machine.id, game: game, held: hold, reason: reason, audit: audit, at: arcade.clock.wallNow())
            guard touched > 0 else {
                throw Refusal(.notFound, code: "no_clip", "\(machine.id) has no game \(game) with clips.")
            }
            return JSONResponse.make(.ok, HoldAnswer(machine: machine.id, game: game, held: hold, reason: reason, clips: touched))
        }
    }

    struct HoldAnswer: Codable, Equatable {
        var machine: String
        var game: String
        var held: Bool
        var reason: String?
        var clips: Int
    }

    /// `{"hold":true,"reason":"…"}` (a reason is required to hold) or `{"hold":false}`.
    static func holdBody(_ body: [UInt8]) throws(Refusal) -> (Bool, String?) {
        let body = try SwitchBody.read(body, flag: "hold")
        guard body.on else { return (false, nil) }
        guard let reason = body.reason, (1...500).contains(reason.count) else {
            throw SwitchBody.refused("reason: 1 to 500 characters, to hold a clip.")
        }
        return (true, reason)
    }

    /// Reads clips off the event loops, on NIO's thread pool.
    private static var files: FileIO { FileIO() }

    /// The file, whole (200) or the byte range asked (206), as `video/mp4`,
    /// streamed from the disk in chunks: a clip is never held in memory whole.
    static func serve(_ path: String, range: String?, context: Context) async throws -> Response {
        guard let size = ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value else {
            throw Refusal(.notFound, code: "no_clip", "The clip is gone from the disk.")
        }
        var headers: HTTPFields = [.contentType: "video/mp4", .acceptRanges: "bytes"]
        var status = HTTPResponse.Status.ok
        var (start, end) = (Int64(0), size - 1)
        if let range {
            guard let asked = ByteRange.parse(range, size: size) else {
                headers[.contentRange] = "bytes */\(size)"
                return Response(status: .rangeNotSatisfiable, headers: headers)
            }
            (start, end) = asked
            status = .partialContent
            headers[.contentRange] = "bytes \(start)-\(end)/\(size)"
        }
        headers[.contentLength] = String(max(0, end - start + 1))
        guard size > 0 else { return Response(status: status, headers: headers) }
        let body: ResponseBody
        do {
            body = try await files.loadFile(path: path, range: Int(start)...Int(end), context: context)
        } catch {
            throw Refusal(.notFound, code: "no_clip", "The clip is gone from the disk.")
        }
        return Response(status: status, headers: headers, body: body)
    }
}

/// One `Range: bytes=…` as a browser sends it: `a-b`, `a-` or `-n`.
enum ByteRange {
    /// The first and last byte asked of a file of `size` bytes; nil when it
    /// is not one satisfiable range.
    static func parse(_ header: String, size: Int64) -> (Int64, Int64)? {
        let text = header.trimmingCharacters(in: .whitespaces)
        guard text.hasPrefix("bytes="), size > 0 else { return nil }
        let spec = text.dropFirst(6)
        guard !spec.contains(","), let dash = spec.firstIndex(of: "-") else { return nil }
        let first = spec[..<dash].trimmingCharacters(in: .whitespaces)
        let last = spec[spec.index(after: dash)...].trimmingCharacters(in: .whitespaces)
        if first.isEmpty {
            guard let suffix = Int64(last), suffix > 0 else { return nil }
            return (max(0, size - suffix), size - 1)
        }
        guard let start = Int64(first), start >= 0, start < size else { return nil }
        guard !last.isEmpty else { return (start, size - 1) }
        guard let end = Int64(last), end >= start else { return nil }
        return (start, min(end, size - 1))
    }
}
