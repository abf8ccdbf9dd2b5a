import Foundation
import Logging
import Protocol
import ServiceLifecycle
import Synchronization

/// A site's prizes (SPEC §15), kept in its SQLite beside the games that
/// made them: the players' choices (ship, exchange) and the operators'
/// shipping, and the addresses forgotten after delivery.
///
/// Changes are made one at a time (a lane of one), each read, decided,
/// handed to the storage writer and answered once durable: two requests for
/// one prize (a retry, two connections at once) are taken one after the
/// other, and the second finds the first's state. An exchange goes through
/// the wallets' lock (``Wallets/transact(machine:_:)``), so that its entry
/// reaches the ledger in order with every game's debit; its key is the prize,
/// so the ledger itself takes it once. What this desk decided and the file
/// may not show yet (a write not durable in time) is remembered until it is
/// (``overlay``): a retry meanwhile finds it decided.
///
/// The prizes a win makes are the machines' (written with the game's end,
/// ``MachineState/makePrize(_:_:)``); nothing here touches a machine.
final class PrizeDesk: PrizeKeeper, Service {
    let settings: PrizeSettings
    private let writer: StorageWriter
    /// The site's wallets when games cost credits: an exchange pays into them.
    private let wallets: Wallets?
    private let clock: GameClock
    private let logger: Logger
    /// Command 14 and 15 to a player, from the arcade's IM accounts.
    private let tell: @Sendable (PlayerReply) -> Void
    /// One change at a time (a gate of one holder, in order).
    private let lane = ReadGate(permits: 1)
    private let overlay = Mutex(Overlay())

    /// Decided changes whose writes were not durable yet when last looked at.
    private struct Overlay {
        var prizes: [String: (state: PrizeState, parcel: String?, ticket: StorageWriter.Ticket)] = [:]
        var parcels: [String: (parcel: ParcelRow, ticket: StorageWriter.Ticket)] = [:]
    }

    /// How often delivered parcels' addresses are looked at for forgetting.
    static let sweepInterval: Duration = .seconds(3600)

    init(
        settings: PrizeSettings, writer: StorageWriter, wallets: Wallets?, clock: GameClock, logger: Logger,
        tell: @escaping @Sendable (PlayerReply) -> Void
    ) {
        self.settings = settings
        self.writer = writer
        self.wallets = wallets
        self.clock = clock
        self.logger = logger
        self.tell = tell
    }

    private var store: GameStore { writer.store }

    // MARK: Reading

    func prizes(of player: PlayerAddress, limit: Int, offset: Int) async throws(PrizeRefusal) -> [(prize: PrizeRow, parcel: ParcelRow?)] {
        do {
            return try await store.prizes(of: player, limit: limit, offset: offset).map { (prize: seen($0.prize), parcel: $0.parcel) }
        } catch {
            throw failed(error, "A player's prizes not read")
        }
    }

    func parcels(state: ParcelState?, limit: Int, offset: Int) async throws(PrizeRefusal) -> [ParcelRow] {
        do {
            return try await store.parcels(state: state, limit: limit, offset: offset)
        } catch {
            throw failed(error, "The parcels not read")
        }
    }

    // MARK: The player's choice

    func ship(_ ids: [String], of player: PlayerAddress, to address: ShippingAddress, audit: AuditDraft?) async throws(PrizeRefusal) -> ParcelRow {
        try await inTurn { () throws(PrizeRefusal) in
            let prizes = try await held(ids, of: player)
            let now = clock.wallNow()
            let parcel = ParcelRow(
                id: "parcel-" + Signatures.nonce(bytes: 8), player: player, state: .toShip, address: address, createdAt: now, prizes: ids)
            let audited = audit.map {
                StoreChange.audit(
                    $0.entry(before: AuditValue(PrizeStates(prizes, parcel: nil)), after: AuditValue(PrizeStates(prizes, to: .toShip, parcel: parcel.id)), at: now))
            }
            let ticket = writer.submit([.parcel(parcel), .prizes(ids, .toShip, parcel: parcel.id, at: now)] + (audited.map { [$0] } ?? []), machine: -1)
            remember(prizes: ids, .toShip, parcel: parcel.id, parcelRow: parcel, ticket: ticket)
            try await durable(ticket)
            for prize in prizes { tellChange(prize, .toShip) }
            return parcel
        }
    }

    func exchange(_ id: String, of player: PlayerAddress, audit: AuditDraft?) async throws(PrizeRefusal) -> (PrizeRow, balance: Int64) {
        try await inTurn { () throws(PrizeRefusal) in
            guard var prize = try await held([id], of: player).first else { throw .unknownPrize(id) }
            guard prize.exchange > 0, let wallets else { throw .notExchangeable(id) }
            let now = clock.wallNow()
            let entry = LedgerEntry(wallet: player, kind: .exchange, credits: prize.exchange, key: prize.id, reason: nil, digest: nil, at: now)
            let (balance, ticket) = wallets.transact(machine: -1) { money in
                let before = money.book?.balance(of: player) ?? 0
                let audited = audit.map {
                    StoreChange.audit(
                        $0.entry(
                            before: AuditValue(PrizeStates([prize], parcel: nil, balance: before)),
                            after: AuditValue(PrizeStates([prize], to: .exchanged, parcel: nil, balance: before + prize.exchange)), at: now))
                }
                return (before + prize.exchange, [.ledger(entry), .prizes([id], .exchanged, parcel: nil, at: now)] + (audited.map { [$0] } ?? []))
            }
            guard let ticket else { throw .unavailable }
            remember(prizes: [id], .exchanged, parcel: nil, ticket: ticket)
            try await durable(ticket)
            prize.state = .exchanged
            tell(
                PlayerReply(
                    to: player,
                    message: WireMessage(
                        .creditsChanged, data: String(balance), change: prize.exchange, reason: LedgerEntry.Kind.exchange.rawValue),
                    priority: .high, expires: nil))
            tellChange(prize, .exchanged)
            return (prize, balance)
        }
    }

    // MARK: Shipping

    func shipped(_ id: String, carrier: String, tracking: String, audit: AuditDraft) async throws(PrizeRefusal) -> ParcelRow {
        try await move(parcel: id, from: .toShip, audit: audit) { parcel, now in
            parcel.state = .shipped
            parcel.carrier = carrier
            parcel.tracking = tracking
            parcel.shippedAt = now
        }
    }

    func delivered(_ id: String, audit: AuditDraft) async throws(PrizeRefusal) -> ParcelRow {
        try await move(parcel: id, from: .shipped, audit: audit) { parcel, now in
            parcel.state = .delivered
            parcel.deliveredAt = now
        }
    }

    /// A parcel one step forward, its prizes with it, each told to its player.
    private func move(
        parcel id: String, from state: ParcelState, audit: AuditDraft, _ change: (inout ParcelRow, Date) -> Void
    ) async throws(PrizeRefusal)
        -> ParcelRow
    {
        try await inTurn { () throws(PrizeRefusal) in
            let kept: ParcelRow?
            do throws(StorageError) {
                kept = try await overlaid(parcel: id)
            } catch {
                throw failed(error, "A parcel not read")
            }
            guard var parcel = kept else { throw .unknownParcel(id) }
            guard parcel.state == state else { throw .parcelState(id, parcel.state) }
            let now = clock.wallNow()
            let before = AuditValue(ParcelView(parcel))
            change(&parcel, now)
            let prizeState: PrizeState = parcel.state == .shipped ? .shipped : .delivered
            let entry = audit.entry(before: before, after: AuditValue(ParcelView(parcel)), at: now)
            let ticket = writer.submit([.parcel(parcel), .prizes(parcel.prizes, prizeState, parcel: id, at: now), .audit(entry)], machine: -1)
            remember(prizes: parcel.prizes, prizeState, parcel: id, parcelRow: parcel, ticket: ticket)
            try await durable(ticket)
            let prizes: [String: PrizeRow]
            do throws(StorageError) {
                prizes = try await store.prizes(ids: parcel.prizes)
            } catch {
                // Done and durable; only the telling needs the prizes' names.
                logger.warning("A parcel's prizes not read to tell their player", metadata: error.shape.metadata(["parcel.id": .string(id)]))
                return parcel
            }
            for prizeID in parcel.prizes {
                if let prize = prizes[prizeID] { tellChange(prize, prizeState, tracking: parcel.tracking) }
            }
            return parcel
        }
    }

    // MARK: Forgetting addresses

    func run() async throws {
        try? await cancelWhenGracefulShutdown { [self] in
            while !Task.isCancelled {
                let started = clock.now()
                await forgetAddresses()
                try await clock.sleep(started + Self.sweepInterval)
            }
        }
    }

    /// Forgets the address of every parcel delivered `prizes.forget_address`
    /// ago or more, as the desk's clock has it now; returns how many.
    @discardableResult
    func forgetAddresses() async -> Int {
        let now = clock.wallNow()
        do {
            let forgotten = try await store.forgetAddresses(deliveredBy: now.addingTimeInterval(-settings.forgetAddress.seconds), at: now)
            if forgotten > 0 { logger.info("Delivered parcels' addresses forgotten", metadata: ["parcels.forgotten": "\(forgotten)"]) }
            return forgotten
        } catch {
            logger.warning("Delivered parcels' addresses not forgotten now; tried again later", metadata: error.shape.metadata())
            return 0
        }
    }

    // MARK: Corrections

    /// Runs an operator's correction of `game`'s result (SPEC §16) in the
    /// desk's lane, so that it and a choice made for the game's prize (an
    /// exchange racing the win taken back) are taken one after the other:
    /// `body` gets the game's prize as the desk sees it, makes the
    /// correction durable and returns the prize as it left it.
    func correcting<T: Sendable>(
        game: String, _ body: (PrizeRow?) async throws -> (T, ticket: StorageWriter.Ticket?, prize: PrizeRow?)
    ) async throws -> T {
        guard writer.isWritable else { throw PrizeRefusal.unavailable.refusal }
        do { try await lane.acquire() } catch { throw PrizeRefusal.unavailable.refusal }
        defer { lane.release() }
        forgetDurable()
        let id = PrizeRow.id(ofGame: game)
        let kept: PrizeRow?
        do {
            kept = try await store.prizes(ids: [id])[id].map(seen)
        } catch {
            throw failed(error, "A game's prize not read for its correction").refusal
        }
        let (result, ticket, prize) = try await body(kept)
        if let ticket, let prize, prize.state != kept?.state { remember(prizes: [prize.id], prize.state, parcel: nil, ticket: ticket) }
        return result
    }

    // MARK: Helpers

    /// Runs `body` alone: every change of a prize or parcel takes its turn.
    private func inTurn<T: Sendable>(_ body: () async throws(PrizeRefusal) -> T) async throws(PrizeRefusal) -> T {
        guard writer.isWritable else { throw .unavailable }
        do { try await lane.acquire() } catch { throw .unavailable }
        defer { lane.release() }
        forgetDurable()
        return try await body()
    }

    /// The player's prizes `ids`, each held: in the order asked.
    private func held(_ ids: [String], of player: PlayerAddress) async throws(PrizeRefusal) -> [PrizeRow] {
        let kept: [String: PrizeRow]
        do {
            kept = try await store.prizes(ids: ids)
        } catch {
            throw failed(error, "Prizes not read")
        }
        var prizes: [PrizeRow] = []
        for id in ids {
            // Another player's is answered as an unknown one: nothing is said of it.
            guard let prize = kept[id].map(seen), prize.player == player else { throw .unknownPrize(id) }
            prizes.append(prize)
        }
        for prize in prizes where prize.state != .held { throw .notHeld(prize.id, prize.state) }
        return prizes
    }

    /// The prize as this desk decided it, where the file may not show it yet.
    private func seen(_ prize: PrizeRow) -> PrizeRow {
        guard let decided = overlay.withLock({ $0.prizes[prize.id] }) else { return prize }
        var prize = prize
        prize.state = decided.state
        prize.parcel = decided.parcel
        return prize
    }

    private func overlaid(parcel id: String) async throws(StorageError) -> ParcelRow? {
        if let decided = overlay.withLock({ $0.parcels[id]?.parcel }) { return decided }
        return try await store.parcel(id)
    }

    private func remember(
        prizes ids: [String], _ state: PrizeState, parcel: String?, parcelRow: ParcelRow? = nil, ticket: StorageWriter.Ticket
    ) {
        overlay.withLock { overlay in
            for id in ids { overlay.prizes[id] = (state, parcel, ticket) }
            if let parcelRow { overlay.parcels[parcelRow.id] = (parcelRow, ticket) }
        }
    }

    /// Drops what the file now holds: readers see every durable write.
    private func forgetDurable() {
        overlay.withLock { overlay in
            overlay.prizes = overlay.prizes.filter { !writer.isDurable($0.value.ticket) }
            overlay.parcels = overlay.parcels.filter { !writer.isDurable($0.value.ticket) }
        }
    }

    private func durable(_ ticket: StorageWriter.Ticket) async throws(PrizeRefusal) {
        guard await writer.waitDurable(ticket, timeout: Arcade.durabilityWait) else { throw .unavailable }
    }

    private func tellChange(_ prize: PrizeRow, _ state: PrizeState, tracking: String? = nil) {
        tell(PlayerReply(to: prize.player, message: MachineState.prizeChanged(prize, state: state, tracking: tracking), priority: .high, expires: nil))
    }

    private func failed(_ error: StorageError, _ message: Logger.Message) -> PrizeRefusal {
        logger.warning(message, metadata: error.shape.metadata())
        return .unavailable
    }
}

/// Prizes as the audit trail shows them before and after a choice an
/// operator made for their player: each prize's state, its parcel, and
/// for an exchange the wallet's balance.
struct PrizeStates: Encodable {
    var prizes: [String: String]
    var parcel: String?
    var balance: Int64?

    init(_ prizes: [PrizeRow], to state: PrizeState? = nil, parcel: String?, balance: Int64? = nil) {
        self.prizes = Dictionary(prizes.map { ($0.id, (state ?? $0.state).rawValue) }, uniquingKeysWith: { a, _ in a })
        self.parcel = parcel
        self.balance = balance
    }
}

/// A parcel as the audit trail shows it: its state and carrier, never its address.
struct ParcelView: Encodable {
    var state: String
    var carrier: String?
    var tracking: String?
    var prizes: [String]

    init(_ parcel: ParcelRow) {
        state = parcel.state.rawValue
        carrier = parcel.carrier
        tracking = parcel.tracking
        prizes = parcel.prizes
    }
}
