import Foundation
import Logging
import PostgresNIO
import Protocol

/// The chain's prizes in PostgreSQL (SPEC §15): each arrives with its won
/// game's record (``write(_:)``, one transaction with the game), and from
/// then on the players' choices and the shipping are made here, for every
/// site at once: a player sees their prizes from every site in one list,
/// parcels are shipped centrally, and an exchange credits the chain's
/// wallet in the same transaction that marks the prize `exchanged`.
///
/// A change locks what it changes first (the prizes, `FOR UPDATE`, then the
/// wallet's row, as every change to a wallet locks it): two requests for one
/// prize, at one recorder or two, take turns, and the second finds the
/// first's state. PostgreSQL itself refuses a prize moving backwards or into
/// a second parcel, and a second exchange entry for a prize (the ledger's
/// one entry per kind and key).
extension RecorderStore {
    static let prizesMigration = [
        """
        CREATE TABLE parcels (
            id text PRIMARY KEY,
            provider text NOT NULL,
            account text NOT NULL,
            state text NOT NULL CHECK (state IN ('to_ship', 'shipped', 'delivered')),
            name text,
            phone text,
            address text,
            carrier text,
            tracking text,
            created_at timestamptz NOT NULL DEFAULT now(),
            shipped_at timestamptz,
            delivered_at timestamptz,
            forgotten_at timestamptz
        )
        """,
        "CREATE INDEX parcels_by_state ON parcels (state, created_at)",
        """
        CREATE TABLE prizes (
            id text PRIMARY KEY,
            site text NOT NULL,
            game text NOT NULL,
            machine text NOT NULL,
            provider text NOT NULL,
            account text NOT NULL,
            prize text NOT NULL,
            name text NOT NULL,
            cost bigint NOT NULL CHECK (cost >= 0),
            exchange bigint NOT NULL CHECK (exchange >= 0),
            won_at timestamptz NOT NULL,
            oversold boolean NOT NULL DEFAULT false,
            state text NOT NULL DEFAULT 'held' CHECK (state IN ('held', 'to_ship', 'shipped', 'delivered', 'exchanged')),
            parcel text REFERENCES parcels (id),
            changed_at timestamptz,
            CONSTRAINT prizes_site_game UNIQUE (site, game),
            CONSTRAINT prizes_parcel_state CHECK ((state IN ('held', 'exchanged')) = (parcel IS NULL))
        )
        """,
        "CREATE INDEX prizes_by_player ON prizes (provider, account, won_at DESC)",
        "CREATE INDEX prizes_by_parcel ON prizes (parcel) WHERE parcel IS NOT NULL",
        """
        CREATE FUNCTION prizes_forward() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.id <> OLD.id OR NEW.site <> OLD.site OR NEW.game <> OLD.game OR NEW.provider <> OLD.provider
                OR NEW.account <> OLD.account
                OR NOT ((OLD.state = NEW.state AND OLD.parcel IS NOT DISTINCT FROM NEW.parcel)
                    OR (OLD.state = 'held' AND NEW.state IN ('to_ship', 'exchanged') AND OLD.parcel IS NULL)
                    OR (OLD.state = 'to_ship' AND NEW.state = 'shipped' AND OLD.parcel = NEW.parcel)
                    OR (OLD.state = 'shipped' AND NEW.state = 'delivered' AND OLD.parcel = NEW.parcel)) THEN
                RAISE EXCEPTION 'a prize moves only forward, into one parcel at most';
            END IF;
            RETURN NEW;
        END $$
        """,
        "CREATE TRIGGER prizes_forward BEFORE UPDATE ON prizes FOR EACH ROW EXECUTE FUNCTION prizes_forward()",
    ]

    /// A record's prize, in the record's transaction: once per site and
    /// game. A prize id another site's prize has is refused as data: the
    /// record is set aside.
    static func insert(
        _ prize: WonPrize, wonAt: Date, of game: GameRecord, site: String, _ connection: PostgresConnection, _ logger: Logger
    ) async throws {
        try await connection.query(
            """
            INSERT INTO prizes (id, site, game, machine, provider, account, prize, name, cost, exchange, won_at, oversold)
            VALUES (\(prize.id), \(site), \(game.id), \(game.machine), \(game.provider), \(game.player), \(prize.prize), \(prize.name),
                    \(prize.cost), \(prize.exchange), \(wonAt), \(prize.oversold))
            ON CONFLICT (site, game) DO NOTHING
            """, logger: logger)
    }

    // MARK: Reading

    private static let prizeColumns = """
        id, site, game, machine, provider, account, prize, name, cost, exchange, won_at, oversold, state, parcel
        """

    private typealias PrizeColumns = (String, String, String, String, String, String, String, String, Int64, Int64, Date, Bool, String, String?)

    private static func prize(_ row: PrizeColumns) -> PrizeRow {
        let (id, site, game, machine, provider, account, prize, name, cost, exchange, wonAt, oversold, state, parcel) = row
        return PrizeRow(
            id: id, game: game, machine: machine, player: PlayerAddress(accid: account, provider: provider), prize: prize, name: name,
            cost: cost, exchange: exchange, wonAt: wonAt, oversold: oversold, state: PrizeState(rawValue: state) ?? .held, parcel: parcel,
            site: site)
    }

    private static let parcelColumns = """
        id, provider, account, state, name, phone, address, carrier, tracking, created_at, shipped_at, delivered_at
        """

    private typealias ParcelColumns = (String, String, String, String, String?, String?, String?, String?, String?, Date, Date?, Date?)

    private static func parcel(_ row: ParcelColumns, prizes: [String]) -> ParcelRow {
        let (id, provider, account, state, name, phone, address, carrier, tracking, created, shipped, delivered) = row
        let kept = ShippingAddress.kept(name: name, phone: phone, address: address)
        return ParcelRow(
            id: id, player: PlayerAddress(accid: account, provider: provider), state: ParcelState(rawValue: state) ?? .toShip,
            address: kept, carrier: carrier, tracking: tracking, createdAt: created, shippedAt: shipped, deliveredAt: delivered,
            prizes: prizes)
    }

    /// A player's prizes from every site, newest first, with their parcels.
    func prizes(of player: PlayerAddress, limit: Int, offset: Int) async throws -> [(prize: PrizeRow, parcel: ParcelRow?)] {
        let (provider, account) = (player.provider, player.accid)
        let prizes = try await read(
            """
            SELECT \(unescaped: Self.prizeColumns) FROM prizes WHERE provider = \(provider) AND account = \(account)
            ORDER BY won_at DESC, site, id LIMIT \(Int64(limit)) OFFSET \(Int64(offset))
            """
        ) { rows in
            var prizes: [PrizeRow] = []
            for try await row in rows.decode(PrizeColumns.self) { prizes.append(Self.prize(row)) }
            return prizes
        }
        let parcels = try await parcels(ids: Array(Set(prizes.compactMap(\.parcel))))
        return prizes.map { (prize: $0, parcel: $0.parcel.flatMap { parcels[$0] }) }
    }

    /// Parcels in `state` (all when nil), oldest first, with their prizes.
    func parcels(state: ParcelState?, limit: Int, offset: Int) async throws -> [ParcelRow] {
        let state = state?.rawValue
        let rows = try await read(
            """
            SELECT \(unescaped: Self.parcelColumns) FROM parcels WHERE (\(state)::text IS NULL OR state = \(state))
            ORDER BY created_at, id LIMIT \(Int64(limit)) OFFSET \(Int64(offset))
            """
        ) { rows in
            var parcels: [ParcelColumns] = []
            for try await row in rows.decode(ParcelColumns.self) { parcels.append(row) }
            return parcels
        }
        let contents = try await contents(of: rows.map(\.0))
        return rows.map { Self.parcel($0, prizes: contents[$0.0] ?? []) }
    }

    private func parcels(ids: [String]) async throws -> [String: ParcelRow] {
        guard !ids.isEmpty else { return [:] }
        let rows = try await read("SELECT \(unescaped: Self.parcelColumns) FROM parcels WHERE id = ANY(\(ids))") { rows in
            var parcels: [ParcelColumns] = []
            for try await row in rows.decode(ParcelColumns.self) { parcels.append(row) }
            return parcels
        }
        let contents = try await contents(of: ids)
        return Dictionary(uniqueKeysWithValues: rows.map { ($0.0, Self.parcel($0, prizes: contents[$0.0] ?? [])) })
    }

    private func contents(of parcels: [String]) async throws -> [String: [String]] {
        guard !parcels.isEmpty else { return [:] }
        return try await read("SELECT parcel, id FROM prizes WHERE parcel = ANY(\(parcels)) ORDER BY won_at, id") { rows in
            var contents: [String: [String]] = [:]
            for try await (parcel, id) in rows.decode((String, String).self) { contents[parcel, default: []].append(id) }
            return contents
        }
    }

    // MARK: Changing

    /// What a change inside its transaction came to: done, or refused with
    /// nothing written (a refusal is an answer, not a database failure).
    enum PrizeOutcome<T: Sendable>: Sendable {
        case done(T)
        case refused(PrizeRefusal)
    }

    /// Runs `body` in one transaction that commits durably.
    private func change<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection, Logger) async throws -> PrizeOutcome<T>) async throws
        -> PrizeOutcome<T>
    {
        try await migrate()
        return try await timed { [client, logger] in
            try await client.withTransaction(logger: logger) { connection in
                try await Self.commitDurably(connection, logger)
                return try await body(connection, logger)
            }
        }
    }

    /// The prizes `ids`, locked for this transaction, in the order asked;
    /// refused unless each is the player's (another's is unknown) and held.
    private static func lockHeld(_ ids: [String], of player: PlayerAddress, _ connection: PostgresConnection, _ logger: Logger) async throws
        -> PrizeOutcome<[PrizeRow]>
    {
        var found: [String: PrizeRow] = [:]
        for try await row in try await connection.query(
            "SELECT \(unescaped: prizeColumns) FROM prizes WHERE id = ANY(\(ids)) ORDER BY id FOR UPDATE", logger: logger
        ).decode(PrizeColumns.self) {
            let prize = prize(row)
            found[prize.id] = prize
        }
        var prizes: [PrizeRow] = []
        for id in ids {
            guard let prize = found[id], prize.player == player else { return .refused(.unknownPrize(id)) }
            prizes.append(prize)
        }
        for prize in prizes where prize.state != .held { return .refused(.notHeld(prize.id, prize.state)) }
        return .done(prizes)
    }

    /// One parcel of the player's held prizes `ids` to `address`.
    func ship(
        _ ids: [String], of player: PlayerAddress, to address: ShippingAddress, parcel: String, audit: AuditDraft? = nil
    ) async throws -> PrizeOutcome<(ParcelRow, [PrizeRow])> {
        try await change { connection, logger in
            let locked = try await Self.lockHeld(ids, of: player, connection, logger)
            guard case .done(let prizes) = locked else { return .refused(Self.refusal(of: locked)) }
            var created = Date()
            for try await at in try await connection.query(
                """
                INSERT INTO parcels (id, provider, account, state, name, phone, address)
                VALUES (\(parcel), \(player.provider), \(player.accid), 'to_ship', \(address.name), \(address.phone), \(address.address))
                RETURNING created_at
                """, logger: logger
            ).decode(Date.self) {
                created = at
            }
            try await connection.query(
                "UPDATE prizes SET state = 'to_ship', parcel = \(parcel), changed_at = now() WHERE id = ANY(\(ids))", logger: logger)
            if let audit {
                let trail = audit.entry(
                    before: AuditValue(PrizeStates(prizes, parcel: nil)), after: AuditValue(PrizeStates(prizes, to: .toShip, parcel: parcel)),
                    at: created)
                try await Self.appendAudit(trail, connection, logger)
            }
            let row = ParcelRow(id: parcel, player: player, state: .toShip, address: address, createdAt: created, prizes: ids)
            return .done((row, prizes))
        }
    }

    /// The refusal an outcome holds (called only on a refused one).
    private static func refusal<T>(of outcome: PrizeOutcome<T>) -> PrizeRefusal {
        if case .refused(let refusal) = outcome { return refusal }
        return .unavailable
    }

    /// The player's held prize `id` taken as credits: the chain wallet's
    /// `exchange` entry (keyed by the prize, naming its site) and the prize
    /// `exchanged`, in one transaction.
    func exchange(_ id: String, of player: PlayerAddress, creditsOn: Bool, audit: AuditDraft? = nil) async throws -> PrizeOutcome<(PrizeRow, Int64)> {
        try await change { connection, logger in
            let locked = try await Self.lockHeld([id], of: player, connection, logger)
            guard case .done(let prizes) = locked, var prize = prizes.first else { return .refused(Self.refusal(of: locked)) }
            guard creditsOn, prize.exchange > 0 else { return .refused(.notExchangeable(id)) }
            let balance = try await Self.lockWallet(provider: player.provider, account: player.accid, connection, logger)
            let entry = LedgerEntry(wallet: player, kind: .exchange, credits: prize.exchange, key: prize.id, reason: nil, digest: nil, at: Date())
            try await Self.write(entry, site: prize.site, after: balance + prize.exchange, connection, logger)
            try await connection.query(
                "UPDATE prizes SET state = 'exchanged', changed_at = now() WHERE id = \(id)", logger: logger)
            if let audit {
                let trail = audit.entry(
                    before: AuditValue(PrizeStates([prize], parcel: nil, balance: balance)),
                    after: AuditValue(PrizeStates([prize], to: .exchanged, parcel: nil, balance: balance + prize.exchange)), at: entry.at)
                try await Self.appendAudit(trail, connection, logger)
            }
            prize.state = .exchanged
            return .done((prize, balance + prize.exchange))
        }
    }

    /// A parcel moved from `from` by `move`, its prizes with it; returns it
    /// and its prizes (for telling their players).
    func moveParcel(
        _ id: String, from: ParcelState, audit: AuditDraft? = nil, _ move: @escaping @Sendable (inout ParcelRow) -> Void
    ) async throws -> PrizeOutcome<(ParcelRow, [PrizeRow])> {
        try await change { connection, logger in
            var found: ParcelColumns?
            for try await row in try await connection.query(
                "SELECT \(unescaped: Self.parcelColumns) FROM parcels WHERE id = \(id) FOR UPDATE", logger: logger
            ).decode(ParcelColumns.self) {
                found = row
            }
            guard let found else { return .refused(.unknownParcel(id)) }
            var prizes: [PrizeRow] = []
            for try await row in try await connection.query(
                "SELECT \(unescaped: Self.prizeColumns) FROM prizes WHERE parcel = \(id) ORDER BY won_at, id FOR UPDATE", logger: logger
            ).decode(PrizeColumns.self) {
                prizes.append(Self.prize(row))
            }
            var parcel = Self.parcel(found, prizes: prizes.map(\.id))
            guard parcel.state == from else { return .refused(.parcelState(id, parcel.state)) }
            let before = AuditValue(ParcelView(parcel))
            move(&parcel)
            if let audit {
                try await Self.appendAudit(audit.entry(before: before, after: AuditValue(ParcelView(parcel)), at: Date()), connection, logger)
            }
            let state = parcel.state.rawValue
            try await connection.query(
                """
                UPDATE parcels SET state = \(state), carrier = \(parcel.carrier), tracking = \(parcel.tracking),
                    shipped_at = \(parcel.shippedAt), delivered_at = \(parcel.deliveredAt)
                WHERE id = \(id)
                """, logger: logger)
            try await connection.query("UPDATE prizes SET state = \(state), changed_at = now() WHERE parcel = \(id)", logger: logger)
            return .done((parcel, prizes))
        }
    }

    /// Forgets the addresses of parcels delivered at or before `deliveredBy`; returns how many.
    func forgetAddresses(deliveredBy: Date) async throws -> Int {
        try await migrate()
        return try await timed { [client, logger] in
            try await client.withTransaction(logger: logger) { connection in
                var count = 0
                for try await _ in try await connection.query(
                    """
                    UPDATE parcels SET name = NULL, phone = NULL, address = NULL, forgotten_at = now()
                    WHERE state = 'delivered' AND delivered_at <= \(deliveredBy) AND forgotten_at IS NULL
                    RETURNING 1
                    """, logger: logger
                ).decode(Int.self) {
                    count += 1
                }
                return count
            }
        }
    }
}
