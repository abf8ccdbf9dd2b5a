import Testing

@testable import ClawGateway

/// What a reload applies and what waits for a restart (SPEC §13).
@Suite struct ConfigChangeTests {
    @Test func theMachinesAndTheGameApplyTheRestWaitsForARestart() {
        let running = GameHarness.config(settings: GameSettings())
        var file = running
        file.http.port = 9
        file.mqtt.keepalive = 5
        file.im.generic = GenericSettings(secret: "new", maxClockSkew: .seconds(300), replyTimeout: .seconds(5), replyConcurrency: 4)
        file.game.playTimeout = .seconds(5)
        file.game.maxCommandsPerSecond = 20
        file.machines[0].cameraTopic = "cams/switch"
        file.machines[0].name = "Raichu"
        file.machines.append(MachineConfig(id: "m2", name: "Eevee", imAccount: "claw_m2", cameras: [], chatroomID: 7))

        let change = ConfigChange(running: running, file: file)
        #expect(change.needsRestart == ["mqtt", "http", "im", "game.max_commands_per_second", "machines.m1.camera_topic"])
        #expect(change.applied.http.port == running.http.port)
        #expect(change.applied.mqtt.keepalive == running.mqtt.keepalive)
        #expect(change.applied.im.generic == nil)
        #expect(change.applied.game.playTimeout == .seconds(5))
        #expect(change.applied.game.maxCommandsPerSecond == running.game.maxCommandsPerSecond)
        #expect(change.applied.machines.map(\.id) == ["m1", "m2"])
        #expect(change.applied.machines[0].name == "Raichu")
        #expect(change.applied.machines[0].cameraTopic == nil, "its topics are the ones it subscribed")
    }

    @Test func aNewMachinesChatroomWaitsForTheAppServersRestart() {
        var running = GameHarness.config(settings: GameSettings())
        running.appServer = AppServerSettings()
        var file = running
        file.machines.append(MachineConfig(id: "m2", name: "Eevee", imAccount: "claw_m2", cameras: [], chatroomID: 7))
        #expect(ConfigChange(running: running, file: file).needsRestart == ["machines.m2.chatroom_id"])
    }

    /// SPEC §11: prices apply at once; whether games cost at all waits for a restart.
    @Test func pricesApplyCreditsOnOrOffWaitForARestart() {
        let free = GameHarness.config(settings: GameSettings())
        var paying = free
        paying.credits = CreditsSettings(price: 2, topupSecret: "0123456789abcdef")
        paying.machines[0].price = 2
        let turnedOn = ConfigChange(running: free, file: paying)
        #expect(turnedOn.needsRestart == ["credits"])
        #expect(turnedOn.applied.machines[0].price == nil, "games stay free until the restart")
        let turnedOff = ConfigChange(running: paying, file: free)
        #expect(turnedOff.needsRestart == ["credits"])
        #expect(turnedOff.applied.machines[0].price == 2, "games stay paid until the restart")
        var dearer = paying
        dearer.credits?.price = 3
        dearer.machines[0].price = 3
        let change = ConfigChange(running: paying, file: dearer)
        #expect(change.needsRestart.isEmpty)
        #expect(change.applied.machines[0].price == 3)
    }

    @Test func theSameFileChangesNothing() {
        let running = GameHarness.config(settings: GameSettings())
        #expect(ConfigChange(running: running, file: running).needsRestart.isEmpty)
    }
}
