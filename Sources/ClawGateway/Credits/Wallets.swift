import DequeModule
import Foundation
import Logging
import Protocol
import Synchronization

/// Every player's balance, as the ledger in storage sums it (SPEC §11),
/// held in memory so that a machine decides a debit without reading the
/// disk.
///
/// One lock orders every change to every wallet, and the change is handed to
/// the storage writer before the lock is released: the ledger's entries
/// reach the file in the order they were decided, so the file's balance never
/// goes below 0 where memory's did not. Lock order: a machine's lock, then
/// this one, then the writer's.
///
/// What a machine's transition decides (a debit with the game's start, a
/// refund with its end) is submitted with the game's own writes, in one
/// transaction (``transact(machine:_:)``, the site's ledger as its
/// machines see it, ``GameLedger``); a top-up or an operator's adjustment is
/// a transaction of its own, answered once it is durable (``WalletKeeper``).
final class Wallets: WalletKeeper, GameLedger {
    let settings: CreditsSettings
    private let writer: StorageWriter
    private let book: Mutex<WalletBook>
    private let logger: Logger

    /// Reads every wallet's balance from storage.
    init(settings: CreditsSettings, writer: StorageWriter, logger: Logger) throws(StorageError) {
        self.settings = settings
        self.writer = writer
        self.logger = logger
        book = Mutex(WalletBook(balances: try writer.store.balances()))
        CreditsMetrics.wallets.set(to: Double(book.withLock { $0.count }))
    }

    /// Runs `decide` under the wallets' lock with the book, then applies the
    /// ledger entries among the writes it returns and submits the writes for
    /// `machine`, before the lock is released: the ledger reaches the file in
    /// the order it was decided. A machine's transition and the closing of
    /// orphaned games go through here.
    func transact<R: Sendable>(machine: Int, _ decide: (LedgerView) -> (R, [StoreChange])) -> (R, StorageWriter.Ticket?) {
        book.withLock { book in
            let (result, writes) = decide(LedgerView(book: book))
            book.apply(writes)
            return (result, writes.isEmpty ? nil : writer.submit(writes, machine: machine))
        }
    }

    func balance(of player: PlayerAddress) -> Int64 {
        book.withLock { $0.balance(of: player) }
    }

    /// A signed top-up from the payment service, keyed by its order id
    /// (`entry.key`) and its content's digest (`entry.digest`).
    func topUp(_ entry: LedgerEntry) async -> WalletChange {
        await change(entry)
    }

    /// An operator's adjustment, keyed by the operator (`entry.key`, once
    /// per wallet), or a new tourist's welcome credits (no key).
    func adjust(_ entry: LedgerEntry, audit: AuditDraft?) async -> WalletChange {
        await change(entry, audit: audit)
    }

    /// A keyed change is taken once: one with a key seen before is answered
    /// `duplicate` (the same content) or `conflict` (other content), and only
    /// once the first is on disk (SPEC §11). What the file already holds is
    /// read on GRDB's reader, never under the wallets' lock, which every
    /// machine's transition takes; what is on its way to the file is in the
    /// book (``WalletBook/keyed``), looked at under the lock before the
    /// change is decided.
    private func change(_ entry: LedgerEntry, audit: AuditDraft? = nil) async -> WalletChange {
        guard writer.isWritable else { return .unavailable }
        if let seen = book.withLock({ $0.keyed(entry) }) { return await answer(entry, seen) }
        let kept: (digest: String?, balance: Int64?)?
        do {
            kept = try await writer.store.taken(entry)
        } catch {
            // Refused rather than risk a second credit for one order.
            logger.warning("A keyed wallet change not taken: the ledger could not be read", metadata: error.shape.metadata())
            return .unavailable
        }
        if let kept {
            return kept.digest == entry.digest ? .duplicate(balance: kept.balance ?? balance(of: entry.wallet)) : .conflict
        }
        enum Decided {
            case seen(WalletBook.Keyed)
            case refused(WalletChange)
            case submitted(StorageWriter.Ticket, balance: Int64, wallets: Int)
        }
        let decided: Decided = book.withLock { book in
            // Submitted meanwhile by another request with the same key.
            if let seen = book.keyed(entry) { return .seen(seen) }
            let after = book.balance(of: entry.wallet) + entry.credits
            guard after >= 0 else { return .refused(.insufficient(balance: book.balance(of: entry.wallet))) }
            let before = book.balance(of: entry.wallet)
            book.apply(entry)
            // An operator's adjustment is written with its audit entry (SPEC §16).
            let audited = audit.map {
                StoreChange.audit($0.entry(before: AuditValue(["balance": before]), after: AuditValue(["balance": after]), at: entry.at))
            }
            let ticket = writer.submit([.ledger(entry)] + (audited.map { [$0] } ?? []), machine: -1)
            book.keep(entry, ticket: ticket, balance: after, isDurable: writer.isDurable)
            return .submitted(ticket, balance: after, wallets: book.count)
        }
        switch decided {
        case .seen(let seen):
            return await answer(entry, seen)
        case .refused(let change):
            return change
        case .submitted(let ticket, let balance, let wallets):
            CreditsMetrics.wallets.set(to: Double(wallets))
            guard await writer.waitDurable(ticket, timeout: Self.durableWithin) else { return .unavailable }
            return .written(balance: balance)
        }
    }

    /// The answer to a change whose key was taken by one on its way to the
    /// file: given once that one is on disk, never before.
    private func answer(_ entry: LedgerEntry, _ seen: WalletBook.Keyed) async -> WalletChange {
        guard await writer.waitDurable(seen.ticket, timeout: Self.durableWithin) else { return .unavailable }
        guard seen.digest == entry.digest else { return .conflict }
        return .duplicate(balance: entry.kind == .adjust ? seen.balance : balance(of: entry.wallet))
    }

    func wallet(_ player: PlayerAddress, limit: Int, offset: Int) async throws -> WalletPage {
        try await writer.store.wallet(player, limit: limit, offset: offset)
    }

    /// How long a top-up's answer waits for its write: the payment service
    /// sends it again if it hears nothing, and the second is a duplicate.
    static let durableWithin: Duration = .seconds(5)
}

/// Where wallets are kept (SPEC §11): a site's SQLite (``Wallets``), or a
/// chain's PostgreSQL (the recorder's ``ChainWallets``). The top-up, the
/// adjustment and the wallet routes are the same over either.
protocol WalletKeeper: Sendable {
    /// A signed top-up from the payment service, keyed by its order id
    /// (`entry.key`) and its content's digest (`entry.digest`).
    func topUp(_ entry: LedgerEntry) async -> WalletChange
    /// An operator's adjustment, with its audit entry (SPEC §16), or a new
    /// tourist's welcome credits (no audit: no operator made it).
    func adjust(_ entry: LedgerEntry, audit: AuditDraft?) async -> WalletChange
    /// A wallet's balance and a page of its entries, newest first.
    func wallet(_ player: PlayerAddress, limit: Int, offset: Int) async throws -> WalletPage
}

/// What became of a top-up or an adjustment.
enum WalletChange: Error, Sendable, Equatable {
    /// Written and durable; the balance after it.
    case written(balance: Int64)
    /// The same order was taken before, with the same content: nothing added.
    case duplicate(balance: Int64)
    /// The same order was taken before, with other content: nothing changed.
    case conflict
    /// It would take the balance below 0: nothing written.
    case insufficient(balance: Int64)
    /// Storage takes no writes now, or did not make this one durable in
    /// time (at a site it is kept and written once storage is back).
    case unavailable
}

/// The balances behind ``Wallets``' lock: read by a machine's transition
/// while it holds the lock (``TransitionContext/wallets``), changed only by
/// what the lock's holder applies. A class, so that a transition can be
/// handed the book it reads without copying every balance.
final class WalletBook: @unchecked Sendable {
    private var balances: [PlayerAddress: Int64]
    /// Keyed changes (top-ups, operators' adjustments) submitted lately, by
    /// key, oldest first: the file may not show them to a reader yet, and a
    /// second of the same must still be a duplicate. Kept a while after they
    /// are durable (``keptFor``), longer than any read of the file that
    /// began before them takes.
    private var recent: [Key: Keyed] = [:]
    private var recentOrder: Deque<(key: Key, at: ContinuousClock.Instant)> = []

    /// A keyed change on its way to the file, or there lately.
    struct Keyed: Sendable {
        var digest: String?
        var ticket: StorageWriter.Ticket
        /// The balance the change left (what a retried adjustment is answered).
        var balance: Int64
    }

    /// A top-up's order id is the payment service's, one for every wallet;
    /// an adjustment's key is its wallet's.
    private struct Key: Hashable {
        var kind: LedgerEntry.Kind
        var wallet: PlayerAddress?
        var key: String

        init?(_ entry: LedgerEntry) {
            guard let key = entry.key else { return nil }
            kind = entry.kind
            wallet = entry.kind == .adjust ? entry.wallet : nil
            self.key = key
        }
    }

    /// How long a keyed change is remembered here after it was submitted.
    static let keptFor: Duration = .seconds(60)

    init(balances: [PlayerAddress: Int64] = [:]) {
        self.balances = balances
    }

    func balance(of player: PlayerAddress) -> Int64 {
        balances[player] ?? 0
    }

    var count: Int { balances.count }

    /// Applies an entry decided against this book, and counts it.
    func apply(_ entry: LedgerEntry) {
        balances[entry.wallet, default: 0] += entry.credits
        CreditsMetrics.count(entry)
    }

    /// Applies the ledger entries among a transition's writes.
    func apply(_ writes: [StoreChange]) {
        for case .ledger(let entry) in writes { apply(entry) }
    }

    /// The keyed change with `entry`'s key on its way to the file or there
    /// lately, if any.
    func keyed(_ entry: LedgerEntry) -> Keyed? {
        Key(entry).flatMap { recent[$0] }
    }

    /// Remembers a keyed change just submitted, and forgets those durable
    /// for longer than ``keptFor``.
    func keep(_ entry: LedgerEntry, ticket: StorageWriter.Ticket, balance: Int64, isDurable: (StorageWriter.Ticket) -> Bool) {
        let now = ContinuousClock.now
        while let oldest = recentOrder.first, now - oldest.at > Self.keptFor {
            // Not durable yet (storage failing): kept until it is.
            if let kept = recent[oldest.key], !isDurable(kept.ticket) { break }
            recent[oldest.key] = nil
            recentOrder.removeFirst()
        }
        guard let key = Key(entry) else { return }
        recent[key] = Keyed(digest: entry.digest, ticket: ticket, balance: balance)
        recentOrder.append((key, now))
    }
}
