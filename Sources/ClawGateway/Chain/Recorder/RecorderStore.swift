import Foundation
import Logging
import NIOCore
import PostgresNIO
import Protocol
import Synchronization

/// The chain's games in PostgreSQL (SPEC §10), through postgres-nio's
/// ``PostgresClient`` (its `run()` is a service of the recorder's group).
///
/// Tables, created and migrated by the recorder at start (`schema_version`
/// says how far):
/// - `games`: the §5 game, plus `site`, the site file's `epoch`, the site's
///   `seq` in it and `received_at`; unique by `(site, id)`, so that a record
///   sent twice, or written by two recorders at once, is one row.
/// - `set_aside(site, epoch, seq, reason, payload)`: records the database
///   cannot hold as they are (a field too long, values no game has), kept
///   as they came for an operator to see, so that they never stop the
///   records behind them.
/// - `sites_progress(site, epoch, upto)`: every record of the site's epoch
///   with a sequence from 1 to `upto` is in `games` or set aside.
///
/// A record is written in one transaction: the progress row of its site and
/// epoch locked (every recorder writing that site waits its turn there), the
/// game inserted unless it is there (or the record set aside), and `upto`
/// moved over every consecutive sequence now present. `upto` is computed in
/// the database from the rows, never from what one recorder remembers, so
/// records arriving out of order, twice, or at another recorder still give
/// the right figure.
///
/// Reads (the history routes) never take the connections the writer needs:
/// at most ``maxReads`` run at once, each within a statement timeout.
final class RecorderStore: Sendable {
    let client: PostgresClient
    let url: DatabaseURL
    let logger: Logger
    private let state = Mutex(StoreState())
    /// The readers' share of the pool (``read(_:_:)``).
    private let reads = ReadGate(permits: RecorderStore.maxReads)
    /// How long one statement (or the transaction of one record) may take
    /// before the database counts as unreachable.
    static let timeout: Duration = .seconds(5)

    private struct StoreState {
        /// The last statement reached the database (nil: none tried yet).
        var up: Bool?
        var migrated = false
        var problem: String?
    }

    init(url: DatabaseURL, logger: Logger) {
        self.url = url
        self.logger = logger
        var configuration = PostgresClient.Configuration(
            host: url.host, port: url.port, username: url.username, password: url.password, database: url.database,
            tls: Self.tls(url.tls))
        configuration.options.connectTimeout = .seconds(3)
        configuration.options.maximumConnections = Self.maxConnections
        configuration.options.keepAliveBehavior = .init(frequency: .seconds(10))
        // postgres-nio logs every failed connection attempt; the recorder says
        // once that the database is down, and on readyz and in metrics.
        var background = logger
        background.logLevel = .critical
        client = PostgresClient(configuration: configuration, backgroundLogger: background)
    }

    private static func tls(_ mode: DatabaseURL.TLSMode) -> PostgresClient.Configuration.TLS {
        switch mode {
        case .disable: .disable
        case .prefer: .prefer(.makeClientConfiguration())
        case .require: .require(.makeClientConfiguration())
        }
    }

    /// Whether the last statement reached the database and the schema is in place.
    var isUp: Bool { state.withLock { $0.up == true && $0.migrated } }

    /// Why the database cannot be written now, or nil.
    var problem: String? {
        state.withLock { state in
            if state.up == nil { return "the recorder has not reached the database \(url) yet" }
            if let problem = state.problem { return problem }
            if !state.migrated { return "the database schema is not in place yet" }
            return nil
        }
    }

    // MARK: Schema

    /// The schema's versions in order; `schema_version` holds the last applied.
    static let migrations: [[String]] = [
        [
            """
            CREATE TABLE games (
                site text NOT NULL,
                id text NOT NULL,
                seq bigint NOT NULL,
                machine text NOT NULL,
                player text NOT NULL,
                provider text NOT NULL,
                nick text NOT NULL,
                outcome text,
                offered_at timestamptz NOT NULL,
                started_at timestamptz,
                ended_at timestamptz,
                commands integer NOT NULL,
                received_at timestamptz NOT NULL DEFAULT now(),
                CONSTRAINT games_site_id UNIQUE (site, id)
            )
            """,
            "CREATE INDEX games_site_seq ON games (site, seq)",
            "CREATE INDEX games_offered ON games (offered_at DESC)",
            "CREATE INDEX games_site_machine_offered ON games (site, machine, offered_at DESC)",
            "CREATE INDEX games_player_offered ON games (player, offered_at DESC)",
            "CREATE TABLE sites_progress (site text PRIMARY KEY, upto bigint NOT NULL DEFAULT 0)",
        ],
        // SPEC §10: a site's numbering is per epoch of its SQLite file; records
        // the database cannot hold are set aside, never retried for ever.
        [
            "ALTER TABLE games ADD COLUMN epoch text NOT NULL DEFAULT ''",
            "ALTER TABLE sites_progress ADD COLUMN epoch text NOT NULL DEFAULT ''",
            "ALTER TABLE sites_progress DROP CONSTRAINT sites_progress_pkey",
            "ALTER TABLE sites_progress ADD PRIMARY KEY (site, epoch)",
            "DROP INDEX games_site_seq",
            "CREATE INDEX games_site_epoch_seq ON games (site, epoch, seq)",
            """
            CREATE TABLE set_aside (
                site text NOT NULL,
                epoch text NOT NULL,
                seq bigint NOT NULL,
                reason text NOT NULL,
                payload text NOT NULL,
                received_at timestamptz NOT NULL DEFAULT now(),
                PRIMARY KEY (site, epoch, seq)
            )
            """,
        ],
        // SPEC §11: the chain's wallets (RecorderStore+Ledger.swift).
        ledgerMigration,
        // SPEC §11: sessions a site closed with a refund that found no debit.
        closedSessionsMigration,
        // SPEC §14: the chain's records carry their clips' metadata (the clips stay at their site).
        [
            "ALTER TABLE games ADD COLUMN evidence jsonb",
            "ALTER TABLE games ADD COLUMN evidence_missing jsonb",
        ],
        // SPEC §9: a debit only with a router's voucher, each used once.
        vouchersMigration,
        // SPEC §11: an operator's adjustment is keyed, once per wallet.
        adjustKeysMigration,
        // SPEC §11, §15: a prize taken as credits is a ledger entry of its own kind.
        exchangeMigration,
        // SPEC §15: the prizes the records carry, and the parcels they are shipped in.
        prizesMigration,
        // SPEC §16: the recorder's own audit trail (RecorderStore+Audit.swift).
        auditMigration,
    ]

    /// Brings the schema to the last version, under an advisory lock: two
    /// recorders starting at once migrate one after the other.
    func migrate() async throws {
        if state.withLock({ $0.migrated }) { return }
        try await timed { [client, logger] in
            try await client.withTransaction(logger: logger) { connection in
                try await connection.query("SELECT pg_advisory_xact_lock(\(Self.migrationLock))", logger: logger)
                try await connection.query("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)", logger: logger)
                var version = 0
                for try await (value) in try await connection.query("SELECT max(version) FROM schema_version", logger: logger)
                    .decode(Int?.self)
                {
                    version = value ?? 0
                }
                guard version < Self.migrations.count else { return }
                for (index, statements) in Self.migrations.enumerated() where index >= version {
                    for statement in statements {
                        try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                    }
                }
                try await connection.query("DELETE FROM schema_version", logger: logger)
                try await connection.query("INSERT INTO schema_version (version) VALUES (\(Self.migrations.count))", logger: logger)
                logger.info("Database schema migrated", metadata: ["db.from": "\(version)", "db.to": "\(Self.migrations.count)"])
            }
        }
        state.withLock { $0.migrated = true }
    }

    /// A key of the advisory lock the migrations hold ("claw" in ASCII).
    private static let migrationLock: Int64 = 0x636C_6177

    /// Reaches the database (and migrates it, the first time): up or down
    /// with the reason, for `readyz`. Returns whether it is up.
    @discardableResult
    func probe() async -> Bool {
        do {
            try await migrate()
            try await timed { [client] in _ = try await client.query("SELECT 1").collect() }
            return true
        } catch {
            return false
        }
    }

    // MARK: Writing

    struct Written: Sendable, Equatable {
        /// False: the game was already there (sent again, or written by another recorder).
        var inserted: Bool
        /// The site's contiguous progress after this record.
        var upto: Int64
    }

    /// A record the database refused as data (a value it cannot hold): never
    /// written, not retried.
    struct Refused: Error, CustomStringConvertible {
        var description: String
    }

    /// Writes `record` (the game, and its site's progress) in one transaction.
    /// Throws ``Refused`` for a record the database will never take, any other
    /// error while the database cannot be reached.
    func write(_ record: ValidRecord) async throws -> Written {
        try await migrate()
        let game = record.record.game
        let (site, epoch, seq) = (record.record.site, record.record.epoch, record.record.seq)
        let outcome = game.outcome?.rawValue
        let commands = Int32(clamping: game.commands)
        let evidence = game.evidence.map { String(decoding: JSONCoding.encode($0), as: UTF8.self) }
        let missing = game.evidenceMissing.map { String(decoding: JSONCoding.encode($0), as: UTF8.self) }
        do {
            return try await timed { [client, logger] in
                try await client.withTransaction(logger: logger) { connection -> Written in
                    try await Self.lockProgress(site: site, epoch: epoch, connection, logger)
                    let inserted = try await connection.query(
                        """
                        INSERT INTO games (site, epoch, id, seq, machine, player, provider, nick, outcome, offered_at, started_at, ended_at, commands,
                                           evidence, evidence_missing, strong)
                        VALUES (\(site), \(epoch), \(game.id), \(seq), \(game.machine), \(game.player), \(game.provider), \(game.nick), \(outcome),
                                \(record.offeredAt), \(record.startedAt), \(record.endedAt), \(commands), \(evidence)::jsonb, \(missing)::jsonb,
                                \(game.strong))
                        ON CONFLICT (site, id) DO NOTHING
                        RETURNING 1
                        """, logger: logger
                    ).collect().count == 1
                    // Its prize travels with it (SPEC §15): once per game; its state is the chain's from now on.
                    if let prize = game.prize, let wonAt = record.prizeWonAt {
                        try await Self.insert(prize, wonAt: wonAt, of: game, site: site, connection, logger)
                    }
                    // A correction that came before its game's record (SPEC §16).
                    if inserted { try await Self.applyCorrections(site: site, game: game.id, connection, logger) }
                    let upto = try await Self.advance(site: site, epoch: epoch, connection, logger)
                    return Written(inserted: inserted, upto: upto)
                }
            }
        } catch {
            if let refusal = Self.dataRefusal(error) { throw refusal }
            throw error
        }
    }

    /// Sets a record aside at its place (site, epoch, seq), as it came, with
    /// why, and moves the site's progress over it: the records behind it go on.
    func setAside(site: String, epoch: String, seq: Int64, reason: String, payload: [UInt8]) async throws -> Written {
        try await migrate()
        // PostgreSQL's text holds no NUL; what came is kept readable.
        let text = String(decoding: payload.prefix(Self.maxSetAsideBytes), as: UTF8.self).replacingOccurrences(of: "\u{0}", with: "\\u0000")
        return try await timed { [client, logger] in
            try await client.withTransaction(logger: logger) { connection -> Written in
                try await Self.lockProgress(site: site, epoch: epoch, connection, logger)
                let inserted = try await connection.query(
                    """
                    INSERT INTO set_aside (site, epoch, seq, reason, payload) VALUES (\(site), \(epoch), \(seq), \(reason), \(text))
                    ON CONFLICT (site, epoch, seq) DO NOTHING
                    RETURNING 1
                    """, logger: logger
                ).collect().count == 1
                return Written(inserted: inserted, upto: try await Self.advance(site: site, epoch: epoch, connection, logger))
            }
        }
    }

    /// What of a set-aside record's payload is kept.
    static let maxSetAsideBytes = 64 << 10

    /// The progress row of a site's epoch, locked: recorders writing it take turns here.
    /// Makes this transaction's COMMIT wait for its WAL on disk, whatever
    /// the database's `synchronous_commit`: what the recorder acknowledges
    /// (a record, a debit, a top-up's 200) must outlive a crash of
    /// PostgreSQL, which a database tuned with `synchronous_commit = off`
    /// does not promise (the chaos run found debits lost that way).
    static func commitDurably(_ connection: PostgresConnection, _ logger: Logger) async throws {
        try await connection.query("SET LOCAL synchronous_commit = on", logger: logger)
    }

    static func lockProgress(site: String, epoch: String, _ connection: PostgresConnection, _ logger: Logger) async throws {
        try await commitDurably(connection, logger)
        try await connection.query(
            """
            INSERT INTO sites_progress (site, epoch, upto) VALUES (\(site), \(epoch), 0)
            ON CONFLICT (site, epoch) DO UPDATE SET upto = sites_progress.upto
            """, logger: logger)
    }

    /// Moves the progress of a site's epoch over every consecutive sequence
    /// now written (a game's record or an audit entry) or set aside, and returns it.
    static func advance(site: String, epoch: String, _ connection: PostgresConnection, _ logger: Logger) async throws -> Int64 {
        var upto: Int64 = 0
        for try await value in try await connection.query(
            """
            UPDATE sites_progress SET upto = (
                WITH RECURSIVE run(n) AS (
                    SELECT p.upto FROM sites_progress p WHERE p.site = \(site) AND p.epoch = \(epoch)
                    UNION ALL
                    SELECT run.n + 1 FROM run
                    WHERE EXISTS (SELECT 1 FROM games g WHERE g.site = \(site) AND g.epoch = \(epoch) AND g.seq = run.n + 1)
                       OR EXISTS (SELECT 1 FROM set_aside a WHERE a.site = \(site) AND a.epoch = \(epoch) AND a.seq = run.n + 1)
                       OR EXISTS (SELECT 1 FROM audit u WHERE u.site = \(site) AND u.epoch = \(epoch) AND u.site_seq = run.n + 1)
                )
                SELECT max(n) FROM run
            )
            WHERE site = \(site) AND epoch = \(epoch)
            RETURNING upto
            """, logger: logger
        ).decode(Int64.self) {
            upto = value
        }
        return upto
    }

    /// The database's refusal of the values themselves, which no retry
    /// mends: SQLSTATE class 22 (data exception: a NUL byte in a name, a
    /// number out of range), 23 (a constraint) and 54 (a program limit: a
    /// value too long for an index row).
    static func dataRefusal(_ error: any Error) -> Refused? {
        var error: (any Error)? = error
        if let transaction = error as? PostgresTransactionError { error = transaction.closureError ?? transaction.commitError }
        guard let psql = error as? PSQLError, let state = psql.serverInfo?[.sqlState], ["22", "23", "54"].contains(String(state.prefix(2)))
        else { return nil }
        return Refused(description: "\(state): \(psql.serverInfo?[.message] ?? "the database refuses the values")")
    }

    /// Runs `body` within ``timeout`` and notes whether the database
    /// answered: a statement that cannot reach it fails after the timeout
    /// rather than waiting for a connection that never comes.
    ///
    /// The timeout does not wait for `body` to end: a transaction begun
    /// while PostgreSQL was going down can hang in postgres-nio without
    /// heeding cancellation, and a task group (which waits for every child)
    /// hung the recorder's writer with it for good, `readyz` saying ready.
    /// `body` is cancelled and left to end by itself: the two unstructured
    /// tasks below are that workaround. Upstream, postgres-nio has no query
    /// timeout and a stuck query cannot be cancelled nor its connection closed
    /// (vapor/postgres-nio#274, open); once it has one, this is a task group.
    func timed<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        do {
            let race = FirstAnswer<T>()
            let value = try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T, any Error>) in
                    race.start(continuation)
                    let work = Task {
                        do { race.answer(.success(try await body())) } catch { race.answer(.failure(error)) }
                    }
                    let timer = Task {
                        try? await Task.sleep(for: Self.timeout)
                        if race.answer(.failure(DatabaseTimeout())) { work.cancel() }
                    }
                    race.onAnswer { timer.cancel() }
                }
            } onCancel: {
                race.answer(.failure(CancellationError()))
            }
            reached(nil)
            return value
        } catch {
            if Self.dataRefusal(error) != nil {
                reached(nil)
            } else if !(error is CancellationError) {
                reached(error)
            }
            throw error
        }
    }

    /// The first of several answers resumes the continuation; the others are dropped.
    private final class FirstAnswer<T: Sendable>: Sendable {
        private struct Waiting {
            var continuation: CheckedContinuation<T, any Error>?
            var early: Result<T, any Error>?
            var answered = false
            var onAnswer: (@Sendable () -> Void)?
        }

        private let state = Mutex(Waiting())

        func start(_ continuation: CheckedContinuation<T, any Error>) {
            let early = state.withLock { state -> Result<T, any Error>? in
                guard let early = state.early else {
                    state.continuation = continuation
                    return nil
                }
                return early
            }
            if let early { continuation.resume(with: early) }
        }

        func onAnswer(_ action: @escaping @Sendable () -> Void) {
            let now = state.withLock { state -> Bool in
                if state.answered { return true }
                state.onAnswer = action
                return false
            }
            if now { action() }
        }

        /// True when this was the first answer.
        @discardableResult
        func answer(_ result: Result<T, any Error>) -> Bool {
            let (first, continuation, action) = state.withLock { state -> (Bool, CheckedContinuation<T, any Error>?, (@Sendable () -> Void)?) in
                guard !state.answered else { return (false, nil, nil) }
                state.answered = true
                if state.continuation == nil { state.early = result }
                defer { state.continuation = nil; state.onAnswer = nil }
                return (true, state.continuation, state.onAnswer)
            }
            continuation?.resume(with: result)
            action?()
            return first
        }
    }

    private struct DatabaseTimeout: Error, CustomStringConvertible {
        var description: String { "no answer within \(RecorderStore.timeout)" }
    }

    private func reached(_ error: (any Error)?) {
        let url = url
        let change = state.withLock { state -> (was: Bool?, now: Bool) in
            let was = state.up
            state.up = error == nil
            state.problem = error.map { "the database \(url) cannot be written: \(Self.describe($0))" }
            return (was, error == nil)
        }
        guard change.was != change.now else { return }
        if change.now {
            logger.info("Database reachable", metadata: ["db.url": "\(url)"])
        } else {
            logger.error(
                "Database unreachable: nothing is acknowledged until it is back; retrying",
                metadata: Self.shape(error, "reach the database").metadata(["db.url": "\(url)"]))
        }
    }

    /// A short reason, without postgres-nio's query dump.
    /// A database failure in the one error shape operators read (code
    /// `database`, what failed, PostgreSQL's own words as the cause).
    static func shape(_ error: (any Error)?, _ what: String) -> ErrorShape {
        ErrorShape(code: "database", message: "could not \(what)", cause: error.map(describe))
    }

    static func describe(_ error: any Error) -> String {
        var error = error
        if let transaction = error as? PostgresTransactionError,
            let inner = transaction.beginError ?? transaction.closureError ?? transaction.commitError
        {
            error = inner
        }
        if let psql = error as? PSQLError {
            if let message = psql.serverInfo?[.message] { return "\(psql.serverInfo?[.sqlState] ?? "") \(message)" }
            if let underlying = psql.underlying { return "\(psql.code): \(underlying)" }
            return "\(psql.code)"
        }
        return "\(error)"
    }

    // MARK: Reading

    /// A page of games, newest first (by `offered_at`, then site and id).
    func games(_ filter: GameFilter) async throws -> [ChainGame] {
        // A filter left out is a null parameter, which matches every row.
        let query: PostgresQuery = """
            SELECT site, id, machine, player, provider, nick, outcome, offered_at, started_at, ended_at, commands,
                   evidence::text, evidence_missing::text, corrected::text
            FROM games
            WHERE (\(filter.site)::text IS NULL OR site = \(filter.site))
              AND (\(filter.machine)::text IS NULL OR machine = \(filter.machine))
              AND (\(filter.player)::text IS NULL OR player = \(filter.player))
              AND (\(filter.provider)::text IS NULL OR provider = \(filter.provider))
              AND (\(filter.outcome?.rawValue)::text IS NULL OR \(unescaped: Self.countedOutcome) = \(filter.outcome?.rawValue))
              AND (\(filter.since)::timestamptz IS NULL OR offered_at >= \(filter.since))
              AND (\(filter.until)::timestamptz IS NULL OR offered_at < \(filter.until))
            ORDER BY offered_at DESC, site, id
            LIMIT \(Int64(filter.limit)) OFFSET \(Int64(filter.offset))
            """
        return try await read(query) { rows in
            var games: [ChainGame] = []
            for try await (site, id, machine, player, provider, nick, outcome, offered, started, ended, commands, evidence, missing, corrected)
                in rows.decode((String, String, String, String, String, String, String?, Date, Date?, Date?, Int32, String?, String?, String?).self)
            {
                var game = GameRecord(
                    id: id, machine: machine, player: player, provider: provider, nick: nick,
                    outcome: outcome.flatMap(GameOutcome.init(rawValue:)), offeredAt: Timestamp.string(offered),
                    startedAt: started.map(Timestamp.string), endedAt: ended.map(Timestamp.string), commands: Int(commands))
                game.evidence = evidence.flatMap { JSONCoding.decode([EvidenceClip].self, from: Array($0.utf8)) }
                game.evidenceMissing = missing.flatMap { JSONCoding.decode([EvidenceGap].self, from: Array($0.utf8)) }
                game.corrected = corrected.flatMap { JSONCoding.decode(GameCorrection.self, from: Array($0.utf8)) }
                games.append(ChainGame(site: site, game: game))
            }
            return games
        }
    }

    /// Per UTC day (of `offered_at`), site and machine, from `since` on.
    func daily(site: String?, machine: String?, since: Date) async throws -> [DailyFigures] {
        let query: PostgresQuery = """
            SELECT to_char(date_trunc('day', offered_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD') AS day, site, machine,
                   count(*) FILTER (WHERE started_at IS NOT NULL) AS games,
                   count(*) FILTER (WHERE \(unescaped: Self.countedOutcome) = 'won') AS wins,
                   count(*) FILTER (WHERE \(unescaped: Self.countedOutcome) = 'no_result') AS no_result
            FROM games
            WHERE offered_at >= \(since)
              AND (\(site)::text IS NULL OR site = \(site))
              AND (\(machine)::text IS NULL OR machine = \(machine))
            GROUP BY 1, 2, 3
            ORDER BY 1, 2, 3
            """
        return try await read(query) { rows in
            var days: [DailyFigures] = []
            for try await (day, site, machine, games, wins, noResult) in rows.decode(
                (String, String, String, Int64, Int64, Int64).self)
            {
                days.append(DailyFigures(day: day, site: site, machine: machine, games: Int(games), wins: Int(wins), noResult: Int(noResult)))
            }
            return days
        }
    }

    /// Games played (started) per UTC hour (of `offered_at`) and site, from `since` on.
    func hourly(site: String?, machine: String?, since: Date) async throws -> [HourlyFigures] {
        let query: PostgresQuery = """
            SELECT date_trunc('hour', offered_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour, site,
                   count(*) FILTER (WHERE started_at IS NOT NULL) AS games,
                   count(*) FILTER (WHERE \(unescaped: Self.countedOutcome) = 'won') AS wins
            FROM games
            WHERE offered_at >= \(since)
              AND (\(site)::text IS NULL OR site = \(site))
              AND (\(machine)::text IS NULL OR machine = \(machine))
            GROUP BY 1, 2
            ORDER BY 1, 2
            """
        return try await read(query) { rows in
            var hours: [HourlyFigures] = []
            for try await (hour, site, games, wins) in rows.decode((Date, String, Int64, Int64).self) {
                hours.append(HourlyFigures(hour: Timestamp.string(hour), site: site, games: Int(games), wins: Int(wins)))
            }
            return hours
        }
    }

    /// The records set aside, newest first.
    func setAside(site: String?, limit: Int, offset: Int) async throws -> [SetAsideRecord] {
        let query: PostgresQuery = """
            SELECT site, epoch, seq, reason, payload, received_at FROM set_aside
            WHERE (\(site)::text IS NULL OR site = \(site))
            ORDER BY received_at DESC, site, epoch, seq
            LIMIT \(Int64(limit)) OFFSET \(Int64(offset))
            """
        return try await read(query) { rows in
            var records: [SetAsideRecord] = []
            for try await (site, epoch, seq, reason, payload, received) in rows.decode((String, String, Int64, String, String, Date).self) {
                records.append(
                    SetAsideRecord(site: site, epoch: epoch, seq: seq, reason: reason, payload: payload, receivedAt: Timestamp.string(received)))
            }
            return records
        }
    }

    /// The progress of a site's epoch (tests, diagnostics).
    func upto(site: String, epoch: String = "") async throws -> Int64? {
        try await timed { [client] in
            var upto: Int64?
            for try await value in try await client.query(
                "SELECT upto FROM sites_progress WHERE site = \(site) AND epoch = \(epoch)"
            ).decode(Int64.self) {
                upto = value
            }
            return upto
        }
    }

    // MARK: The readers' share

    /// Reads running at once, at most: the pool has ``maxConnections``, and
    /// the writer (and the probe) always find one.
    static let maxReads = 4
    static let maxConnections = 8
    /// How long one read may run in the database.
    static let readTimeout = "5s"

    /// Runs a read with the readers' share of the pool: it waits its turn
    /// behind ``maxReads`` others, and PostgreSQL ends it at ``readTimeout``.
    func read<T: Sendable>(_ query: PostgresQuery, _ decode: @escaping @Sendable (PostgresRowSequence) async throws -> T) async throws -> T {
        try await reads.acquire()
        defer { reads.release() }
        return try await timed { [client, logger] in
            try await client.withTransaction(logger: logger) { connection in
                try await connection.query("SET LOCAL statement_timeout = '\(unescaped: Self.readTimeout)'", logger: logger)
                return try await decode(try await connection.query(query, logger: logger))
            }
        }
    }
}

/// A record the recorder set aside (`GET /v1/records/set-aside`).
struct SetAsideRecord: Codable, Sendable, Equatable {
    var site: String
    var epoch: String
    var seq: Int64
    var reason: String
    /// The record as it came (at most 64 KiB of it).
    var payload: String
    var receivedAt: String

    enum CodingKeys: String, CodingKey {
        case site, epoch, seq, reason, payload
        case receivedAt = "received_at"
    }
}

/// At most `permits` holders at once; the others wait their turn, in order,
/// and a cancelled waiter leaves the line.
final class ReadGate: Sendable {
    private struct Line {
        var free: Int
        var waiting: [(id: Int, continuation: CheckedContinuation<Void, any Error>)] = []
        var next = 0
    }

    private let line: Mutex<Line>

    init(permits: Int) {
        line = Mutex(Line(free: permits))
    }

    func acquire() async throws {
        let id = line.withLock { line -> Int in
            line.next += 1
            return line.next
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                enum Turn { case now, later, cancelled }
                let turn = line.withLock { line -> Turn in
                    // Cancelled before it could be in line: its handler found nothing to take out.
                    if Task.isCancelled { return .cancelled }
                    if line.free > 0, line.waiting.isEmpty {
                        line.free -= 1
                        return .now
                    }
                    line.waiting.append((id, continuation))
                    return .later
                }
                switch turn {
                case .now: continuation.resume()
                case .cancelled: continuation.resume(throwing: CancellationError())
                case .later: break
                }
            }
        } onCancel: {
            let left = line.withLock { line -> CheckedContinuation<Void, any Error>? in
                guard let index = line.waiting.firstIndex(where: { $0.id == id }) else { return nil }
                return line.waiting.remove(at: index).continuation
            }
            left?.resume(throwing: CancellationError())
        }
    }

    func release() {
        let next = line.withLock { line -> CheckedContinuation<Void, any Error>? in
            guard !line.waiting.isEmpty else {
                line.free += 1
                return nil
            }
            return line.waiting.removeFirst().continuation
        }
        next?.resume()
    }
}
