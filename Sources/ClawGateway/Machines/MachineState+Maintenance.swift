import Foundation
import Protocol

/// Why a machine is out of play (SPEC §12): the fault its board reported,
/// the reason an operator gave, or both. Durable: a machine in maintenance
/// stays out across restarts of the gateway.
struct Maintenance: Sendable, Equatable, Codable {
    /// Cleared by a reset the PC confirmed, or by an operator.
    var fault: MachineFault?
    /// Cleared only by an operator.
    var reason: String?

    var isEmpty: Bool { fault == nil && reason == nil }
}

/// A reset (1002) the gateway sent: until the PC acks it, then until the
/// PC says `online` afresh.
enum ResetProgress: Sendable, Equatable {
    case sent(serial: Int64)
    case acked
}

/// Faults, maintenance and resets (SPEC §12).
extension MachineState {
    /// The reason an operator's maintenance gets when they give none.
    static let defaultMaintenanceReason = "maintenance"
    /// Longest `reason` an operator may give.
    static let maxMaintenanceReason = 200

    // MARK: Faults

    /// The PC's `claw/<m>/fault`: the machine goes into maintenance. A game
    /// in progress ends `machine_fault`, told to its player; an offer is
    /// taken back and its player keeps the head of the queue; the queue
    /// stays. A reset on its way did not help: it is forgotten. A fault
    /// while in maintenance already replaces the one shown.
    ///
    /// - Returns: the session of the game that ended, if any (its commands
    ///   still waiting behind its coin are forgotten).
    mutating func fault(_ report: MachineFaultReport, _ context: TransitionContext) -> Step<String?> {
        var fx = Effects(context)
        let fault = MachineFault(code: report.code, text: report.text, at: fx.timestamp())
        setMaintenance(Maintenance(fault: fault, reason: maintenance?.reason), &fx)
        reset = nil
        let turn = phase.turn
        emit(.fault, &fx) {
            $0.data = report.code
            $0.reason = report.text
            $0.session = turn?.session
        }
        guard let turn else { return finish(nil, &fx) }
        let text = report.text.isEmpty ? report.code : "\(report.text) (\(report.code))"
        switch phase {
        case .offered where turn.isContinue:
            // A continue was never a place in the queue: the waiting players keep theirs.
            endTurn(.machineFault, reason: report.code, &fx)
            notice(turn.player.address, WireError(.machineFault, "\(machine.name) reported a fault: \(text). Your continue has ended."), &fx)
            return finish(nil, &fx)
        case .offered:
            endTurn(.machineFault, reason: report.code, &fx)
            waiting.insert(turn.player, at: 0)
            fx.writes.append(.enqueue(machine: id, turn.player, atHead: true, at: fx.now.wall))
            fx.queueMoved(from: 0)
            let kept = "\(machine.name) reported a fault: \(text). It is out of play; you keep the head of its queue."
            notice(turn.player.address, WireError(.machineFault, kept), &fx)
            return finish(nil, &fx)
        case .playing, .awaitingResult:
            endTurn(.machineFault, reason: report.code, &fx)
            let ended = "\(machine.name) reported a fault: \(text). Your game has ended."
            notice(turn.player.address, WireError(.machineFault, ended), &fx)
            return finish(turn.session, &fx)
        case .idle:
            return finish(nil, &fx)
        }
    }

    // MARK: By hand

    /// An operator takes the machine out of play (`on`, with `reason`) or
    /// puts it back. Out: a game in progress (or an offer) finishes first,
    /// and no turn is offered after it. Back: the fault, if any, is cleared
    /// too, and the next turn is offered.
    ///
    /// - Returns: false when there was nothing to change.
    mutating func maintain(on: Bool, reason: String?, _ context: TransitionContext) -> Step<Bool> {
        var fx = Effects(context)
        if on {
            let reason = reason ?? Self.defaultMaintenanceReason
            guard maintenance?.reason != reason else { return finish(false, &fx) }
            setMaintenance(Maintenance(fault: maintenance?.fault, reason: reason), &fx)
            emit(.maintenance, &fx) {
                $0.data = "on"
                $0.reason = reason
            }
        } else {
            guard maintenance != nil else { return finish(false, &fx) }
            setMaintenance(nil, &fx)
            reset = nil
            emit(.maintenance, &fx) {
                $0.data = "off"
                $0.reason = "operator"
            }
        }
        return finish(true, &fx)
    }

    // MARK: Reset

    /// What became of an operator's reset.
    enum ResetOutcome: Sendable, Equatable {
        /// 1002 went out with this gateway serial.
        case sent(serial: Int64)
        /// The PC is not there to take it.
        case offline
        /// A player holds the machine: homing the gantry would end their game.
        case busy
    }

    /// An operator's `POST …/reset`: 1002 on the machine's control topic.
    /// No turn is offered until the PC has acked it and said `online`
    /// afresh; then a fault is cleared (an operator's reason stays).
    mutating func reset(_ context: TransitionContext) -> Step<ResetOutcome> {
        var fx = Effects(context)
        guard online else { return finish(.offline, &fx) }
        guard case .idle = phase else { return finish(.busy, &fx) }
        let serial = takeSerial()
        reset = .sent(serial: serial)
        acks.insert(PendingAck(sentAt: fx.now.uptime, command: .reset, session: nil), serial: serial)
        fx.list.append(.command(WireMessage(.reset, serial: serial), camera: false))
        emit(.reset, &fx) {
            $0.data = "sent"
            $0.serial = serial
        }
        return finish(.sent(serial: serial), &fx)
    }

    /// The PC acked the reset `serial`: it is homing; its fresh `online` ends the reset.
    mutating func resetAcked(serial: Int64) {
        if reset == .sent(serial: serial) { reset = .acked }
    }

    /// The reset `serial` was not acked in time: it is forgotten; the
    /// machine stays as it was (in maintenance, if it was).
    mutating func resetNotAcked(serial: Int64, _ fx: inout Effects) {
        guard reset == .sent(serial: serial) else { return }
        reset = nil
        emit(.reset, &fx) {
            $0.data = "not_acked"
            $0.serial = serial
        }
    }

    /// A fresh `online` from the PC: a reset it acked is done, and its
    /// fault with it.
    mutating func resetDone(_ fx: inout Effects) {
        guard reset == .acked else { return }
        reset = nil
        guard maintenance?.fault != nil else { return }
        // An operator's reason keeps the machine out; only the fault goes.
        let left = Maintenance(fault: nil, reason: maintenance?.reason)
        setMaintenance(left.isEmpty ? nil : left, &fx)
        guard left.isEmpty else { return }
        emit(.maintenance, &fx) {
            $0.data = "off"
            $0.reason = "reset"
        }
    }

    /// The PC went offline: a reset it had not acked never will be.
    mutating func resetLost() {
        if case .sent = reset { reset = nil }
    }

    private mutating func setMaintenance(_ new: Maintenance?, _ fx: inout Effects) {
        guard new != maintenance else { return }
        maintenance = new
        fx.snapshotChanged = true
        fx.writes.append(.maintenance(machine: id, new))
    }
}
