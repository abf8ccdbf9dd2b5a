import DequeModule
import Protocol

/// What a machine's transitions decided and has not yet been carried out,
/// in the order it was decided. Kept under the machine's lock.
///
/// Two lanes: commands to the PC go out as soon as they are drained, since
/// a move stores nothing and must never wait on the disk; everything else
/// (events, snapshots, replies) tells someone what happened, so a batch of
/// it waits until its transition's writes are durable, and the batches after
/// it wait with it to keep their order.
///
/// The coin (1001) is the exception among commands: it starts a game the
/// PC will play whatever happens to the gateway, so it waits, like a
/// telling effect, until the game's start is durable; a crash in between
/// would otherwise leave a PC playing a game recorded as never started.
/// Every command decided while such a batch waits goes behind it, so that
/// the PC never gets a move before its coin. Without a coin waiting,
/// commands go out at once.
///
/// Once the coin is out, the game's other commands wait for its ack: the
/// ack is the PC's word that it started that game. A coin lost on its way
/// (the PC's process or the broker gone at that moment) would otherwise
/// let the player's moves reach a PC that is still in the previous game.
/// When the ack comes they go out in order; when the game ends without it
/// they are dropped, and counted as lost.
///
/// Nothing outside the machine drains it: the machine itself after a
/// transition, and whoever learns from the storage writer's reports that a
/// ticket is durable (the arcade, or a request waiting for its answer).
struct MachineOutbox {
    /// Effects ready to carry out, taken in one go.
    struct Work {
        var commands: [(WireMessage, camera: Bool)] = []
        var tells: [MachineEffect] = []
        /// Commands dropped: their game ended before the PC acked its coin.
        var dropped = 0

        var isEmpty: Bool { commands.isEmpty && tells.isEmpty && dropped == 0 }
    }

    private struct Batch {
        var commands: [(WireMessage, camera: Bool)] = []
        var effects: [MachineEffect]
        var ticket: StorageWriter.Ticket?
    }

    private var commands: [(WireMessage, camera: Bool)] = []
    private var tells = Deque<Batch>()
    /// Batches in `tells` that carry commands: while there is one, every
    /// command waits in the gated lane too.
    private var gatedCommandBatches = 0
    /// The game whose commands wait for its coin's ack, at the front of `commands`.
    private var heldFor: String?
    /// Set while a thread carries out taken work.
    var draining = false

    /// Whether everything decided up to the transition that got `ticket`
    /// has been carried out: nothing before it waits, nothing is being
    /// carried out right now.
    func isTold(through ticket: StorageWriter.Ticket) -> Bool {
        guard !draining else { return false }
        guard let first = tells.first else { return true }
        return first.ticket.map { $0 > ticket } ?? false
    }

    /// Forgets what was not carried out: the machine has stopped.
    mutating func discard() {
        commands.removeAll()
        tells.removeAll()
        gatedCommandBatches = 0
        heldFor = nil
    }

    /// Forgets the commands of `session` that wait behind a coin: their
    /// game ended before they could go out.
    mutating func discardWaitingCommands(session: String) {
        commands.removeAll { $0.0.session == session }
        if heldFor == session { heldFor = nil }
        for index in tells.indices where !tells[index].commands.isEmpty {
            tells[index].commands.removeAll { $0.0.session == session }
            if tells[index].commands.isEmpty { gatedCommandBatches -= 1 }
        }
    }

    /// Appends a transition's effects; `ticket` gates the telling ones, and
    /// its commands too when it puts a coin in or a coin still waits.
    mutating func append(_ effects: [MachineEffect], ticket: StorageWriter.Ticket?) {
        var telling: [MachineEffect] = []
        var decided: [(WireMessage, camera: Bool)] = []
        for effect in effects {
            if case .command(let message, let camera) = effect {
                decided.append((message, camera))
            } else {
                telling.append(effect)
            }
        }
        let gated = gatedCommandBatches > 0 || decided.contains { $0.0.code == .addCoins }
        if gated, !decided.isEmpty {
            gatedCommandBatches += 1
            tells.append(Batch(commands: decided, effects: telling, ticket: ticket))
            return
        }
        commands += decided
        if !telling.isEmpty { tells.append(Batch(effects: telling, ticket: ticket)) }
    }

    /// Takes the commands that wait for nothing, then the batches, commands
    /// and telling effects, up to the first whose writes are not durable yet;
    /// the commands of `awaitingCoin` (other than its coin) and all after
    /// them stay, and those of a game that ended while they waited
    /// (`current` is another) are dropped.
    mutating func takeReady(isDurable: (StorageWriter.Ticket) -> Bool, awaitingCoin: String?, current: String?) -> Work {
        var work = Work()
        swap(&work.commands, &commands)
        while let first = tells.first, first.ticket.map(isDurable) ?? true {
            let batch = tells.removeFirst()
            if !batch.commands.isEmpty { gatedCommandBatches -= 1 }
            work.commands += batch.commands
            work.tells += batch.effects
        }
        if let held = heldFor, held != awaitingCoin {
            // The coin was acked, and the game goes on; or it ended without the ack.
            heldFor = nil
            if held != current {
                let before = work.commands.count
                work.commands.removeAll { $0.0.session == held }
                work.dropped = before - work.commands.count
            }
        }
        if let awaitingCoin, let index = work.commands.firstIndex(where: { $0.0.session == awaitingCoin && $0.0.code != .addCoins }) {
            heldFor = awaitingCoin
            commands = Array(work.commands[index...])
            work.commands.removeSubrange(index...)
        }
        return work
    }

    func hasReady(isDurable: (StorageWriter.Ticket) -> Bool) -> Bool {
        (!commands.isEmpty && heldFor == nil) || tells.first.map { $0.ticket.map(isDurable) ?? true } ?? false
    }
}
