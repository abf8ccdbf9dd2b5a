import Foundation
import Protocol
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// The generic webhook, good and bad, and the read API's errors, over real HTTP.
    @Suite(.serialized) struct GenericWebhookTests {
        @Test func goodAndBadNotifications() async throws {
            try await E2ESite.with { site in
                let joined = try await site.generic(from: "zoe", #"{"command":6,"data":"Zoë"}"#)
                #expect(joined.status == 200)
                #expect(joined.json["result"] as? String == "offered")
                let queued = try await site.generic(from: "yan", #"{"command":6}"#)
                #expect(queued.json["result"] as? String == "queued")
                #expect(queued.json["position"] as? Int == 1)

                let object = try await site.generic(
                    body: Array(#"{"from":"zoe","to":"claw_m1","attach":{"command":1,"data":"left","serial":1}}"#.utf8))
                #expect(object.json["result"] as? String == "rejected", "attach may be an object; zoe has not accepted yet")
                #expect(object.json["code"] as? String == "not_your_turn")

                let session = try #require(try await HTTP.get("\(site.base)/v1/machines/m1").json["player"] as? [String: Any])["session"] as? String
                let accepted = try await site.generic(from: "zoe", #"{"command":12,"data":"\#(session ?? "")"}"#)
                #expect(accepted.json["result"] as? String == "accepted")
                let moved = try await site.generic(from: "zoe", #"{"command":1,"data":"left","serial":1}"#)
                #expect(moved.json["result"] as? String == "forwarded")
                #expect(moved.json["serial"] as? Int64 != nil)

                let invalid = try await site.generic(from: "zoe", #"{"command":1,"data":"sideways","serial":2}"#)
                #expect(invalid.status == 422)
                #expect(invalid.json["code"] as? String == "invalid_payload")
                let unknownCommand = try await site.generic(from: "zoe", #"{"command":1001}"#)
                #expect(unknownCommand.status == 422)
                #expect(unknownCommand.json["code"] as? String == "unknown_command")
                let unknownMachine = try await site.generic(from: "zoe", to: "m404", #"{"command":6}"#)
                #expect(unknownMachine.status == 404)
                #expect(unknownMachine.json["code"] as? String == "unknown_machine")

                let body = GenericEnvelope.encode(from: "zoe", to: "m1", attach: #"{"command":7}"#)
                let wrongSecret = try await site.generic(body: body, secret: "not-the-secret")
                #expect(wrongSecret.status == 401)
                #expect(wrongSecret.json["code"] as? String == "unauthorized")
                let stale = try await site.generic(body: body, timestamp: String(Int64(Date().timeIntervalSince1970) - 3600))
                #expect(stale.status == 401)
                let unsigned = try await site.generic(body: body, headers: [("Content-Type", "application/json")])
                #expect(unsigned.status == 401)
                let notAnEnvelope = try await site.generic(body: Array(#"{"player":"zoe"}"#.utf8))
                #expect(notAnEnvelope.status == 400)
                #expect(notAnEnvelope.json["message"] as? String != nil)
                let huge = [UInt8](repeating: UInt8(ascii: " "), count: 65 * 1024)
                let tooLarge = try await site.generic(body: huge)
                #expect(tooLarge.status == 413)
                #expect(tooLarge.json["code"] as? String == "payload_too_large")

                let machine = try await HTTP.get("\(site.base)/v1/machines/m1")
                #expect(machine.json["state"] as? String == "playing", "no bad request changed the game")
            }
        }

        @Test func capturedNotificationsAndRepliesCannotBePlayedBack() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                // A join, then the very same signed bytes again.
                let body = GenericEnvelope.encode(from: "zoe", to: "m1", attach: #"{"command":6}"#)
                let timestamp = String(Int64(Date().timeIntervalSince1970))
                #expect(try await site.generic(body: body, timestamp: timestamp).json["result"] as? String == "queued")
                let leave = GenericEnvelope.encode(from: "zoe", to: "m1", attach: #"{"command":7}"#)
                #expect(try await site.generic(body: leave, timestamp: timestamp).json["result"] as? String == "left")
                let replayed = try await site.generic(body: leave, timestamp: timestamp)
                #expect(replayed.status == 409)
                #expect(replayed.json["code"] as? String == "replayed")
                let rejoin = try await site.generic(body: body, timestamp: timestamp)
                #expect(rejoin.status == 409, "a captured join cannot re-queue her")
                #expect(try await HTTP.get("\(site.base)/v1/machines/m1").json["queue_length"] as? Int == 0)
                // The same notification with a new timestamp is a new notification.
                let later = String((Int64(timestamp) ?? 0) + 1)
                #expect(try await site.generic(body: body, timestamp: later).json["result"] as? String == "queued")

                // A reply the gateway signed (to a player) posted back as a notification.
                let reply = GenericEnvelope.encode(from: "claw_m1", to: "m1", attach: #"{"command":7}"#)
                let replyTimestamp = String(Int64(Date().timeIntervalSince1970))
                let reflected = try await site.generic(
                    body: reply,
                    headers: [
                        ("Content-Type", "application/json"), (GenericEnvelope.timestampHeader, replyTimestamp),
                        (
                            GenericEnvelope.signatureHeader,
                            Signatures.genericReplySignature(secret: E2ESite.webhookSecret, timestamp: replyTimestamp, body: reply)
                        ),
                    ])
                #expect(reflected.status == 401)
            }
        }

        /// The budget is 10 answered notifications a second per sender, on
        /// the gateway's wall clock: a box too loaded to send eleven within a
        /// second gets its budget back before the join, so the flood is sent
        /// again, by another sender, until one is refused.
        @Test func oneSendersFloodIsRefusedWith429() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                var refused: (join: [UInt8], timestamp: String)?
                var sender = "mallory"
                for attempt in 1...5 where refused == nil {
                    sender = attempt == 1 ? "mallory" : "mallory\(attempt)"
                    var statuses: [Int] = []
                    for serial in 1...15 {
                        statuses.append(
                            try await site.generic(from: sender, #"{"command":1,"data":"up","serial":\#(serial)}"#).status)
                    }
                    #expect(statuses.allSatisfy { $0 == 200 || $0 == 429 }, "\(statuses)")
                    if attempt == 1 { #expect(statuses.prefix(10).allSatisfy { $0 == 200 }, "machine_offline, answered") }
                    let join = GenericEnvelope.encode(from: sender, to: "m1", attach: #"{"command":6}"#)
                    let timestamp = String(Int64(Date().timeIntervalSince1970))
                    let limited = try await site.generic(body: join, timestamp: timestamp)
                    if limited.status == 429 {
                        #expect(limited.json["code"] as? String == "rate_limited")
                        refused = (join, timestamp)
                    } else {
                        // Taken: the budget came back before it.
                        #expect(limited.json["result"] as? String == "queued", "\(limited.status) \(limited.body)")
                    }
                }
                let (join, timestamp) = try #require(refused, "no flood of fifteen was refused in five tries")
                #expect(try await site.generic(from: "zoe", #"{"command":6}"#).status == 200, "others are not held back")
                // A refused notification was not accepted: the same signed bytes may come
                // again (429 while over budget, taken once the budget is back), and only
                // once taken are they a replay.
                try await eventually("\(sender)'s budget to come back and the same bytes to be taken") {
                    let again = try await site.generic(body: join, timestamp: timestamp)
                    #expect(again.status == 429 || again.status == 200, "refused bytes are no replay: \(again.status)")
                    return again.json["result"] as? String == "queued"
                }
                #expect(try await site.generic(body: join, timestamp: timestamp).status == 409)
            }
        }

        @Test func readAPIErrorsAreJSON() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let unknown = try await HTTP.get("\(site.base)/v1/machines/nope")
                #expect(unknown.status == 404)
                #expect(unknown.json["code"] as? String == "unknown_machine")
                let badLimit = try await HTTP.get("\(site.base)/v1/machines/m1/games?limit=abc")
                #expect(badLimit.status == 400)
                #expect(badLimit.json["code"] as? String == "bad_request")
                let noRoute = try await HTTP.get("\(site.base)/v2/whatever")
                #expect(noRoute.status == 404)
                #expect(noRoute.json["message"] as? String != nil)
                let list = try await HTTP.get("\(site.base)/v1/machines")
                let machines = try #require(list.json["machines"] as? [[String: Any]])
                #expect(machines.map { $0["id"] as? String } == ["m1", "m2"])
                #expect(machines.first?["state"] as? String == "offline", "no PC has said online")
                #expect((machines.first?["cameras"] as? [[String: Any]])?.count == 2)
            }
        }
    }
}
