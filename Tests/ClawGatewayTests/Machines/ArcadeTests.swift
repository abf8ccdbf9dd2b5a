import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// How notifications are checked before they reach a machine (SPEC §2 precedence).
@Suite struct ArcadeTests {
    @Test(arguments: [
        ("not json", ErrorCode.invalidPayload),
        ("[1,2]", .invalidPayload),
        (#"{"data":"left"}"#, .invalidPayload),
        (#"{"command":"one"}"#, .invalidPayload),
        (#"{"command":1,"data":"sideways","serial":1}"#, .invalidPayload),
        (#"{"command":1,"data":"left"}"#, .invalidPayload),
        (#"{"command":3,"data":"9","serial":1}"#, .invalidPayload),
        (#"{"command":4,"data":"true"}"#, .unknownCommand),
        (#"{"command":77}"#, .unknownCommand),
    ])
    func badPayloadsAreRefusedWithTheirSerial(json: String, code: ErrorCode) async throws {
        let game = try await GameHarness.online()
        #expect(await game.send("alice", json).rejectedCode == code)
        #expect(game.lastError(of: "alice") == code.rawValue)
        #expect(game.events(.dropped).last?.reason == code.rawValue)
        await game.stop()
    }

    @Test func theErrorReplyCarriesTheSerialWhenThereIsOne() async throws {
        let game = try await GameHarness.online()
        await game.send("alice", #"{"command":1,"data":"sideways","serial":12}"#)
        let reply = try #require(game.players.to("alice").last)
        #expect(reply.code == .error)
        #expect(reply.serial == 12)
        #expect(reply.message?.isEmpty == false)
        await game.stop()
    }

    @Test func anUnknownMachineIsRefusedWithoutAReply() async throws {
        let game = try await GameHarness.online()
        #expect(await game.send("alice", #"{"command":6}"#, to: "m9").rejectedCode == .unknownMachine)
        #expect(await game.send("alice", "garbage", to: "m9").rejectedCode == .invalidPayload, "a bad payload comes first")
        #expect(game.players.replies.items.isEmpty)
        await game.stop()
    }

    @Test func machinesAreFoundByIdOrIMAccount() async throws {
        let game = try await GameHarness.online()
        #expect(await game.send("alice", #"{"command":6}"#, to: "claw_m1") == .offered(session: "s-m1-1"))
        #expect(await game.send("bob", #"{"command":6}"#, to: "m1") == .queued(position: 1, length: 1))
        await game.stop()
    }

    @Test(arguments: ["", String(repeating: "x", count: 129), String(repeating: "字", count: 43), "bad\u{7}id", "rtl\u{202E}id", "zw\u{200B}id"])
    func badSenderAccountsAreRefused(account: String) async throws {
        let game = try await GameHarness.online()
        #expect(await game.send(account, #"{"command":6}"#).rejectedCode == .invalidPayload)
        #expect(game.snapshot.player == nil)
        await game.stop()
    }

    @Test func messagesOnMachineTopicsAreRouted() async throws {
        let game = try GameHarness()
        game.arcade.route(MQTTMessage(topic: "claw/m1/state", payload: Array("online\n".utf8), retain: true))
        #expect(game.status == .idle)
        game.arcade.route(MQTTMessage(topic: "claw/m1/state", payload: Array("maybe".utf8), retain: true))
        game.arcade.route(MQTTMessage(topic: "claw/m1/result", payload: Array("{oops".utf8), retain: false))
        game.arcade.route(MQTTMessage(topic: "claw/m1/ack", payload: Array(#"{"command":4}"#.utf8), retain: false))
        game.arcade.route(MQTTMessage(topic: "claw/m7/state", payload: Array("offline".utf8), retain: true))
        await game.settle()
        #expect(game.status == .idle, "bad PC messages are logged and ignored")
        await game.stop()
    }
}
