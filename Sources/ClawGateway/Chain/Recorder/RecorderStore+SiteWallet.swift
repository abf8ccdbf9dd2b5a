import Foundation
import PostgresNIO
import Protocol

/// A site's debits and refunds in the chain's ledger (SPEC §11): each one
/// transaction, with the wallet's row locked first (as every change to a
/// wallet is, ``RecorderStore/append(_:)``), keyed by the game's session.
///
/// - A debit asked twice is written once: the second finds the first (same
///   wallet, same site) and is answered `debited` again.
/// - A refund pays back exactly what the session's debit took, once, and
///   only to the wallet and site the debit was for.
/// - A refund that finds no debit closes the session for its site: the site
///   asks it for every turn whose debit it asked and whose game never
///   started, and a debit still on its way (delivered after the refund)
///   must then be refused, or it would take credits for no game.
extension RecorderStore {
    static let closedSessionsMigration = [
        """
        CREATE TABLE closed_sessions (
            site text NOT NULL,
            session text NOT NULL,
            at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (site, session)
        )
        """
    ]

    /// Longest session, account and provider a site may name; anything longer is refused.
    static let maxWalletField = 256

    /// Answers a site's debit or refund, once the ledger's transaction is
    /// committed; throws when the database cannot be reached (nothing
    /// answered: the site's ask times out, its refund is sent again).
    func settle(_ ask: ChainWalletAsk, site: String) async throws -> ChainWalletAnswer {
        try await migrate()
        do {
            return try await settleOnce(ask, site: site)
        } catch where Self.isUniqueViolation(error) {
            // Another wallet's entry with this session, written between our look and our insert.
            return try await settleOnce(ask, site: site)
        }
    }

    private func settleOnce(_ ask: ChainWalletAsk, site: String) async throws -> ChainWalletAnswer {
        let (provider, account, session, credits) = (ask.provider, ask.account, ask.session, ask.credits)
        let kind = ask.kind
        return try await timed { [client, logger] in
            try await client.withTransaction(logger: logger) { connection -> ChainWalletAnswer in
                func answer(_ result: ChainWalletAnswer.Result, _ balance: Int64) -> ChainWalletAnswer {
                    ChainWalletAnswer(kind: kind, session: session, result: result, balance: balance)
                }
                func entry(_ kind: LedgerEntry.Kind, _ credits: Int64) -> LedgerEntry {
                    LedgerEntry(
                        wallet: PlayerAddress(accid: account, provider: provider), kind: kind, credits: credits, key: session, reason: nil,
                        digest: nil, at: Date())
                }
                let balance = try await RecorderStore.lockWallet(provider: provider, account: account, connection, logger)
                // The session's debit, if any: whose, from which site, how much.
                var debit: (provider: String, account: String, site: String?, credits: Int64)?
                for try await row in try await connection.query(
                    "SELECT provider, account, site, credits FROM ledger WHERE kind = 'debit' AND key = \(session)", logger: logger
                ).decode((String, String, String?, Int64).self) {
                    debit = row
                }
                let ours = debit.map { $0.provider == provider && $0.account == account && $0.site == site } ?? false
                switch kind {
                case .debit:
                    if debit != nil { return answer(ours ? .debited : .refused, balance) }
                    for try await _ in try await connection.query(
                        "SELECT 1 FROM closed_sessions WHERE site = \(site) AND session = \(session)", logger: logger
                    ).decode(Int.self) {
                        return answer(.refused, balance)
                    }
                    guard balance >= credits else { return answer(.insufficient, balance) }
                    try await RecorderStore.write(entry(.debit, -credits), site: site, after: balance - credits, connection, logger)
                    return answer(.debited, balance - credits)
                case .refund:
                    guard let debit, ours else {
                        try await connection.query(
                            "INSERT INTO closed_sessions (site, session) VALUES (\(site), \(session)) ON CONFLICT DO NOTHING", logger: logger)
                        return answer(.nothingToRefund, balance)
                    }
                    for try await _ in try await connection.query(
                        "SELECT 1 FROM ledger WHERE kind = 'refund' AND key = \(session)", logger: logger
                    ).decode(Int.self) {
                        return answer(.refunded, balance)
                    }
                    try await RecorderStore.write(entry(.refund, -debit.credits), site: site, after: balance - debit.credits, connection, logger)
                    return answer(.refunded, balance - debit.credits)
                }
            }
        }
    }
}
