import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// Every transition of a machine's game as a plain function over its value
/// (SPEC §2–§3): what it answers, the effects it decides and the writes it
/// asks for. No broker, no storage, no tasks, no sleeping.
@Suite struct MachineStateQueueTests {
    @Test func joiningAFreeMachineOffersTheTurn() throws {
        var game = PureGame()
        let step = game.join("alice")
        #expect(step.outcome == .offered(session: "s1"))
        #expect(step.eventTypes == [.joined, .offered])
        let offer = try #require(step.offer(to: "alice"))
        #expect(offer.data == "s1")
        #expect(offer.timeout == 10)
        #expect(offer.serial == 1000)
        let reply = try #require(step.replies.first)
        #expect(reply.priority == .high)
        #expect(reply.expires == game.now.uptime + .seconds(10), "an offer is worthless after its accept deadline")
        #expect(reply.to == PlayerAddress(accid: "alice", provider: "app"))
        #expect(step.writes.contains(.dequeue(machine: "m1", player: PlayerAddress(accid: "alice", provider: "app"))))
        #expect(step.games.map(\.id) == ["s1"])
        #expect(step.games.first?.startedAt == nil)
        let snapshot = try #require(step.snapshots.last)
        #expect(snapshot.state == .offered)
        #expect(snapshot.player?.accid == "alice")
        #expect(snapshot.player?.deadline == Timestamp.string(game.now.wall.addingTimeInterval(10)))
        #expect(step.writes.last == .meta(machine: "m1", snapshotSeq: snapshot.seq, paused: false), "the seq is durable with the change")
    }

    @Test func joinsQueueInOrderAndEachIsToldTheirPosition() {
        var game = PureGame()
        game.join("alice")
        let bob = game.join("bob")
        #expect(bob.outcome == .queued(position: 1, length: 1))
        #expect(bob.replies(to: "bob") == [WireMessage(.queuePosition, data: "1", length: 1)])
        #expect(bob.writes.first == .enqueue(machine: "m1", QueueEntry(accid: "bob", nick: "Bob", provider: "app"), atHead: false, at: game.now.wall))
        let carol = game.join("carol")
        #expect(carol.outcome == .queued(position: 2, length: 2))
        #expect(carol.replies.map(\.to.accid) == ["carol"], "nobody else moved")
        #expect(carol.events(.joined).first?.position == 2)
    }

    @Test func joiningTwiceOrAFullQueueIsRefused() {
        var game = PureGame(settings: GameSettings(maxQueue: 1))
        game.join("alice")
        game.join("bob")
        #expect(game.join("bob").rejectedCode == .alreadyQueued)
        #expect(game.join("alice").rejectedCode == .alreadyQueued, "the offered player holds the machine")
        let full = game.join("carol")
        #expect(full.rejectedCode == .queueFull)
        #expect(full.writes.isEmpty)
        #expect(full.eventTypes == [.dropped])
        #expect(full.error(to: "carol") == "queue_full")
    }

    @Test func leavingMovesEveryoneBehindUp() {
        var game = PureGame()
        game.join("alice")
        game.join("bob")
        game.join("carol")
        game.join("dave")
        let left = game.send("bob", #"{"command":7}"#)
        #expect(left.outcome == .left)
        #expect(left.writes.first == .dequeue(machine: "m1", player: PlayerAddress(accid: "bob", provider: "app")))
        #expect(left.replies.map(\.to.accid) == ["carol", "dave"])
        #expect(left.replies(to: "dave") == [WireMessage(.queuePosition, data: "2", length: 2)])
        #expect(game.send("bob", #"{"command":7,"serial":3}"#).rejectedCode == .notInQueue)
    }

    @Test func queueChangesAreRefusedWhileStorageFails() {
        var game = PureGame()
        game.join("alice")
        game.storageWritable = false
        let join = game.join("bob")
        #expect(join.rejectedCode == .gatewayUnavailable)
        #expect(join.writes.isEmpty)
        #expect(game.state.waiting.isEmpty, "nothing changed")
        #expect(game.send("alice", #"{"command":13,"data":"s1"}"#).rejectedCode == .gatewayUnavailable)
        #expect(game.status == .offered)
    }

    @Test func theSnapshotSeqGrowsWithEveryChangeAndEventsAreNumbered() {
        var game = PureGame()
        var seqs: [Int64] = [game.state.snapshotSeq]
        var events: [Int64] = []
        for player in ["a", "b", "c"] {
            let step = game.join(player)
            seqs += step.snapshots.map(\.seq)
            events += step.events.map(\.seq)
        }
        #expect(seqs == [1, 2, 3, 4])
        #expect(events == Array(2...Int64(events.count + 1)), "1 was the online event")
    }

    @Test func aMoveStoresNothing() throws {
        var game = PureGame()
        try game.play("alice")
        let move = game.move("alice", serial: 1)
        #expect(move.writes.isEmpty)
        #expect(move.snapshots.isEmpty)
    }

    /// SPEC §5: replies follow the provider of the player's latest notification.
    /// SPEC §5: a player is the pair (provider, account).
    @Test func theSameAccountOnTwoProvidersIsTwoPlayers() throws {
        var game = PureGame()
        #expect(game.send("alice", #"{"command":6}"#, provider: "netease").outcome == .offered(session: "s1"))
        let joined = game.send("alice", #"{"command":6}"#, provider: "generic")
        #expect(joined.outcome == .queued(position: 1, length: 1), "her own place, not already_queued")
        #expect(joined.replies.map(\.to) == [PlayerAddress(accid: "alice", provider: "generic")])
        let snapshot = try #require(joined.snapshots.last)
        #expect(snapshot.player?.provider == "netease")
        #expect(snapshot.waiting.map(\.provider) == ["generic"])
        // The generic alice cannot take the NetEase alice's turn.
        let stolen = game.send("alice", #"{"command":12,"data":"s1"}"#, provider: "generic")
        #expect(stolen.outcome.rejectedCode == .notYourTurn)
        #expect(stolen.replies.map(\.to.provider) == ["generic"])
        let accepted = game.send("alice", #"{"command":12,"data":"s1"}"#, provider: "netease")
        #expect(accepted.outcome == .accepted(session: "s1"))
        #expect(accepted.replies.map(\.to) == [PlayerAddress(accid: "alice", provider: "netease")])
        // Leaving is the generic alice's own: the NetEase one plays on.
        let left = game.send("alice", #"{"command":7}"#, provider: "generic")
        #expect(left.outcome == .left)
        #expect(left.writes.contains(.dequeue(machine: "m1", player: PlayerAddress(accid: "alice", provider: "generic"))))
        #expect(game.state.phase.status == .playing)
        #expect(game.state.waiting.isEmpty)
    }
}

@Suite struct MachineStateTurnTests {
    @Test func acceptingPutsTheCoinsInAndStartsThePlayTimer() throws {
        var game = PureGame(settings: GameSettings(coinsPerGame: 2))
        game.join("alice")
        let accept = game.send("alice", #"{"command":12,"data":"s1","serial":1}"#)
        #expect(accept.outcome == .accepted(session: "s1"))
        let coins = try #require(accept.commands.first)
        #expect(coins.message == WireMessage(.addCoins, data: "2", serial: 1001, session: "s1", player: "alice", settings: .defaults))
        #expect(!coins.camera)
        #expect(accept.replies(to: "alice") == [WireMessage(.queuePosition, data: "0", length: 0)])
        #expect(accept.games.first?.startedAt == game.now.wall)
        #expect(game.status == .playing)
        #expect(game.state.phase.turn?.deadline == game.now.uptime + .seconds(30))
        // A second copy of the accept changes nothing.
        let again = game.send("alice", #"{"command":12,"data":"s1","serial":1}"#)
        #expect(again.outcome == .ignored("the game has already started"))
        #expect(again.effects.isEmpty && again.writes.isEmpty)
    }

    @Test func anAcceptWhileTheBrokerIsAwayChangesNothingAndCanBeRetried() {
        var game = PureGame()
        game.join("alice")
        game.brokerConnected = false
        #expect(game.send("alice", #"{"command":12,"data":"s1"}"#).rejectedCode == .gatewayUnavailable)
        #expect(game.status == .offered)
        game.brokerConnected = true
        #expect(game.send("alice", #"{"command":12,"data":"s1"}"#).outcome == .accepted(session: "s1"))
    }

    @Test func declineSessionMismatchAndWhoMayAccept() {
        var game = PureGame()
        game.join("alice")
        game.join("bob")
        #expect(game.send("alice", #"{"command":12,"data":"nope","serial":9}"#).rejectedCode == .sessionMismatch)
        #expect(game.send("bob", #"{"command":12,"data":"s1"}"#).rejectedCode == .notYourTurn)
        #expect(game.send("carol", #"{"command":12,"data":"s1"}"#).rejectedCode == .notInQueue)
        let decline = game.send("alice", #"{"command":13,"data":"s1"}"#)
        #expect(decline.outcome == .declined)
        #expect(decline.games.first { $0.id == "s1" }?.outcome == .declined)
        #expect(decline.offer(to: "bob")?.data == "s2", "the turn passes on in the same transition")
    }

    @Test func anOfferThatRunsOutPassesTheTurn() {
        var game = PureGame()
        game.join("alice")
        game.join("bob")
        #expect(game.state.nextDeadline() == game.now.uptime + .seconds(10))
        #expect(game.advance(by: .seconds(9)).effects.isEmpty)
        let expired = game.advance(by: .seconds(1))
        #expect(expired.events(.expired).map(\.player) == ["alice"])
        #expect(expired.games.first { $0.id == "s1" }?.outcome == .expired)
        #expect(expired.offer(to: "bob")?.data == "s2")
        #expect(game.snapshot.waiting.isEmpty, "an expired player leaves the queue")
    }

    @Test func leavingAnOfferPassesTheTurn() {
        var game = PureGame()
        game.join("alice")
        game.join("bob")
        let left = game.send("alice", #"{"command":7}"#)
        #expect(left.games.first { $0.id == "s1" }?.outcome == .left)
        #expect(game.snapshot.player?.accid == "bob")
    }
}

@Suite struct MachineStatePlayTests {
    @Test func aMoveIsForwardedInTheWireFormatWithSessionAndPlayer() throws {
        var game = PureGame()
        try game.play("alice")
        let move = game.move("alice", serial: 7)
        #expect(move.outcome == .forwarded(serial: 1002))
        let command = try #require(move.commands.first)
        #expect(command.message.encodedString() == #"{"command":1,"data":"left","serial":1002,"session":"s1","player":"alice"}"#)
        let camera = game.send("alice", #"{"command":3,"data":2,"serial":8}"#)
        #expect(camera.commands.first?.camera == true)
        #expect(camera.commands.first?.message.data == "2")
        let event = try #require(move.events(.command).first)
        #expect(event.playerSerial == 7)
        #expect(event.serial == 1002)
        #expect(event.data == "left")
    }

    @Test func onlyThePlayerSteersAndOnlyAfterAccepting() throws {
        var game = PureGame()
        game.join("alice")
        #expect(game.move("alice", serial: 1).rejectedCode == .notYourTurn, "accept first")
        game.send("alice", #"{"command":12,"data":"s1"}"#)
        game.join("bob")
        let bob = game.move("bob", serial: 3)
        #expect(bob.rejectedCode == .notYourTurn)
        #expect(bob.replies(to: "bob").last?.serial == 3, "the refusal carries the serial it answers")
        #expect(bob.events(.dropped).first?.reason == "not_your_turn")
        #expect(bob.commands.isEmpty)
    }

    @Test func aRepeatedSerialIsDropped() throws {
        var game = PureGame()
        try game.play("alice")
        game.move("alice", serial: 5)
        let again = game.move("alice", serial: 5)
        #expect(again.rejectedCode == .duplicateSerial)
        #expect(again.commands.isEmpty)
    }

    @Test func theSerialWindowIsBoundedAndForgetsTheOldest() throws {
        var game = PureGame(settings: GameSettings(playTimeout: .seconds(3600), maxCommandsPerSecond: 10_000))
        try game.play("alice")
        for serial in 1...Int64(SerialWindow.capacity) {
            #expect(game.move("alice", serial: serial).rejectedCode == nil)
        }
        #expect(game.move("alice", serial: 1).rejectedCode == .duplicateSerial)
        #expect(game.move("alice", serial: 1_000_000).rejectedCode == nil)
        #expect(game.move("alice", serial: 1).rejectedCode == nil, "serial 1 fell out of the window")
        #expect(game.state.phase.turn?.serials.count == SerialWindow.capacity)
    }

    @Test func whileTheBrokerIsAwayACommandIsRefusedAndItsSerialNotUsedUp() throws {
        var game = PureGame()
        try game.play("alice")
        game.brokerConnected = false
        let refused = game.move("alice", serial: 1)
        #expect(refused.rejectedCode == .gatewayUnavailable)
        #expect(refused.commands.isEmpty)
        game.brokerConnected = true
        #expect(game.move("alice", serial: 1).rejectedCode == nil)
    }

    @Test func aGrabWaitsForTheResultAndOnlyTheCameraMayStillSwitch() throws {
        var game = PureGame()
        try game.play("alice")
        let grab = game.send("alice", #"{"command":2,"serial":2}"#)
        #expect(grab.eventTypes == [.command, .grab])
        #expect(game.status == .awaitingResult)
        #expect(grab.snapshots.last?.state == .awaitingResult)
        #expect(game.state.phase.turn?.deadline == game.now.uptime + .seconds(20))
        #expect(game.move("alice", serial: 3).rejectedCode == .notYourTurn)
        #expect(game.send("alice", #"{"command":3,"data":"1","serial":4}"#).rejectedCode == nil)
    }

    @Test func thePlayTimerDropsTheClawAndTheResultTimerGivesUp() throws {
        var game = PureGame()
        try game.play("alice")
        game.ack(1001)
        #expect(game.advance(by: .seconds(29)).effects.isEmpty)
        let drop = game.advance(by: .seconds(1))
        #expect(drop.commands.map(\.message.code) == [.grab])
        #expect(drop.commands.first?.message.session == "s1")
        #expect(drop.events(.autoGrab).count == 1)
        #expect(game.status == .awaitingResult)
        let noResult = game.advance(by: .seconds(20))
        #expect(noResult.events(.noResult).map(\.player) == ["alice"])
        #expect(noResult.games.first?.outcome == .noResult)
        #expect(game.status == .idle)
    }

    @Test func leavingMidGameDropsTheClawAndKeepsTheResult() throws {
        var game = PureGame()
        try game.play("alice")
        let left = game.send("alice", #"{"command":7}"#)
        #expect(left.outcome == .left)
        #expect(left.commands.map(\.message.code) == [.grab])
        #expect(game.status == .awaitingResult)
        #expect(game.result(false).games.first?.outcome == .lost)
    }
}

@Suite struct MachineStateResultTests {
    @Test func theResultEndsTheGameTellsThePlayerAndOffersTheNextTurn() throws {
        var game = PureGame()
        let session = try game.play("alice")
        game.join("bob")
        game.move("alice", serial: 1)
        game.send("alice", #"{"command":2,"serial":2}"#)
        let result = game.result(true, session: session)
        #expect(result.replies(to: "alice") == [WireMessage(.result, data: "true", session: session)])
        #expect(result.replies.first?.priority == .high)
        let record = try #require(result.games.first { $0.id == session })
        #expect(record.outcome == .won)
        #expect(record.commands == 2, "the move and the grab")
        #expect(record.endedAt == game.now.wall)
        #expect(result.events(.gameEnded).first?.outcome == .won)
        #expect(result.offer(to: "bob")?.data == "s2")
    }

    @Test func aResultWithoutASessionIsTheCurrentGames() throws {
        var game = PureGame()
        try game.play("alice")
        game.send("alice", #"{"command":2,"serial":2}"#)
        #expect(game.result(false).games.first?.outcome == .lost)
    }

    /// The late result of SPEC §2: alice's result comes after her result
    /// timer, when bob's game runs. It must not end bob's game.
    @Test func aLateResultCannotEndTheNextPlayersGame() throws {
        var game = PureGame()
        let alice = try game.play("alice")
        game.join("bob")
        game.send("alice", #"{"command":2,"serial":1}"#)
        game.advance(by: .seconds(20))  // no result in time
        let bobSession = try #require(game.state.phase.turn?.session)
        game.send("bob", #"{"command":12,"data":"\#(bobSession)"}"#)
        let late = game.result(true, session: alice)
        #expect(late.eventTypes == [.staleResult])
        #expect(late.events.first?.session == alice)
        #expect(late.replies.isEmpty, "bob is not credited with alice's win")
        #expect(late.writes.isEmpty)
        #expect(game.status == .playing)
        #expect(game.state.phase.turn?.player.accid == "bob")
    }

    @Test func aResultWithNoGameIsAnEventForOperatorsOnly() {
        var game = PureGame()
        let result = game.result(false)
        #expect(result.events.map(\.type) == [.result])
        #expect(result.events.first?.player == nil)
        #expect(result.replies.isEmpty)
        #expect(game.result(true, session: "zzz").eventTypes == [.staleResult])
    }
}

@Suite struct MachineStateAckTests {
    @Test func anAckIsMatchedToThePlayersSerialWithItsLatency() throws {
        var game = PureGame(settings: GameSettings(relayAcks: true))
        try game.play("alice")
        game.ack(1001)  // the coins
        guard case .forwarded(let serial) = game.move("alice", "right", serial: 41).outcome else {
            Issue.record("not forwarded")
            return
        }
        game.now.uptime += .milliseconds(25)
        let ack = game.ack(serial, data: "moved")
        #expect(ack.replies(to: "alice") == [WireMessage(.ack, data: "moved", serial: 41)])
        #expect(ack.replies.first?.priority == .normal)
        let event = try #require(ack.events.first)
        #expect(event.playerSerial == 41)
        #expect(event.latencyMs == 25)
        #expect(event.command == "move")
        #expect(game.ack(serial).effects.isEmpty, "a repeated ack is not counted twice")
    }

    @Test func missedAcksInARowMakeTheMachineSuspectAndAnAckClearsIt() throws {
        var game = PureGame(settings: GameSettings(playTimeout: .seconds(3600), suspectAfter: 3))
        try game.play("alice")
        game.ackCoin()
        game.join("bob")
        for serial in 1...3 { game.move("alice", serial: Int64(serial)) }
        // Three moves go unacked: the third timeout makes it suspect.
        let timeouts = game.advance(by: .seconds(3))
        #expect(timeouts.events(.ackTimeout).count == 3)
        #expect(timeouts.events(.suspect).count == 1)
        #expect(game.snapshot.suspect)
        #expect(timeouts.snapshots.last?.suspect == true)
        #expect(game.status == .playing, "the game in progress goes on")
        // No new turn while suspect.
        game.send("alice", #"{"command":2,"serial":9}"#)
        game.advance(by: .seconds(3))
        let result = game.result(true)
        #expect(result.offer(to: "bob") == nil)
        #expect(game.status == .idle)
        // Any ack clears it, and the waiting player is offered the turn at once.
        let ack = game.ack(1003)
        #expect(ack.eventTypes.prefix(1) == [.suspectCleared])
        #expect(ack.offer(to: "bob") != nil)
        #expect(!game.snapshot.suspect)
    }

    @Test func aFreshOnlineClearsSuspectAndOneAckResetsTheCount() throws {
        var game = PureGame(settings: GameSettings(playTimeout: .seconds(3600), suspectAfter: 2))
        try game.play("alice")
        game.ackCoin()
        game.move("alice", serial: 1)
        game.advance(by: .seconds(3))  // one timeout
        game.move("alice", serial: 2)
        game.ack(1003)  // answered: the count starts again
        game.move("alice", serial: 3)
        #expect(game.advance(by: .seconds(3)).events(.suspect).isEmpty, "one in a row after the ack")
        game.move("alice", serial: 4)
        #expect(game.advance(by: .seconds(3)).events(.suspect).count == 1)
        let online = game.presence(.online)
        #expect(online.eventTypes == [.suspectCleared])
        #expect(!game.snapshot.suspect)
    }

    /// The broker gives the gateway every retained `online` again when it
    /// reconnects; a dead PC's (its will never fired) must not clear suspect.
    @Test func aRetainedOnlineDoesNotClearSuspect() throws {
        var game = PureGame(settings: GameSettings(playTimeout: .seconds(3600), suspectAfter: 1))
        try game.play("alice")
        #expect(game.advance(by: .seconds(3)).events(.suspect).count == 1, "the coins went unacked")
        let retained = game.presence(.online, retained: true)
        #expect(retained.eventTypes.isEmpty)
        #expect(game.snapshot.suspect)
        #expect(game.presence(.online).eventTypes == [.suspectCleared], "the PC saying it itself does")
    }

    @Test func suspectAfterZeroNeverSuspects() throws {
        var game = PureGame(settings: GameSettings(playTimeout: .seconds(3600), suspectAfter: 0))
        try game.play("alice")
        for serial in 1...10 { game.move("alice", serial: Int64(serial)) }
        #expect(game.advance(by: .seconds(3)).events(.suspect).isEmpty)
    }

    @Test func acksAreNotRelayedByDefault() throws {
        var game = PureGame()
        try game.play("alice")
        game.move("alice", serial: 1)
        #expect(game.ack(1002).replies.isEmpty)
    }

    @Test func aMissingAckIsReportedAfterItsTimeoutAndTheGameGoesOn() throws {
        var game = PureGame()
        try game.play("alice")
        game.ack(1001)
        game.move("alice", "up", serial: 1)
        // The move's checkpoint comes first (within a second, CheckpointTests), then its ack's timeout.
        #expect(game.state.nextDeadline() == game.now.uptime + .seconds(1))
        #expect(game.advance(by: .seconds(1)).events.isEmpty)
        #expect(game.state.nextDeadline() == game.now.uptime + .seconds(2))
        #expect(game.advance(by: .seconds(1)).events.isEmpty)
        let timeout = game.advance(by: .seconds(1))
        let event = try #require(timeout.events(.ackTimeout).first)
        #expect(event.playerSerial == 1)
        #expect(event.command == "move")
        #expect(game.status == .playing)
        #expect(game.state.nextDeadline() == game.state.phase.turn?.deadline, "only the play timer is left")
    }
}

@Suite struct MachineStatePresenceTests {
    @Test func withoutGraceGoingOfflineEndsTheGameKeepsTheQueueAndResumesWhenBack() throws {
        var settings = GameSettings()
        settings.offlineGrace = .zero
        var game = PureGame(settings: settings)
        try game.play("alice")
        game.join("bob")
        let offline = game.presence(.offline)
        #expect(offline.error(to: "alice") == "machine_offline")
        #expect(offline.games.first?.outcome == .machineOffline)
        #expect(game.status == .offline)
        #expect(game.state.acks.isEmpty, "no ack will come from a PC that is gone")
        #expect(game.move("alice", serial: 9).rejectedCode == .machineOffline)
        #expect(game.join("carol").outcome == .queued(position: 2, length: 2), "players may still join")
        let online = game.presence(.online)
        #expect(online.offer(to: "bob") != nil)
        #expect(game.snapshot.waiting.map(\.accid) == ["carol"])
    }

    @Test func aGameSurvivesAShortDropWithItsTimerStoppedForTheGap() throws {
        var game = PureGame()
        let session = try game.play("alice")
        game.ackCoin()
        game.join("bob")
        game.advance(by: .seconds(12))  // 18 s of the 30 s play timer left
        let drop = game.presence(.offline)
        #expect(drop.eventTypes == [.offline, .reconnecting])
        #expect(drop.events(.reconnecting).first?.session == session)
        #expect(drop.error(to: "alice") == "machine_offline")
        #expect(drop.replies(to: "alice").last?.message?.contains("kept for 10 s") == true)
        #expect(drop.games.allSatisfy { $0.endedAt == nil }, "the game is not over")
        #expect(drop.games.last?.open?.deadline == game.now.wall.addingTimeInterval(18), "what a restart needs: the 18 s left")
        #expect(game.status == .offline)
        #expect(game.snapshot.player?.session == session, "the snapshot keeps the player through the gap")
        #expect(game.state.nextDeadline() == game.now.uptime + .seconds(10), "the grace's end, not the play timer")

        // Commands during the gap are refused, never delivered late.
        let lost = game.move("alice", serial: 1)
        #expect(lost.rejectedCode == .machineOffline)
        #expect(lost.commands.isEmpty)

        #expect(game.advance(by: .seconds(9)).effects.isEmpty, "the play timer is stopped, the grace not over")
        let back = game.presence(.online)
        #expect(back.eventTypes == [.online, .reconnected])
        #expect(back.replies(to: "alice").last?.code == .queuePosition)
        #expect(back.replies(to: "alice").last?.data == "0")
        #expect(game.status == .playing)
        #expect(game.state.phase.turn?.deadline == game.now.uptime + .seconds(18), "the timer goes on from where it stopped")
        #expect(game.move("alice", serial: 2).commands.count == 1)

        // The PC finishes the game it kept.
        game.send("alice", #"{"command":2,"serial":3}"#)
        let result = game.result(true, session: session)
        #expect(result.games.first?.outcome == .won)
        #expect(result.offer(to: "bob") != nil)
    }

    @Test func aGameWhosePCDoesNotReturnInTimeEndsMachineOffline() throws {
        var game = PureGame()
        try game.play("alice")
        game.ackCoin()
        game.join("bob")
        game.presence(.offline)
        let over = game.advance(by: .seconds(10))
        #expect(over.games.first?.outcome == .machineOffline)
        #expect(over.error(to: "alice") == "machine_offline")
        #expect(over.offer(to: "bob") == nil, "the machine is still offline")
        #expect(game.snapshot.player == nil)
        #expect(game.snapshot.waiting.map(\.accid) == ["bob"])
        #expect(game.state.nextDeadline() == nil)
        let back = game.presence(.online)
        #expect(back.eventTypes.contains(.reconnected) == false)
        #expect(back.offer(to: "bob") != nil)
    }

    @Test func theResultTimerIsStoppedTooAndALateResultStillCounts() throws {
        var game = PureGame()
        let session = try game.play("alice")
        game.ackCoin()
        game.send("alice", #"{"command":2,"serial":1}"#)
        game.advance(by: .seconds(5))  // 15 s of the 20 s result timer left
        game.presence(.offline)
        game.advance(by: .seconds(8))
        game.presence(.online)
        #expect(game.status == .awaitingResult)
        #expect(game.state.phase.turn?.deadline == game.now.uptime + .seconds(15))
        #expect(game.result(false, session: session).games.first?.outcome == .lost)
    }

    @Test func aPlayerWhoLeavesDuringTheGapEndsTheirGame() throws {
        var game = PureGame()
        try game.play("alice")
        game.ackCoin()
        game.presence(.offline)
        let left = game.send("alice", #"{"command":7}"#)
        #expect(left.games.first?.outcome == .left)
        game.join("bob")
        #expect(game.advance(by: .seconds(10)).games.isEmpty, "nothing left to end")
        let back = game.presence(.online)
        #expect(back.eventTypes.contains(.reconnected) == false)
        #expect(back.offer(to: "bob") != nil)
    }

    @Test func anOfferIsNotKeptThroughADrop() {
        var game = PureGame()
        game.join("alice")
        let drop = game.presence(.offline)
        #expect(!drop.eventTypes.contains(.reconnecting))
        #expect(game.snapshot.player == nil)
    }

    @Test func aTurnThatEndsWithoutItsPlayerIsToldToThem() throws {
        var game = PureGame()
        game.join("alice")
        let expired = game.advance(by: .seconds(10))
        #expect(expired.error(to: "alice") == "offer_expired")
        try game.play("bob")
        game.send("bob", #"{"command":2,"serial":1}"#)
        let noResult = game.advance(by: .seconds(20))
        #expect(noResult.games.first?.outcome == .noResult)
        #expect(noResult.error(to: "bob") == "no_result")
        #expect((expired.replies + noResult.replies).filter { $0.message.code == .error }.allSatisfy { $0.priority == .high },
            "notices go out ahead of refusals and are never held back")
    }

    @Test func anOfferedPlayerKeepsTheHeadWhenTheMachineDrops() {
        var game = PureGame()
        game.join("alice")
        game.join("bob")
        let offline = game.presence(.offline)
        #expect(game.snapshot.waiting.map(\.accid) == ["alice", "bob"])
        #expect(offline.writes.contains { if case .enqueue(_, let entry, true, _) = $0 { entry.accid == "alice" } else { false } })
        game.presence(.online)
        #expect(game.snapshot.player?.accid == "alice")
        #expect(game.state.phase.turn?.session == "s2")
    }

    @Test func offlineWinsOverTurnErrors() {
        var game = PureGame(online: false)
        #expect(game.send("nobody", #"{"command":2,"serial":1}"#).rejectedCode == .machineOffline)
        #expect(game.send("nobody", #"{"command":12,"data":"x"}"#).rejectedCode == .machineOffline)
    }

    @Test func aRepeatedPresenceChangesNothing() {
        var game = PureGame()
        #expect(game.presence(.online).effects.isEmpty)
        game.presence(.offline)
        #expect(game.presence(.offline).effects.isEmpty)
    }
}

@Suite struct MachineStateOperatorTests {
    @Test func pauseKeepsTheQueueAndOffersNoTurn() {
        var game = PureGame()
        let pause = game.state.pause(game.context)
        #expect(pause.outcome)
        #expect(pause.writes == [.meta(machine: "m1", snapshotSeq: 2, paused: true)])
        #expect(!game.state.pause(game.context).outcome, "already paused")
        game.join("alice")
        #expect(game.status == .idle)
        #expect(game.snapshot.paused)
        let resume = game.state.resume(game.context)
        #expect(resume.offer(to: "alice") != nil)
        #expect(resume.eventTypes.first == .resumed)
    }

    @Test func skipAndRemove() throws {
        var game = PureGame()
        try game.play("alice")
        game.join("bob")
        game.join("carol")
        let removed = game.state.remove(accid: "carol", provider: nil, game.context)
        #expect(removed.outcome == .removed)
        #expect(removed.writes.contains(.dequeue(machine: "m1", player: PlayerAddress(accid: "carol", provider: "app"))))
        // Neither is left in silence (SPEC §3): each hears it, ahead of refusals.
        #expect(removed.error(to: "carol") == "not_in_queue")
        #expect(removed.replies.first { $0.to.accid == "carol" }?.priority == .high)
        let skip = game.state.skip(game.context)
        #expect(skip.games.first { $0.player == "alice" }?.outcome == .skipped)
        #expect(skip.error(to: "alice") == "not_your_turn")
        #expect(skip.replies(to: "alice").last?.message?.contains("operator") == true)
        #expect(skip.offer(to: "bob") != nil)
        #expect(game.snapshot.player?.accid == "bob")
        #expect(game.state.remove(accid: "zed", provider: nil, game.context).outcome == .notFound)
        game.send("bob", #"{"command":13,"data":"s2"}"#)
        #expect(!game.state.skip(game.context).outcome, "nobody to skip")
    }

    @Test func theDurableImageIsTheQueueTheSeqAndTheOpenGame() throws {
        var game = PureGame()
        try game.play("alice")
        game.join("bob")
        let image = game.state.durableImage(at: game.now)
        #expect(image.queue.map(\.accid) == ["bob"])
        #expect(image.snapshotSeq == game.state.snapshotSeq)
        #expect(image.openGame?.id == "s1")
        #expect(image.openGame?.startedAt != nil)
        #expect(image.openGame?.outcome == nil)
        // What a restart needs to take the game up (SPEC §13): its phase, its deadline on the wall clock, its coin.
        let open = try #require(image.openGame?.open)
        #expect(open.phase == .playing && open.coinSerial != nil && !open.coinAcked)
        #expect(open.deadline == game.now.wall.addingTimeInterval(GameSettings().playTimeout.seconds))
    }

    @Test func aRestoredQueueIsOfferedWhenThePCComesOnline() {
        var game = PureGame(
            online: false,
            restored: RestoredMachine(
                queue: [QueueEntry(accid: "zoe", nick: "Zoë", provider: "netease")], snapshotSeq: 41, paused: false))
        let online = game.presence(.online)
        #expect(online.replies.first?.to == PlayerAddress(accid: "zoe", provider: "netease"), "replies go back the way she came")
        #expect(online.snapshots.last?.seq == 42)
    }
}
