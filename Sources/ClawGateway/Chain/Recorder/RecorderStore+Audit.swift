import Foundation
import Logging
import PostgresNIO

/// The audit trail of the chain's recorder (SPEC §16): its own operators'
/// changes (adjust, ship, exchange, shipped, delivered), each written in the
/// transaction of the change, before the answer. Append-only: the database
/// refuses UPDATE and DELETE of an entry. `site` is null for the recorder's
/// own entries; the sites' entries do not travel here yet.
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
            address text
        )
        """,
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

    /// The entries `query` asks for, newest first.
    func audit(_ query: AuditQuery) async throws -> [AuditEntry] {
        try await migrate()
        let since = query.since ?? .distantPast
        let (limit, offset) = (query.limit, query.offset)
        let (name, target, action) = (query.operatorName, query.target, query.action?.rawValue)
        return try await timed { [client, logger] in
            var entries: [AuditEntry] = []
            for try await (seq, at, operatorName, action, target, before, after, reason, address) in try await client.query(
                """
                SELECT seq, at, operator, action, target, before::text, after::text, reason, address FROM audit
                WHERE at >= \(since) AND (\(name)::text IS NULL OR operator = \(name))
                  AND (\(target)::text IS NULL OR target = \(target)) AND (\(action)::text IS NULL OR action = \(action))
                ORDER BY seq DESC LIMIT \(limit) OFFSET \(offset)
                """, logger: logger
            ).decode((Int64, Date, String, String, String, String, String, String?, String?).self) {
                entries.append(
                    AuditEntry(
                        seq: seq, at: at, operatorName: operatorName, action: AuditAction(rawValue: action) ?? .reload, target: target,
                        before: AuditValue(json: before), after: AuditValue(json: after), reason: reason, address: address))
            }
            return entries
        }
    }
}
