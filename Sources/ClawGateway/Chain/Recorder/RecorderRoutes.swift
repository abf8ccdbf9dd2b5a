import Foundation
import Hummingbird
import Logging
import NIOCore
import Protocol

/// The recorder's HTTP routes (SPEC §10): health and readiness; the chain's
/// history, its reports and the metrics behind the read token.
///
/// Every query parameter is checked before the database is asked: an
/// unknown, repeated, empty or ill-formed one is a 400 naming it. Values go
/// to PostgreSQL as bound parameters, never into the SQL text.
struct RecorderRoutes: Sendable {
    let recorder: ChainRecorder
    let logger: Logger
    let now: @Sendable () -> Date
    /// Whether the recorder keeps the chain's wallets (`credits:`): the fairness report's credits.
    var credits = false

    static let maxLimit = 500
    static let defaultLimit = 50
    /// Deeper pages take `since`/`until`: an offset makes the database read
    /// and skip every row before it.
    static let maxOffset = 100_000
    static let maxDays = 90
    static let defaultDays = 7
    static let maxHours = 24 * 30
    static let defaultHours = 24

    /// - Parameters:
    ///   - health: `/healthz`, `/readyz`: any `Host`, no token.
    ///   - reads: the history, reports and `/metrics`, behind the ``AccessGuard`` of `.read`.
    func add(health: Router<GatewayRequestContext>, reads: RouterGroup<GatewayRequestContext>) {
        health.get("/healthz") { _, _ in
            JSONResponse.make(.ok, ["status": "ok"])
        }
        health.get("/readyz") { _, _ in
            let problems = recorder.problems
            guard !problems.isEmpty else { return JSONResponse.make(.ok, ["status": "ready"]) }
            return JSONResponse.error(.notReady(problems))
        }
        reads.get("/metrics") { _, _ in
            RecorderMetrics.export(recorder)
            var buffer: [UInt8] = []
            GatewayMetrics.registry.emit(into: &buffer)
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: ResponseBody(byteBuffer: ByteBuffer(bytes: buffer)))
        }
        reads.get("/v1/games") { request, _ in
            let query = try Query(request, allowed: ["site", "machine", "player", "provider", "outcome", "since", "until", "limit", "offset"])
            var filter = GameFilter()
            filter.site = try query.text("site")
            filter.machine = try query.text("machine")
            filter.player = try query.text("player")
            filter.provider = try query.text("provider")
            filter.outcome = try query.outcome("outcome")
            filter.since = try query.time("since")
            filter.until = try query.time("until")
            filter.limit = try query.integer("limit", default: Self.defaultLimit, range: 1...Self.maxLimit)
            filter.offset = try query.integer("offset", default: 0, range: 0...Self.maxOffset)
            let games = try await read { try await recorder.store.games(filter) }
            return JSONResponse.make(.ok, GamePage(games: games))
        }
        reads.get("/v1/records/set-aside") { request, _ in
            let query = try Query(request, allowed: ["site", "limit", "offset"])
            let site = try query.text("site")
            let limit = try query.integer("limit", default: Self.defaultLimit, range: 1...Self.maxLimit)
            let offset = try query.integer("offset", default: 0, range: 0...Self.maxOffset)
            let records = try await read { try await recorder.store.setAside(site: site, limit: limit, offset: offset) }
            return JSONResponse.make(.ok, SetAsidePage(records: records))
        }
        reads.get("/v1/report/daily") { request, _ in
            let query = try Query(request, allowed: ["site", "machine", "days"])
            let site = try query.text("site")
            let machine = try query.text("machine")
            let days = try query.integer("days", default: Self.defaultDays, range: 1...Self.maxDays)
            let since = Self.startOfDay(now()).addingTimeInterval(-Double(days - 1) * 86_400)
            let figures = try await read { try await recorder.store.daily(site: site, machine: machine, since: since) }
            return JSONResponse.make(.ok, DailyReport(since: Timestamp.string(since), days: figures))
        }
        // Each machine's odds over the days asked (SPEC §16): what the history page shows per machine.
        reads.get("/v1/report/fairness") { request, _ in
            let query = try Query(request, allowed: ["site", "machine", "days"])
            let site = try query.text("site")
            let machine = try query.text("machine")
            let days = try query.integer("days", default: Self.defaultDays, range: 1...Self.maxDays)
            let since = Self.startOfDay(now()).addingTimeInterval(-Double(days - 1) * 86_400)
            let credits = self.credits
            let machines = try await read { try await recorder.store.fairness(site: site, machine: machine, since: since, credits: credits) }
            return JSONResponse.make(.ok, FairnessReportPage(since: Timestamp.string(since), machines: machines))
        }
        reads.get("/v1/report/hourly") { request, _ in
            let query = try Query(request, allowed: ["site", "machine", "hours"])
            let site = try query.text("site")
            let machine = try query.text("machine")
            let hours = try query.integer("hours", default: Self.defaultHours, range: 1...Self.maxHours)
            let since = Self.startOfHour(now()).addingTimeInterval(-Double(hours - 1) * 3600)
            let figures = try await read { try await recorder.store.hourly(site: site, machine: machine, since: since) }
            return JSONResponse.make(.ok, HourlyReport(since: Timestamp.string(since), hours: figures))
        }
    }

    /// The chain's history page (`GET /history`, its files, and Debian's
    /// Chart.js), behind the `.page` guard as the router's page is.
    func add(page: RouterGroup<GatewayRequestContext>) {
        HistoryDashboardRoutes<GatewayRequestContext>().add(page: page)
    }

    /// A read of the database, or 503 when it cannot be reached.
    private func read<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch {
            logger.warning("A read of the chain's history failed", metadata: RecorderStore.shape(error, "read the chain's history").metadata())
            throw Refusal.unavailable("The chain's database cannot be read right now; try again in a minute.")
        }
    }

    static func startOfDay(_ date: Date) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 / 86_400).rounded(.down) * 86_400)
    }

    static func startOfHour(_ date: Date) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 / 3600).rounded(.down) * 3600)
    }

    /// A request's query parameters, checked one by one.
    struct Query {
        let values: [String: String]

        init(_ request: Request, allowed: Set<String>) throws(Refusal) {
            var values: [String: String] = [:]
            for (key, value) in request.uri.queryParameters {
                let name = String(key)
                guard allowed.contains(name) else {
                    throw Refusal.badParameter(name, "is not a parameter of this route (it takes \(allowed.sorted().joined(separator: ", ")))")
                }
                guard values[name] == nil else { throw Refusal.badParameter(name, "is given twice") }
                values[name] = String(value)
            }
            self.values = values
        }

        func text(_ name: String) throws(Refusal) -> String? {
            guard let value = values[name] else { return nil }
            guard !value.isEmpty else { throw Refusal.badParameter(name, "must not be empty (leave it out to take every value)") }
            guard value.utf8.count <= 256 else { throw Refusal.badParameter(name, "is longer than 256 bytes") }
            return value
        }

        func integer(_ name: String, default fallback: Int, range: ClosedRange<Int>) throws(Refusal) -> Int {
            try QueryParameter.integer(values[name].map { Substring($0) }, name: name, default: fallback, range: range)
        }

        func outcome(_ name: String) throws(Refusal) -> GameOutcome? {
            guard let text = values[name] else { return nil }
            guard let outcome = GameOutcome(rawValue: text) else {
                throw Refusal.badParameter(name, "must be one of \(GameOutcome.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            return outcome
        }

        /// An ISO 8601 time with its zone (`2026-11-25T07:00:00Z`, fractions
        /// allowed) or a UTC day (`2026-11-25`, its midnight).
        func time(_ name: String) throws(Refusal) -> Date? {
            guard let text = values[name] else { return nil }
            if let date = Self.parseTime(text) { return date }
            throw Refusal.badParameter(name, "must be an ISO 8601 time such as 2026-11-25T07:00:00Z, or a day such as 2026-11-25")
        }

        static func parseTime(_ text: String) -> Date? {
            if let date = Timestamp.date(text) { return date }
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = [.withInternetDateTime]
            if let date = formatter.date(from: text) { return date }
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            if let date = formatter.date(from: text) { return date }
            formatter.formatOptions = [.withFullDate]
            formatter.timeZone = TimeZone(identifier: "UTC")
            return text.count == 10 ? formatter.date(from: text) : nil
        }
    }
}

/// `GET /v1/records/set-aside`: the records the database could not hold as they came, newest first.
struct SetAsidePage: Codable, Sendable {
    var records: [SetAsideRecord]
}
