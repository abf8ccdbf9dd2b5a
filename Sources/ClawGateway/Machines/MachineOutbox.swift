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
/// Nothing outside the machine drains it: the machine itself after a
/// transition, and whoever learns from the storage writer's reports that a
/// ticket is durable (the arcade, or a request waiting for its answer).
struct MachineOutbox {
    /// Effects ready to carry out, taken in one go.
    struct Work {
        var commands: [(WireMessage, camera: Bool)] = []
        var tells: [MachineEffect] = []

        var isEmpty: Bool { commands.isEmpty && tells.isEmpty }
    }

    private struct Batch {
        var effects: [MachineEffect]
        var ticket: StorageWriter.Ticket?
    }

    private var commands: [(WireMessage, camera: Bool)] = []
    private var tells = Deque<Batch>()
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
    }

    /// Appends a transition's effects; `ticket` gates the telling ones.
    mutating func append(_ effects: [MachineEffect], ticket: StorageWriter.Ticket?) {
        var telling: [MachineEffect] = []
        for effect in effects {
            if case .command(let message, let camera) = effect {
                commands.append((message, camera))
            } else {
                telling.append(effect)
            }
        }
        if !telling.isEmpty { tells.append(Batch(effects: telling, ticket: ticket)) }
    }

    /// Takes every command, and the telling batches up to the first whose writes are not durable yet.
    mutating func takeReady(isDurable: (StorageWriter.Ticket) -> Bool) -> Work {
        var work = Work()
        swap(&work.commands, &commands)
        while let first = tells.first, first.ticket.map(isDurable) ?? true {
            work.tells += tells.removeFirst().effects
        }
        return work
    }

    func hasReady(isDurable: (StorageWriter.Ticket) -> Bool) -> Bool {
        !commands.isEmpty || tells.first.map { $0.ticket.map(isDurable) ?? true } ?? false
    }
}
