import Foundation
import Protocol
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// The NetEase path end to end: message copy in over HTTP, commands out over
    /// MQTT to the simulated PCs, replies out through the (fake) server API.
    @Suite(.serialized) struct NetEaseEndToEndTests {
        @Test func aWholeGameFromCallbackToResultReply() async throws {
            try await E2ESite.with { site in
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control", "claw/m1/camera"])

                #expect(try await site.copy(from: "alice", #"{"command":6,"data":"Alice"}"#).status == 200)
                let session = try await site.offeredSession(to: "alice")
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(session)"}"#)
                try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":1001,"#) }
                try await site.copy(from: "alice", #"{"command":1,"data":"left","serial":1}"#)
                try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":1,"data":"left""#) }
                try await site.copy(from: "alice", #"{"command":3,"data":2,"serial":2}"#)
                try await pc.waitFor("claw/m1/camera") { $0.hasPrefix(#"{"command":3,"data":"2""#) }
                try await site.copy(from: "alice", #"{"command":2,"serial":3}"#)
                try await eventually("the result to reach alice through the server API") {
                    site.netease.attachments(to: "alice").contains(#"{"command":4,"data":"true","session":"\#(session)"}"#)
                }
                let replies = site.netease.sent.items.filter { $0.to == "alice" }
                #expect(replies.allSatisfy { $0.headerProblem == nil }, "every call is signed the way NetEase checks")
                #expect(replies.allSatisfy { $0.from == "claw_m1" && $0.fields["save"] == "1" && $0.fields["msgtype"] == "0" })
                #expect(replies.first?.fields["option"] == #"{"route":false,"badge":false}"#)
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games")
                #expect(games.body.contains(#""outcome":"won""#))
                #expect(games.body.contains(#""commands":3"#))
                await pc.stop()
            }
        }

        /// SPEC §13: a move stamped by the IM service longer than
        /// `game.command_max_age` ago is dropped, never played late, and its
        /// player told `gateway_unavailable` with its serial.
        @Test func aMoveStampedLongerAgoThanCommandMaxAgeIsDroppedAndThePlayerTold() async throws {
            try await E2ESite.with(game: "command_max_age: 2s") { site in
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control"])
                try await site.copy(from: "alice", #"{"command":6}"#)
                let session = try await site.offeredSession(to: "alice")
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(session)"}"#)
                try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":1001,"#) }

                let late = try await site.copy(from: "alice", #"{"command":1,"data":"left","serial":1}"#, curTime: Date().addingTimeInterval(-5))
                #expect(late.status == 200, "NetEase is answered: the copy was taken, and dropped")
                func toldTooLate() -> Bool {
                    let told: [WireMessage] = site.netease.attachments(to: "alice").compactMap { try? WireMessage.decode(Array($0.utf8)) }
                    return told.contains { $0.code == .error && $0.data == "gateway_unavailable" && $0.serial == 1 }
                }
                try await eventually("alice to be told her move came too late") { toldTooLate() }
                // A join is no command to the machine: its age does not matter.
                #expect(try await site.copy(from: "bob", #"{"command":6}"#, curTime: Date().addingTimeInterval(-5)).status == 200)
                try await eventually("bob to be queued") { site.netease.attachments(to: "bob").contains { $0.contains(#""command":8"#) } }

                try await site.copy(from: "alice", #"{"command":1,"data":"right","serial":2}"#)
                try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":1,"data":"right""#) }
                #expect(!pc.payloads(on: "claw/m1/control").contains { $0.contains(#""data":"left""#) }, "the late move never reached the PC")
                let metrics = try PrometheusText(try await HTTP.get("\(site.base)/metrics").body)
                #expect(metrics.samples["claw_commands_too_old_total"] == 1)
                #expect((metrics.samples[#"claw_copy_age_seconds_count"#] ?? 0) >= 5, "every copy's age is observed")
                await pc.stop()
            }
        }

        /// SPEC §3: a turn that ends without its player's doing is told to
        /// them, through the same server API as every reply.
        @Test func playersAreToldWhenTheirTurnEndsWithoutThem() async throws {
            try await E2ESite.with(game: "accept_timeout: 1s\nresult_timeout: 1s\noffline_grace: 1s", simulate: false) { site in
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control", "claw/m1/events"])
                try await site.waitReady()
                try pc.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"online""#) }

                // Alice never accepts her offer.
                try await site.copy(from: "alice", #"{"command":6}"#)
                _ = try await site.offeredSession(to: "alice")
                try await eventually("alice to be told her offer expired") { site.notices(to: "alice").contains { $0.data == "offer_expired" } }
                #expect(site.notices(to: "alice").first?.message?.contains("Join again") == true)

                // Bob grabs and the PC never answers.
                try await site.copy(from: "bob", #"{"command":6}"#)
                let bob = try await site.offeredSession(to: "bob")
                try await site.copy(from: "bob", #"{"command":12,"data":"\#(bob)"}"#)
                try await pc.ackCoin(session: bob)
                try await site.copy(from: "bob", #"{"command":2,"serial":1}"#)
                try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":2,"#) }
                try await eventually("bob to be told no result came") { site.notices(to: "bob").contains { $0.data == "no_result" } }

                // Carol's PC drops mid-game and stays away: told once it is kept, once it has ended.
                try await site.copy(from: "carol", #"{"command":6}"#)
                let carol = try await site.offeredSession(to: "carol")
                try await site.copy(from: "carol", #"{"command":12,"data":"\#(carol)"}"#)
                try await pc.ackCoin(session: carol)
                try pc.client.publish("claw/m1/state", payload: Array("offline".utf8), qos: .atLeastOnce, retain: true)
                try await eventually("carol to be told the game ended") { site.notices(to: "carol").count == 2 }
                let told = site.notices(to: "carol")
                #expect(told.map(\.data) == ["machine_offline", "machine_offline"])
                #expect(told.first?.message?.contains("kept for 1 s") == true)
                #expect(told.last?.message?.contains("ended") == true)
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games").json["games"] as? [[String: Any]] ?? []
                #expect(games.first { $0["player"] as? String == "carol" }?["outcome"] as? String == "machine_offline")
                await pc.stop()
            }
        }

        @Test func refusedAndIgnoredCopies() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let join = #"{"command":6}"#

                let badChecksum = try await site.copy(from: "a", join) { headers, _ in
                    headers = headers.map { $0.0 == "CheckSum" ? ($0.0, String(repeating: "0", count: 40)) : $0 }
                }
                #expect(badChecksum.status == 401)
                #expect(badChecksum.json["code"] as? String == "unauthorized")

                let badMD5 = try await site.copy(from: "a", join) { _, body in body.append(UInt8(ascii: " ")) }
                #expect(badMD5.status == 401)
                #expect((badMD5.json["message"] as? String)?.contains("MD5") == true)

                let stale = try await site.copy(from: "a", join, curTime: Date().addingTimeInterval(-3600))
                #expect(stale.status == 401)
                let inSeconds = try await site.copy(from: "a", join) { headers, body in
                    let seconds = String(Int64(Date().timeIntervalSince1970))
                    let md5 = Signatures.md5Hex(body)
                    headers = headers.filter { $0.0 != "CurTime" && $0.0 != "CheckSum" } + [
                        ("CurTime", seconds),
                        ("CheckSum", Signatures.netEaseCopyChecksum(secret: FakeNetEaseAPI.appSecret, md5: md5, curTime: seconds)),
                    ]
                }
                #expect(inSeconds.status == 200, "CurTime in seconds is accepted too")

                let missing = try await site.postCopy(body: Array("{}".utf8), headers: [])
                #expect(missing.status == 401)

                let huge = [UInt8](repeating: UInt8(ascii: "x"), count: 70 * 1024)
                let oversized = try await site.postCopy(body: huge, headers: E2ESite.signedCopyHeaders(huge))
                #expect(oversized.status == 413)
                #expect(oversized.json["code"] as? String == "payload_too_large")

                let notJSON = Array("this is not json".utf8)
                let malformed = try await site.postCopy(body: notJSON, headers: E2ESite.signedCopyHeaders(notJSON))
                #expect(malformed.status == 400)
                #expect(malformed.json["code"] as? String == "bad_request")

                let empty = Array("{}".utf8)
                #expect(try await site.postCopy(body: empty, headers: E2ESite.signedCopyHeaders(empty)).status == 200, "the address check")

                let chat = Array(#"{"eventType":"1","convType":"PERSON","msgType":"TEXT","fromAccount":"a","to":"claw_m1","body":"hi"}"#.utf8)
                #expect(try await site.postCopy(body: chat, headers: E2ESite.signedCopyHeaders(chat)).status == 200)
                let login = Array(#"{"eventType":2,"accid":"a"}"#.utf8)
                #expect(try await site.postCopy(body: login, headers: E2ESite.signedCopyHeaders(login)).status == 200)

                #expect(try await site.copy(from: "a", to: "someone_else", join).status == 200, "not a machine: ignored")

                #expect(try await site.copy(from: "a", "not json at all").status == 200, "a bad attach is the player's error")
                let machine = try await HTTP.get("\(site.base)/v1/machines/m1")
                #expect(machine.json["queue_length"] as? Int == 1, "only the accepted join counted")
                try await eventually("the invalid_payload reply") {
                    site.netease.attachments(to: "a").contains { $0.contains("invalid_payload") }
                }

                // The same copy delivered twice is handled once.
                try await site.copy(from: "b", join, messageID: "dup-1")
                try await site.copy(from: "b", #"{"command":7}"#, messageID: "dup-1")
                let after = try await HTTP.get("\(site.base)/v1/machines/m1")
                #expect((after.json["waiting"] as? [[String: Any]])?.map { $0["accid"] as? String } == ["a", "b"])
            }
        }

        @Test func aFailingOrHangingServerAPIDoesNotStallTheGame() async throws {
            try await E2ESite.with { site in
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control"])
                site.netease.set(.hanging)
                // Carol is a NetEase player: her replies go through the hanging API.
                try await site.copy(from: "carol", #"{"command":6}"#)
                let join = try await site.copy(from: "alice", #"{"command":6}"#)
                #expect(join.status == 200)
                let session = try #require(try await HTTP.get("\(site.base)/v1/machines/m1").json["player"] as? [String: Any])["session"] as? String
                let clock = ContinuousClock()
                let started = clock.now
                try await site.copy(from: "carol", #"{"command":12,"data":"\#(session ?? "")"}"#)
                for serial in 1...5 {
                    #expect(try await site.copy(from: "carol", #"{"command":1,"data":"up","serial":\#(serial)}"#).status == 200)
                }
                try await pc.waitFor("claw/m1/control") { $0.contains(#""serial":"#) && $0.contains(#""data":"up""#) }
                #expect(clock.now - started < .seconds(5), "answers do not wait for the hanging API (reply_timeout is 1s)")
                site.netease.set(.failing)
                try await site.copy(from: "carol", #"{"command":2,"serial":9}"#)
                try await eventually("the next turn to be offered after the result") {
                    (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["player"].flatMap { ($0 as? [String: Any])?["accid"] as? String } == "alice"
                }
                try await eventually("failed replies to be counted") {
                    (try? await HTTP.get("\(site.base)/metrics"))?.body.contains(#"claw_im_replies_total{provider="netease",result="failed"}"#) == true
                }
                await pc.stop()
            }
        }

        /// SPEC §13: `kill -9` mid-game; the PC reports the result while the
        /// gateway is down (QoS 1, kept by the broker for the gateway's
        /// session). Back, the gateway records the game won, tells the
        /// player, and offers the next turn.
        @Test func aResultPublishedWhileTheGatewayWasKilledEndsTheGameWon() async throws {
            try await E2ESite.with(simulate: false) { site in
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control"])
                try await site.waitReady()
                try pc.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await eventually("m1 online") { (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["online"] as? Bool == true }
                try await site.copy(from: "alice", #"{"command":6}"#)
                let session = try await site.offeredSession(to: "alice")
                try await site.copy(from: "bob", #"{"command":6}"#)
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(session)"}"#)
                try await pc.ackCoin(session: session)
                try await site.copy(from: "alice", #"{"command":2,"serial":1}"#)
                try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":2,"#) }

                site.killGateway()
                try pc.client.publish(
                    "claw/m1/result", payload: WireMessage(.result, data: "true", session: session).encoded(), qos: .atLeastOnce)
                try site.startGateway()
                func outcome() async -> String? {
                    let games = try? await HTTP.get("\(site.base)/v1/machines/m1/games")
                    let rows = games?.json["games"] as? [[String: Any]] ?? []
                    let game = rows.first { $0["id"] as? String == session }
                    return game?["outcome"] as? String
                }
                try await eventually("alice's game to be recorded won") { await outcome() == "won" }
                try await eventually("alice to be told she won") {
                    site.netease.attachments(to: "alice").contains(#"{"command":4,"data":"true","session":"\#(session)"}"#)
                }
                _ = try await site.offeredSession(to: "bob")
                #expect(!site.netease.attachments(to: "alice").contains { $0.contains("no_result") })
                await pc.stop()
            }
        }

        /// SPEC §13: SIGTERM mid-game (a package upgrade); started again, the
        /// game goes on with the same session and the player's moves reach the PC.
        @Test func aGameGoesOnWithTheSameSessionAcrossAStopAndStart() async throws {
            try await E2ESite.with(simulate: false) { site in
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control", "claw/m1/events"])
                try await site.waitReady()
                try pc.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await eventually("m1 online") { (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["online"] as? Bool == true }
                try await site.copy(from: "alice", #"{"command":6}"#)
                let session = try await site.offeredSession(to: "alice")
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(session)"}"#)
                try await pc.ackCoin(session: session)
                try await site.copy(from: "alice", #"{"command":1,"data":"left","serial":1}"#)
                try await pc.waitFor("claw/m1/control") { $0.contains(#""data":"left""#) }

                await site.stopGateway()
                try site.startGateway()
                try await site.waitReady()
                try await pc.waitFor("claw/m1/events") { $0.contains(#""type":"restored""#) && $0.contains(session) }  // on its first connection
                let machine = try await HTTP.get("\(site.base)/v1/machines/m1")
                #expect((machine.json["player"] as? [String: Any])?["session"] as? String == session)
                try await eventually("the game to go on once the PC's online came back") {
                    (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["state"] as? String == "playing"
                }
                try await site.copy(from: "alice", #"{"command":1,"data":"right","serial":2}"#)
                try await pc.waitFor("claw/m1/control") { $0.contains(#""data":"right""#) && $0.contains(session) }
                try await site.copy(from: "alice", #"{"command":2,"serial":3}"#)
                try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":2,"#) && $0.contains(session) }
                try pc.client.publish(
                    "claw/m1/result", payload: WireMessage(.result, data: "false", session: session).encoded(), qos: .atLeastOnce)
                func outcome() async -> String? {
                    let games = try? await HTTP.get("\(site.base)/v1/machines/m1/games")
                    let rows = games?.json["games"] as? [[String: Any]] ?? []
                    let game = rows.first { $0["player"] as? String == "alice" }
                    return game?["outcome"] as? String
                }
                try await eventually("the game to be recorded lost") { await outcome() == "lost" }
                await pc.stop()
            }
        }

        @Test func aKilledGatewayRestoresQueuesAndFinishedGames() async throws {
            try await E2ESite.with { site in
                try await site.copy(from: "alice", #"{"command":6}"#)
                let session = try await site.offeredSession(to: "alice")
                for player in ["bob", "carol", "dave"] { try await site.copy(from: player, #"{"command":6}"#) }
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(session)"}"#)
                try await site.copy(from: "alice", #"{"command":2,"serial":1}"#)
                try await eventually("alice's game to be recorded") {
                    (try? await HTTP.get("\(site.base)/v1/machines/m1/games"))?.body.contains(#""outcome":"won""#) == true
                }
                try await site.copy(from: "dave", #"{"command":7}"#)
                try await eventually("dave's leave to show") {
                    (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["queue_length"] as? Int == 1
                }
                site.killGateway()
                try site.startGateway()
                try await site.waitReady()
                let machine = try await HTTP.get("\(site.base)/v1/machines/m1")
                let holder = machine.json["player"] as? [String: Any]
                let waiting = (machine.json["waiting"] as? [[String: Any]])?.compactMap { $0["accid"] as? String } ?? []
                #expect(holder?["accid"] as? String == "bob" && waiting == ["carol"], "bob's offer, open when killed, is taken up (SPEC §13)")
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games")
                #expect(games.body.contains(#""player":"alice""#) && games.body.contains(#""outcome":"won""#))
                let bobs = (games.json["games"] as? [[String: Any]])?.first { $0["player"] as? String == "bob" }
                #expect(bobs?["outcome"] == nil || bobs?["outcome"] is NSNull, "the offer is still open")
                try await eventually("bob to be offered his turn again, same session") {
                    site.netease.attachments(to: "bob").filter { $0.contains(#""command":11"#) }.count == 2
                }
                let session2 = try #require(holder?["session"] as? String)
                #expect(site.netease.attachments(to: "bob").filter { $0.contains(#""command":11"#) }.allSatisfy { $0.contains(session2) })
                #expect(!site.netease.attachments(to: "bob").contains { $0.contains(#""data":"offer_expired""#) })
            }
        }
    }
}

extension HeavySuites {
    /// One player's flood against everyone else's turn (SPEC §2), through a
    /// slow IM API: the flood is held to its budget at the ingress, its
    /// refusals to one a second, and turn offers go ahead of refusals.
    @Suite(.serialized) struct FloodTests {
        @Test func aFloodDoesNotDelayTheNextPlayersTurn() async throws {
            try await E2ESite.with { site in
                site.netease.set(.slow(.milliseconds(20)))
                try await site.copy(from: "alice", #"{"command":6}"#)
                let session = try await site.offeredSession(to: "alice")
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(session)"}"#)
                try await site.copy(from: "bob", #"{"command":6}"#)
                // Mallory, not even queued, floods moves over 16 connections for
                // as long as it takes: through alice's grab, her result and bob's offer.
                let base = site.base
                let answered = Recorder<ContinuousClock.Instant>()
                let stop = Recorder<Bool>()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for worker in 0..<16 {
                        group.addTask {
                            var index = worker
                            while stop.items.isEmpty, index < 200_000 {
                                let body = NetEaseCopyBody.encode(
                                    from: "mallory", to: "claw_m1", attach: #"{"command":1,"data":"left","serial":\#(index + 1)}"#)
                                _ = try await HTTP.request(
                                    .POST, "\(base)/im/netease", headers: E2ESite.signedCopyHeaders(body), body: body)
                                answered.append(ContinuousClock.now)
                                index += 16
                            }
                        }
                    }
                    try await eventually("the flood to be under way") { answered.items.count >= 500 }
                    // Alice grabs; the simulated PC answers 100 ms later; the turn passes to bob.
                    try await site.copy(from: "alice", #"{"command":2,"serial":1}"#)
                    // Both go out at once (reply_concurrency 2): wait for each of them.
                    try await eventually("alice's result and bob's turn offer at the IM API", timeout: .seconds(20)) {
                        let calls = site.netease.sent.items
                        return calls.contains { $0.to == "bob" && $0.attach.contains(#""command":11"#) }
                            && calls.contains { $0.to == "alice" && $0.attach.contains(#""command":4"#) }
                    }
                    let offered = try #require(site.netease.sent.items.first { $0.to == "bob" && $0.attach.contains(#""command":11"#) }).at
                    try await eventually("the flood to go on past the offer") { answered.items.filter { $0 > offered }.count >= 50 }
                    stop.append(true)
                    try await group.waitForAll()
                }
                let calls = site.netease.sent.items
                let result = try #require(calls.first { $0.to == "alice" && $0.attach.contains(#""command":4"#) })
                let offer = try #require(calls.first { $0.to == "bob" && $0.attach.contains(#""command":11"#) })
                #expect(offer.at - result.at < .seconds(1), "bob's offer followed alice's result within a second")
                // Two codes (not_your_turn, rate_limited), each at most once a second.
                let times = answered.items
                let seconds = try #require(times.max()) - #require(times.min())
                let refusals = calls.filter { $0.to == "mallory" }
                #expect(
                    Double(refusals.count) <= 2 * (seconds / .seconds(1)).rounded(.up) + 2,
                    "the flood's refusals are held to one of each code a second: \(refusals.count) in \(seconds)")
            }
        }
    }
}
