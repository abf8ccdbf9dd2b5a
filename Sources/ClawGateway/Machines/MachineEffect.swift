import Protocol

/// What a transition of a machine's game decided should happen outside it.
///
/// Transitions (``MachineState``) do no I/O: they return these, and the
/// machine (``Machine``) carries them out after its lock is released, in the
/// order they were decided. Commands to the PC go out at once, except a
/// coin (1001) and what is decided behind it (``MachineOutbox``); everything
/// that tells a player or an operator something waits until the transition's
/// writes (``Step/writes``) are durable.
enum MachineEffect: Sendable {
    /// A command to the machine's PC (`control`) or camera switch (`camera`):
    /// QoS 0, never retained, never queued for later.
    case command(WireMessage, camera: Bool)
    /// One event: counted in the metrics, and published on `claw/<m>/events`
    /// (and to the observers) when `published` (``GameSettings/publishes(_:)``).
    case event(GameEvent, published: Bool = true)
    /// The retained snapshot on `claw/<m>/queue`.
    case snapshot(QueueSnapshot)
    /// A reply to a player through their IM provider.
    case reply(PlayerReply)
    /// The PC's result numbered `serial` is taken and durable: confirmed on
    /// `claw/<m>/result/ack` (SPEC §4), so that the PC stops repeating it.
    case confirmResult(serial: Int64)
    /// A game's debit asked of the chain's ledger (SPEC §11), once the ask
    /// is durable: its answer comes back as ``MachineState/debitAnswered(_:_:)``.
    case askDebit(ChainWalletAsk)
    /// Retired by a reload and free at last: its retained snapshot is
    /// cleared and the arcade lets it go (SPEC §13).
    case gone
}

/// The result of one transition: what it answers, and what must happen
/// because of it.
struct Step<Outcome: Sendable>: Sendable {
    var outcome: Outcome
    /// In the order they were decided.
    var effects: [MachineEffect]
    /// Written to storage in one transaction, before any telling effect runs.
    var writes: [StoreChange]
}

/// The inputs of a transition besides the request itself.
struct TransitionContext: Sendable {
    var now: Moment
    /// Whether commands can reach the broker right now: a command is refused
    /// with `gateway_unavailable` rather than lost when it cannot.
    var brokerConnected = true
    /// Whether storage takes writes: queue changes are refused with
    /// `gateway_unavailable` while it does not.
    var storageWritable = true
    /// The players' balances when games cost credits (SPEC §11), read under
    /// the wallets' lock, which is held for the whole transition; nil when
    /// games are free.
    var wallets: WalletBook? = nil
    /// In a chain whose games cost credits: the chain's ledger debits them
    /// (SPEC §11), asked over the site's link; nil otherwise.
    var chainLedger: ChainLedgerContext? = nil
}
