import Foundation
import Logging
import Protocol
import ServiceLifecycle

/// The chain's prizes as the prize routes see them (SPEC §15): kept in the
/// recorder's PostgreSQL, the choices and the shipping made centrally
/// (``RecorderStore``'s transactions), every change told to its player
/// through the site whose game made the prize (`<prefix>/<site>/tell`): only
/// sites speak to players. An exchange credits the chain's wallet. An
/// operator's change is written with its audit entry, in the recorder's own
/// trail (SPEC §16).
///
/// Why centrally, not at each site (docs/RECORDER.md): the chain's wallet
/// and the chain's list of a player's prizes are both here, so an exchange
/// is one transaction that marks the prize and credits the wallet; no site
/// takes part, so no site can exchange, or ship, a prize another site's
/// game made, and a prize is never in two states at two places.
struct ChainPrizes: PrizeKeeper, Service {
    let store: RecorderStore
    let settings: PrizeSettings
    /// Whether the recorder keeps the chain's wallets (`credits:`): an exchange pays into them.
    let creditsOn: Bool
    let clock: GameClock
    let logger: Logger
    /// Sends a notice to the site of a prize, for its player.
    let notify: @Sendable (_ site: String, ChainPrizeNotice) -> Void

    func prizes(of player: PlayerAddress, limit: Int, offset: Int) async throws(PrizeRefusal) -> [(prize: PrizeRow, parcel: ParcelRow?)] {
        try await database("read a player's prizes") { try await store.prizes(of: player, limit: limit, offset: offset) }
    }

    func parcels(state: ParcelState?, limit: Int, offset: Int) async throws(PrizeRefusal) -> [ParcelRow] {
        try await database("read the parcels") { try await store.parcels(state: state, limit: limit, offset: offset) }
    }

    func ship(_ prizes: [String], of player: PlayerAddress, to address: ShippingAddress, audit: AuditDraft?) async throws(PrizeRefusal) -> ParcelRow {
        let id = "parcel-" + Signatures.nonce(bytes: 8)
        let (parcel, shipped) = try await outcome("ship prizes") { try await store.ship(prizes, of: player, to: address, parcel: id, audit: audit) }
        for prize in shipped { tell(prize, .toShip) }
        return parcel
    }

    func exchange(_ prize: String, of player: PlayerAddress, audit: AuditDraft?) async throws(PrizeRefusal) -> (PrizeRow, balance: Int64) {
        let (exchanged, balance) = try await outcome("exchange a prize") {
            try await store.exchange(prize, of: player, creditsOn: creditsOn, audit: audit)
        }
        tell(exchanged, .exchanged, credits: exchanged.exchange, balance: balance)
        return (exchanged, balance)
    }

    func shipped(_ parcel: String, carrier: String, tracking: String, audit: AuditDraft) async throws(PrizeRefusal) -> ParcelRow {
        let now = clock.wallNow()
        let (moved, prizes) = try await outcome("mark a parcel shipped") {
            try await store.moveParcel(parcel, from: .toShip, audit: audit) { parcel in
                parcel.state = .shipped
                parcel.carrier = carrier
                parcel.tracking = tracking
                parcel.shippedAt = now
            }
        }
        for prize in prizes { tell(prize, .shipped, tracking: tracking) }
        return moved
    }

    func delivered(_ parcel: String, audit: AuditDraft) async throws(PrizeRefusal) -> ParcelRow {
        let now = clock.wallNow()
        let (moved, prizes) = try await outcome("mark a parcel delivered") {
            try await store.moveParcel(parcel, from: .shipped, audit: audit) { parcel in
                parcel.state = .delivered
                parcel.deliveredAt = now
            }
        }
        for prize in prizes { tell(prize, .delivered, tracking: moved.tracking) }
        return moved
    }

    // MARK: Forgetting addresses

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                let started = clock.now()
                await forgetAddresses()
                try await clock.sleep(started + PrizeDesk.sweepInterval)
            }
        }
    }

    /// Forgets the address of every parcel delivered `forget_address` ago or more; returns how many.
    @discardableResult
    func forgetAddresses() async -> Int {
        do {
            let forgotten = try await store.forgetAddresses(deliveredBy: clock.wallNow().addingTimeInterval(-settings.forgetAddress.seconds))
            if forgotten > 0 { logger.info("Delivered parcels' addresses forgotten", metadata: ["parcels.forgotten": "\(forgotten)"]) }
            return forgotten
        } catch {
            logger.warning(
                "Delivered parcels' addresses not forgotten now; tried again later",
                metadata: RecorderStore.shape(error, "forget addresses").metadata())
            return 0
        }
    }

    // MARK: Helpers

    private func tell(_ prize: PrizeRow, _ state: PrizeState, tracking: String? = nil, credits: Int64? = nil, balance: Int64? = nil) {
        guard let site = prize.site else { return }
        notify(
            site,
            ChainPrizeNotice(
                provider: prize.player.provider, account: prize.player.accid, prize: prize.id, name: prize.name, state: state.rawValue,
                tracking: tracking, credits: credits, balance: balance))
    }

    private func database<T>(_ what: String, _ body: () async throws -> T) async throws(PrizeRefusal) -> T {
        do {
            return try await body()
        } catch {
            logger.warning("The chain's prizes not read", metadata: RecorderStore.shape(error, what).metadata())
            throw .unavailable
        }
    }

    private func outcome<T>(_ what: String, _ body: () async throws -> RecorderStore.PrizeOutcome<T>) async throws(PrizeRefusal) -> T {
        let outcome: RecorderStore.PrizeOutcome<T>
        do {
            outcome = try await body()
        } catch {
            logger.warning("A change of the chain's prizes not made", metadata: RecorderStore.shape(error, what).metadata())
            throw .unavailable
        }
        switch outcome {
        case .done(let value): return value
        case .refused(let refusal): throw refusal
        }
    }
}
