import Protocol

/// Where a site's games are paid from (SPEC §11), as its machines see it:
/// nowhere (``FreeGames``), the site's own wallets in its SQLite
/// (``Wallets``), or the chain's ledger, asked over the site's link
/// (``ChainLedgerDesk``). The wiring chooses one (``Gateway/build``); a
/// machine knows only this.
///
/// Every transition of a machine goes through ``transact(machine:_:)``,
/// which gives it what it may know of money (``LedgerView``) and submits
/// what it decided to the storage writer, so that a ledger's entries reach
/// the file in the order they were decided. What a ledger has to tell the
/// machines (the chain's answers to their debits) comes out of ``reports``,
/// which the arcade reads: a ledger never calls into a machine.
protocol GameLedger: Sendable {
    /// Runs `decide` with what a transition may know of money, and submits
    /// the writes it returns to the storage writer for machine `machine` (an
    /// index; -1 for none).
    func transact<R: Sendable>(machine: Int, _ decide: (LedgerView) -> (R, [StoreChange])) -> (R, StorageWriter.Ticket?)
    /// A game's debit for the chain's ledger, once its ask is durable
    /// (``MachineEffect/askDebit(_:)``); only the chain's ledger asks.
    func ask(_ ask: ChainWalletAsk)
    /// What the ledger has to say to the machines, in order; nil: nothing ever.
    var reports: AsyncStream<LedgerReport>? { get }
}

extension GameLedger {
    func ask(_ ask: ChainWalletAsk) {}
    var reports: AsyncStream<LedgerReport>? { nil }
}

/// What a transition may know of money (the ``TransitionContext`` it gets).
struct LedgerView: Sendable {
    /// At a site whose games cost credits: every player's balance, read
    /// under the wallets' lock, which is held for the whole transition.
    var book: WalletBook?
    /// At a site of a chain whose games cost credits: how the chain's
    /// ledger is reached.
    var chain: ChainLedgerContext?
}

/// What a ledger tells the machines (``GameLedger/reports``).
enum LedgerReport: Sendable {
    /// The chain's ledger answered a debit: for the machine whose turn has
    /// that session, if any still has it.
    case debitAnswered(ChainWalletAnswer)
    /// A player's wallet changed outside a game's transition (a refund the
    /// chain's ledger paid): told to them (14).
    case tell(PlayerReply)
}

/// Games are free: nothing to read, nothing to ask.
struct FreeGames: GameLedger {
    let writer: StorageWriter

    func transact<R: Sendable>(machine: Int, _ decide: (LedgerView) -> (R, [StoreChange])) -> (R, StorageWriter.Ticket?) {
        let (result, writes) = decide(LedgerView())
        return (result, writes.isEmpty ? nil : writer.submit(writes, machine: machine))
    }
}

/// How a transition reaches the chain's ledger (SPEC §11).
struct ChainLedgerContext: Sendable {
    /// `chain.wallet_timeout`: an accept whose debit is not answered within
    /// it is refused `gateway_unavailable`, and the offer stands.
    var timeout: Duration
    /// Whether the site's link to the chain is up: an accept is refused at once while it is not.
    var reachable: Bool
}
