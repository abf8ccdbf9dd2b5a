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
/// transaction (``Machine``); a top-up or an operator's adjustment is a
/// transaction of its own, answered once it is durable.
final class Wallets: WalletKeeper {
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

    /// Runs `decide` under the wallets' lock when games cost credits (with the
    /// book; nil when games are free), then applies the ledger entries among
    /// the writes it returns and submits the writes for `machine`, before the
    /// lock is released: the ledger reaches the file in the order it was
    /// decided. A machine's transition and the closing of orphaned games go
    /// through here.
    static func submit<R: Sendable>(
        _ wallets: Wallets?, to writer: StorageWriter, machine: Int, _ decide: (WalletBook?) -> (R, [StoreChange])
    ) -> (R, StorageWriter.Ticket?) {
        func run(_ book: WalletBook?) -> (R, StorageWriter.Ticket?) {
            let (result, writes) = decide(book)
            book?.apply(writes)
            return (result, writes.isEmpty ? nil : writer.submit(writes, machine: machine))
        }
        guard let wallets else { return run(nil) }
        return wallets.book.withLock { run($0) }
    }

    func balance(of player: PlayerAddress) -> Int64 {
        book.withLock { $0.balance(of: player) }
    }

    /// A signed top-up from the payment service, keyed by its order id
    /// (`entry.key`) and its content's digest (`entry.digest`).
    func topUp(_ entry: LedgerEntry) async -> WalletChange {
        await change(entry)
    }

    /// An operator's adjustment, or a new tourist's welcome credits.
    func adjust(_ entry: LedgerEntry) async -> WalletChange {
        await change(entry)
    }

    private func change(_ entry: LedgerEntry) async -> WalletChange {
        guard writer.isWritable else { return .unavailable }
        let decided: Result<(ticket: StorageWriter.Ticket, balance: Int64, wallets: Int), WalletChange> = book.withLock { book in
            if let key = entry.key {
                book.forgetDurableOrders(writer.isDurable)
                let taken: (found: Bool, digest: String?)
                if let pending = book.pendingOrders[key] {
                    taken = (true, pending.digest)
                } else {
                    do {
                        taken = try writer.store.ledgerKey(kind: entry.kind, key: key)
                    } catch {
                        // Refused rather than risk a second credit for one order.
                        return .failure(.unavailable)
                    }
                }
                if taken.found {
                    return .failure(taken.digest == entry.digest ? .duplicate(balance: book.balance(of: entry.wallet)) : .conflict)
                }
            }
            let after = book.balance(of: entry.wallet) + entry.credits
            guard after >= 0 else { return .failure(.insufficient(balance: book.balance(of: entry.wallet))) }
            book.apply(entry)
            let ticket = writer.submit([.ledger(entry)], machine: -1)
            if let key = entry.key { book.pendingOrders[key] = (entry.digest, ticket) }
            return .success((ticket, after, book.count))
        }
        switch decided {
        case .failure(let change):
            return change
        case .success(let (ticket, balance, wallets)):
            CreditsMetrics.wallets.set(to: Double(wallets))
            guard await writer.waitDurable(ticket, timeout: Self.durableWithin) else { return .unavailable }
            return .written(balance: balance)
        }
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
    /// An operator's adjustment (or a new tourist's welcome credits).
    func adjust(_ entry: LedgerEntry) async -> WalletChange
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
    /// Top-ups submitted and not durable yet, by order id: the store does not
    /// hold them yet, and a second of the same must still be a duplicate.
    fileprivate var pendingOrders: [String: (digest: String?, ticket: StorageWriter.Ticket)] = [:]

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

    fileprivate func forgetDurableOrders(_ isDurable: (StorageWriter.Ticket) -> Bool) {
        pendingOrders = pendingOrders.filter { !isDurable($0.value.ticket) }
    }
}
