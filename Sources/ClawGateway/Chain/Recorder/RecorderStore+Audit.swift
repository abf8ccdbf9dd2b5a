import Foundation
import Logging
import PostgresNIO
import Protocol

/// The audit trail of the chain's recorder (SPEC §16): its own operators'
/// changes (adjust, ship, exchange, shipped, delivered), each written in the
/// transaction of the change, before the answer. Append-only: the database
/// refuses UPDATE and DELETE of an entry. The sites' entries travel here
/// with their records (``ChainAuditRecord``), in their numbering: `site`,
/// `epoch`, `site_seq`; null for the recorder's own. A site's correction of
/// a game's result is kept in `game_corrections`, every one, and the game
/// counts as its latest (`games.corrected`), whichever of the two came first.
extension RecorderStore {
    static let auditMigration: [String] = [
        """
        CREATE TABLE audit (
            seq bigserial PRIMARY KEY,
            site text,
            at timestamptz NOT NULL,
            operator text NOT NULL,
            action text NOT NULL,
            target text NOT NULL,
            before jsonb NOT NULL,
            after jsonb NOT NULL,
            reason text,
            address text,
            epoch text,
            site_seq bigint,
            CONSTRAINT audit_site_place UNIQUE (site, epoch, site_seq)
        )
        """,
        """
        CREATE TABLE game_corrections (
            site text NOT NULL,
            epoch text NOT NULL,
            site_seq bigint NOT NULL,
            game text NOT NULL,
            corrected jsonb NOT NULL,
            PRIMARY KEY (site, epoch, site_seq)
        )
        """,
        "CREATE INDEX game_corrections_game ON game_corrections (site, game, site_seq)",
        "ALTER TABLE games ADD COLUMN corrected jsonb",
        // SPEC §16's fairness figures: whether a game's coin was the full-power grab.
        "ALTER TABLE games ADD COLUMN strong boolean NOT NULL DEFAULT false",
        "CREATE INDEX audit_operator ON audit (operator, seq)",
        "CREATE INDEX audit_target ON audit (target, seq)",
        """
        CREATE FUNCTION audit_never_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'audit entries are never changed or deleted'; END $$
        """,
        "CREATE TRIGGER audit_append_only BEFORE UPDATE OR DELETE ON audit FOR EACH ROW EXECUTE FUNCTION audit_never_changed()",
        "CREATE TRIGGER audit_never_truncated BEFORE TRUNCATE ON audit FOR EACH STATEMENT EXECUTE FUNCTION audit_never_changed()",
    ]

    /// Appends `entry` in the caller's transaction.
    static func appendAudit(_ entry: AuditEntry, _ connection: PostgresConnection, _ logger: Logger) async throws {
        let (before, after) = (entry.before.json, entry.after.json)
        try await connection.query(
            """
            INSERT INTO audit (at, operator, action, target, before, after, reason, address)
            VALUES (\(entry.at), \(entry.operatorName), \(entry.action.rawValue), \(entry.target), \(before)::jsonb, \(after)::jsonb,
                    \(entry.reason), \(entry.address))
            """, logger: logger)
    }

    /// The entries `query` asks for, newest first: the recorder's own and
    /// every site's (`site` narrows to one).
    func audit(_ query: AuditQuery) async throws -> [AuditEntry] {
        try await migrate()
        let since = query.since ?? .distantPast
        let (limit, offset) = (query.limit, query.offset)
        let (name, target, action, site) = (query.operatorName, query.target, query.action?.rawValue, query.site)
        return try await timed { [client, logger] in
            var entries: [AuditEntry] = []
            for try await (seq, site, at, operatorName, action, target, before, after, reason, address) in try await client.query(
                """
                SELECT seq, site, at, operator, action, target, before::text, after::text, reason, address FROM audit
                WHERE at >= \(since) AND (\(name)::text IS NULL OR operator = \(name))
                  AND (\(target)::text IS NULL OR target = \(target)) AND (\(action)::text IS NULL OR action = \(action))
                  AND (\(site)::text IS NULL OR site = \(site))
                ORDER BY seq DESC LIMIT \(limit) OFFSET \(offset)
                """, logger: logger
            ).decode((Int64, String?, Date, String, String, String, String, String, String?, String?).self) {
                entries.append(
                    AuditEntry(
                        seq: seq, site: site, at: at, operatorName: operatorName, action: AuditAction(rawValue: action) ?? .reload,
                        target: target, before: AuditValue(json: before), after: AuditValue(json: after), reason: reason, address: address))
            }
            return entries
        }
    }

    /// Writes a site's audit entry at its place (and a correction's new
    /// version of its game), and moves the site's progress, in one
    /// transaction. Throws ``Refused`` for an entry the database will never take.
    func write(_ record: ChainAuditRecord) async throws -> Written {
        try await migrate()
        let (site, epoch, seq, entry) = (record.site, record.epoch, record.seq, record.audit)
        let (before, after) = (entry.before.json, entry.after.json)
        let correction = record.correction.map { ($0.game, String(decoding: JSONCoding.encode($0.correction), as: UTF8.self)) }
        do {
            return try await timed { [client, logger] in
                try await client.withTransaction(logger: logger) { connection -> Written in
                    try await Self.lockProgress(site: site, epoch: epoch, connection, logger)
                    let inserted = try await connection.query(
                        """
                        INSERT INTO audit (site, epoch, site_seq, at, operator, action, target, before, after, reason, address)
                        VALUES (\(site), \(epoch), \(seq), \(entry.at), \(entry.operatorName), \(entry.action.rawValue), \(entry.target),
                                \(before)::jsonb, \(after)::jsonb, \(entry.reason), \(entry.address))
                        ON CONFLICT (site, epoch, site_seq) DO NOTHING
                        RETURNING 1
                        """, logger: logger
                    ).collect().count == 1
                    if inserted, let (game, corrected) = correction {
                        try await connection.query(
                            """
                            INSERT INTO game_corrections (site, epoch, site_seq, game, corrected)
                            VALUES (\(site), \(epoch), \(seq), \(game), \(corrected)::jsonb)
                            """, logger: logger)
                        try await Self.applyCorrections(site: site, game: game, connection, logger)
                    }
                    let upto = try await Self.advance(site: site, epoch: epoch, connection, logger)
                    return Written(inserted: inserted, upto: upto)
                }
            }
        } catch {
            if let refusal = Self.dataRefusal(error) { throw refusal }
            throw error
        }
    }

    /// The game counts as its latest correction, if any: run when either the
    /// correction or the game's record arrives, so their order does not matter.
    static func applyCorrections(site: String, game: String, _ connection: PostgresConnection, _ logger: Logger) async throws {
        try await connection.query(
            """
            UPDATE games SET corrected = (
                SELECT c.corrected FROM game_corrections c WHERE c.site = \(site) AND c.game = \(game)
                ORDER BY c.epoch = games.epoch DESC, c.site_seq DESC LIMIT 1)
            WHERE site = \(site) AND id = \(game)
              AND EXISTS (SELECT 1 FROM game_corrections c WHERE c.site = \(site) AND c.game = \(game))
            """, logger: logger)
    }

    /// Each machine's odds over the games that ended since `since` (SPEC
    /// §16): counted as corrected, with the credits they took from the
    /// chain's wallets (nil without them) and the cost of the prizes won.
    func fairness(site: String?, machine: String?, since: Date, credits: Bool) async throws -> [MachineFairness] {
        let query: PostgresQuery = """
            SELECT g.site, g.machine,
                   count(*) FILTER (WHERE g.counted IN ('won', 'lost')) AS games,
                   count(*) FILTER (WHERE g.counted = 'won') AS wins,
                   count(*) FILTER (WHERE g.strong AND g.counted IN ('won', 'lost')) AS strong_games,
                   count(*) FILTER (WHERE g.strong AND g.counted = 'won') AS strong_wins,
                   COALESCE(sum(l.taken), 0)::bigint AS credits_taken,
                   COALESCE(sum(p.cost), 0)::bigint AS prize_cost
            FROM (SELECT site, machine, id, strong, \(unescaped: Self.countedOutcome) AS counted FROM games
                  WHERE ended_at >= \(since) AND (\(site)::text IS NULL OR site = \(site))
                    AND (\(machine)::text IS NULL OR machine = \(machine))) g
            LEFT JOIN (SELECT key, -sum(credits) AS taken FROM ledger WHERE kind IN ('debit', 'refund') GROUP BY key) l ON l.key = g.id
            LEFT JOIN prizes p ON p.site = g.site AND p.game = g.id
            GROUP BY g.site, g.machine
            ORDER BY g.site, g.machine
            """
        return try await read(query) { rows in
            var machines: [MachineFairness] = []
            for try await (site, machine, games, wins, strongGames, strongWins, taken, cost) in rows.decode(
                (String, String, Int64, Int64, Int64, Int64, Int64, Int64).self)
            {
                machines.append(
                    MachineFairness(
                        site: site, machine: machine,
                        figures: FairnessFigures(
                            games: Int(games), wins: Int(wins), strongGames: Int(strongGames), strongWins: Int(strongWins),
                            creditsTaken: credits ? taken : nil, prizeCost: cost)))
            }
            return machines
        }
    }

    /// The outcome the figures count, in SQL over `games`: the latest correction's when corrected (SPEC §16).
    static let countedOutcome = "COALESCE(corrected->>'outcome', outcome)"
}

/// One machine's row of `GET /v1/report/fairness` (SPEC §16): its site and
/// id, and the figures a site's own report of it has.
struct MachineFairness: Sendable, Equatable, Encodable {
    var site: String
    var machine: String
    var figures: FairnessFigures

    private enum CodingKeys: String, CodingKey { case site, machine }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(site, forKey: .site)
        try container.encode(machine, forKey: .machine)
        try figures.encode(to: encoder)
    }
}

/// `GET /v1/report/fairness`: each machine's odds since `since`.
struct FairnessReportPage: Sendable, Encodable {
    var since: String
    var machines: [MachineFairness]
}
