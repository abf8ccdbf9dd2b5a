import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// Faults, maintenance and resets (SPEC §12) as transitions of the game,
/// with the clock moved by hand.
@Suite struct MaintenanceTests {
    static let claw = MachineFaultReport(code: "claw_rise_timeout", text: "The claw did not rise")

    /// Alice playing, bob waiting: the board faults.
    @Test func aFaultEndsTheGameInProgressAndKeepsTheQueue() throws {
        var game = PureGame()
        let session = try game.play("alice")
        game.ackCoin()
        game.join("bob")
        let fault = game.state.fault(Self.claw, game.context)

        #expect(fault.outcome == session, "the game's waiting commands are forgotten with it")
        #expect(fault.error(to: "alice") == "machine_fault")
        #expect(fault.games.last?.outcome == .machineFault)
        #expect(fault.events(.gameEnded).first?.reason == "claw_rise_timeout")
        let event = try #require(fault.events(.fault).first)
        #expect(event.data == "claw_rise_timeout" && event.reason == "The claw did not rise" && event.session == session)
        #expect(fault.writes.contains(.maintenance(machine: "m1", game.state.maintenance)))
        #expect(fault.offer(to: "bob") == nil, "no turn is offered")
        let snapshot = try #require(fault.snapshots.last)
        #expect(snapshot.state == .maintenance && snapshot.online)
        #expect(snapshot.fault == MachineFault(code: "claw_rise_timeout", text: "The claw did not rise", at: "2026-11-18T11:06:40.000Z"))
        #expect(snapshot.reason == nil)
        #expect(snapshot.waiting.map(\.accid) == ["bob"])

        // The queue may still be joined and left; nobody is offered a turn.
        game.join("carol")
        #expect(game.send("bob", #"{"command":7}"#).outcome == .left)
        #expect(game.snapshot.waiting.map(\.accid) == ["carol"])
        #expect(game.state.phase.turn == nil)
        #expect(game.advance(by: .seconds(60)).offer(to: "carol") == nil)
        // A result that comes after is for no game.
        #expect(game.result(true, session: session).eventTypes == [.staleResult])
    }

    @Test func aFaultWhileATurnIsOfferedGivesItBackToTheHeadOfTheQueue() throws {
        var game = PureGame()
        game.join("alice")
        game.join("bob")
        let fault = game.state.fault(Self.claw, game.context)
        #expect(fault.outcome == nil)
        #expect(fault.error(to: "alice") == "machine_fault")
        #expect(fault.games.last?.outcome == .machineFault)
        #expect(game.snapshot.waiting.map(\.accid) == ["alice", "bob"], "alice keeps the head")
        #expect(game.status == .maintenance)
    }

    /// 1002 goes out; the machine comes back on the reset's ack and a fresh `online`.
    @Test func aResetAckedAndAFreshOnlineBringTheMachineBack() throws {
        var game = PureGame()
        game.join("alice")
        _ = game.state.fault(Self.claw, game.context)
        let sent = game.state.reset(game.context)
        guard case .sent(let serial) = sent.outcome else {
            Issue.record("reset not sent: \(sent.outcome)")
            return
        }
        #expect(sent.commands.map(\.message.code) == [.reset])
        #expect(sent.commands.first?.message.serial == serial && sent.commands.first?.camera == false)
        #expect(sent.commands.first?.message.encodedString() == #"{"command":1002,"serial":\#(serial)}"#)
        #expect(sent.events(.reset).first?.data == "sent")

        // Not back yet: a fresh online before the ack, the ack alone, a retained online.
        #expect(game.presence(.online).offer(to: "alice") == nil)
        #expect(game.ack(serial).offer(to: "alice") == nil)
        #expect(game.presence(.online, retained: true).offer(to: "alice") == nil)
        #expect(game.status == .maintenance)

        let back = game.presence(.online)
        #expect(back.offer(to: "alice") != nil, "back in play: the head of the queue is offered the turn")
        #expect(back.events(.maintenance).first?.data == "off" && back.events(.maintenance).first?.reason == "reset")
        #expect(back.writes.contains(.maintenance(machine: "m1", nil)))
        #expect(game.state.maintenance == nil && game.snapshot.fault == nil)
    }

    @Test func aResetIsRefusedWhileOfflineOrWhileAPlayerHoldsTheMachine() throws {
        var offline = PureGame(online: false)
        #expect(offline.state.reset(offline.context).outcome == .offline)

        var offered = PureGame()
        offered.join("alice")
        #expect(offered.state.reset(offered.context).outcome == .busy, "an offer")
        var playing = PureGame()
        _ = try playing.play("bob")
        #expect(playing.state.reset(playing.context).outcome == .busy, "a game")
        #expect(playing.state.reset == nil && offered.state.reset == nil)
    }

    /// A reset that is not acked within ack_timeout is forgotten: the machine stays out.
    @Test func aResetNotAckedLeavesTheMachineInMaintenance() throws {
        var game = PureGame()
        _ = game.state.fault(Self.claw, game.context)
        guard case .sent(let serial) = game.state.reset(game.context).outcome else {
            Issue.record("reset not sent")
            return
        }
        let timeout = game.advance(by: game.state.settings.ackTimeout)
        #expect(timeout.events(.reset).first?.data == "not_acked")
        #expect(timeout.events(.reset).first?.serial == serial)
        #expect(game.state.reset == nil)
        game.ack(serial)
        game.presence(.online)
        #expect(game.status == .maintenance, "a late ack is no reset")
    }

    /// While a reset is on its way (even on a machine in play) no turn is offered.
    @Test func noTurnIsOfferedWhileAResetIsOnItsWay() throws {
        var game = PureGame()
        guard case .sent(let serial) = game.state.reset(game.context).outcome else {
            Issue.record("reset not sent")
            return
        }
        #expect(game.join("alice").offer(to: "alice") == nil)
        game.ack(serial)
        let back = game.presence(.online)
        #expect(back.offer(to: "alice") != nil)
        #expect(back.events(.maintenance).isEmpty, "it was never out of play")
    }

    /// By hand: the game in progress finishes, then the machine is out; a
    /// reset does not put it back, the operator does.
    @Test func anOperatorTakesTheMachineOutAfterItsGameAndPutsItBack() throws {
        var game = PureGame()
        let session = try game.play("alice")
        game.ackCoin()
        game.join("bob")
        let out = game.state.maintain(on: true, reason: "glass cleaning", game.context)
        #expect(out.outcome == true)
        #expect(out.events(.maintenance).first?.data == "on" && out.events(.maintenance).first?.reason == "glass cleaning")
        #expect(game.status == .playing, "alice's game goes on")
        #expect(game.snapshot.reason == "glass cleaning")
        #expect(game.state.maintain(on: true, reason: "glass cleaning", game.context).outcome == false, "nothing to change")

        let ended = game.result(true, session: session)
        #expect(ended.games.last?.outcome == .won)
        #expect(ended.offer(to: "bob") == nil)
        #expect(game.status == .maintenance)

        // A reset homes the gantry but the operator's reason keeps it out.
        guard case .sent(let serial) = game.state.reset(game.context).outcome else {
            Issue.record("reset not sent")
            return
        }
        game.ack(serial)
        #expect(game.presence(.online).offer(to: "bob") == nil)
        #expect(game.status == .maintenance)

        let back = game.state.maintain(on: false, reason: nil, game.context)
        #expect(back.outcome == true)
        #expect(back.offer(to: "bob") != nil)
        #expect(back.events(.maintenance).first?.data == "off" && back.events(.maintenance).first?.reason == "operator")
        #expect(game.state.maintain(on: false, reason: nil, game.context).outcome == false)
    }

    /// A newcomer's trip: a player who joined a machine in maintenance was
    /// not told why no turn came. Each position says so while it lasts.
    @Test func aPlayerJoiningAMachineOutOfPlayIsToldWhyNoTurnComes() throws {
        var game = PureGame()
        _ = game.state.maintain(on: true, reason: "glass cleaning", game.context)
        let joined = game.join("bob")
        let position = try #require(joined.replies(to: "bob").last { $0.code == .queuePosition })
        #expect(position.data == "1" && position.message?.contains("maintenance") == true && position.message?.contains("keep your place") == true)
        let back = game.state.maintain(on: false, reason: nil, game.context)
        #expect(back.offer(to: "bob") != nil)
        let carol = game.join("carol").replies(to: "carol").last { $0.code == .queuePosition }
        #expect(carol?.data == "1" && carol?.message == nil, "turns are offered again: a position says nothing more")
    }

    /// An operator who fixed the machine by hand puts it back without a reset: the fault goes too.
    @Test func puttingAFaultedMachineBackByHandClearsTheFault() throws {
        var game = PureGame()
        game.join("alice")
        _ = game.state.fault(Self.claw, game.context)
        #expect(game.state.maintain(on: false, reason: nil, game.context).offer(to: "alice") != nil)
        #expect(game.snapshot.fault == nil && game.snapshot.state == .offered)
    }

    /// A second fault replaces the first; an unknown code is a fault like any other.
    @Test func aFaultInMaintenanceReplacesTheOneShown() throws {
        var game = PureGame()
        _ = game.state.fault(Self.claw, game.context)
        game.now.wall = game.now.wall.addingTimeInterval(5)
        _ = game.state.fault(MachineFaultReport(code: "board_77", text: ""), game.context)
        #expect(game.snapshot.fault?.code == "board_77")
        #expect(game.snapshot.fault?.at == "2026-11-18T11:06:45.000Z")
    }

    /// Storage keeps it: a machine in maintenance is out after a restart.
    @Test func maintenanceOutlivesARestart() throws {
        let directory = try TemporaryDirectory.make(prefix: "maintenance")
        let store = try GameStore(path: GameHarness.databasePath(in: directory))
        let kept = Maintenance(fault: MachineFault(code: "prize_sensor", text: "blocked", at: "2026-11-18T11:06:40.000Z"), reason: "cleaning")
        try store.write([.maintenance(machine: "m1", kept)])
        #expect(try store.restore(machine: "m1").maintenance == kept)
        #expect(try store.restore(machine: "m2").maintenance == nil)

        var restored = RestoredMachine(queue: [QueueEntry(accid: "alice", nick: "Alice", provider: "app")], snapshotSeq: 3, paused: false)
        restored.maintenance = kept
        let game = PureGame(restored: restored)
        #expect(game.status == .maintenance)
        #expect(game.state.phase.turn == nil, "no turn offered on coming online")

        try store.write([.maintenance(machine: "m1", nil)])
        #expect(try store.restore(machine: "m1").maintenance == nil)
    }

    /// The snapshot as published (written by hand) reads back with its fault and reason.
    @Test func theSnapshotCarriesTheFaultAndTheReason() throws {
        var game = PureGame()
        _ = game.state.fault(MachineFaultReport(code: "prize_sensor", text: "The \"sensor\" is blocked"), game.context)
        _ = game.state.maintain(on: true, reason: "restocking", game.context)
        let snapshot = game.snapshot
        let text = String(decoding: snapshot.encoded(), as: UTF8.self)
        #expect(text.hasSuffix(#","length":0,"fault":{"code":"prize_sensor","text":"The \"sensor\" is blocked","at":"2026-11-18T11:06:40.000Z"},"reason":"restocking"}"#), "\(text)")
        #expect(JSONCoding.decode(QueueSnapshot.self, from: snapshot.encoded()) == snapshot)
        #expect(!String(decoding: PureGame().snapshot.encoded(), as: UTF8.self).contains("fault"), "absent while in play")
    }

    // MARK: Bad input

    @Test(arguments: [
        "", "not json", "[]", #"{"text":"no code"}"#, #"{"code":7}"#, #"{"code":""}"#, #"{"code":"has space"}"#,
        #"{"code":"ünïcode"}"#, #"{"code":"\#(String(repeating: "x", count: 65))"}"#, #"{"code":"a","text":5}"#,
        #"{"code":"a","text":"\#(String(repeating: "y", count: 501))"}"#,
    ])
    func aFaultMessageThatIsNotTheDocumentedJSONIsRefused(_ payload: String) {
        #expect(throws: MachineFaultReport.Invalid.self) { try MachineFaultReport.decode(Array(payload.utf8)) }
    }

    @Test func aFaultMessageWithAnyPlainCodeIsTaken() throws {
        #expect(try MachineFaultReport.decode(Array(#"{"code":"board_77"}"#.utf8)) == MachineFaultReport(code: "board_77", text: ""))
        #expect(
            try MachineFaultReport.decode(Array(#"{"code":"gantry_home_timeout","text":"not home","extra":1}"#.utf8))
                == MachineFaultReport(code: "gantry_home_timeout", text: "not home"))
    }

    @Test(arguments: [
        "", "[]", "{}", #"{"on":1}"#, #"{"on":"true"}"#, #"{"on":null}"#, #"{"on":true,"reason":5}"#, #"{"on":true,"reason":"  "}"#,
        #"{"on":true,"reason":"\#(String(repeating: "r", count: 201))"}"#, #"{"on":false,"reason":"why"}"#, #"{"on":true,"colour":1}"#,
        // Taking a machine out needs its reason (SPEC §16): missing, null or empty.
        #"{"on":true}"#, #"{"on":true,"reason":null}"#, #"{"on":true,"reason":""}"#,
    ])
    func aMaintenanceBodyThatIsNotTheDocumentedJSONIsRefused(_ body: String) {
        #expect(throws: Refusal.self) { try AdminRoutes<GatewayRequestContext>.maintenanceBody(Array(body.utf8)) }
    }

    @Test func aMaintenanceBodyIsRead() throws {
        typealias Routes = AdminRoutes<GatewayRequestContext>
        let why = try Routes.maintenanceBody(Array(#"{"on":true,"reason":" glass "}"#.utf8))
        #expect(why.on && why.reason == "glass")
        let back = try Routes.maintenanceBody(Array(#"{"on":false}"#.utf8))
        #expect(!back.on && back.reason == nil)
    }
}
