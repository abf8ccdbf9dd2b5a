import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// The demo's app server as its clients call it, against a running
    /// gateway and the fake NetEase API (SPEC §8).
    @Suite(.serialized) struct AppServerEndToEndTests {
        @Test func touristAndRoomListAsTheDemoClientsReadThem() async throws {
            try await AppServerSite.with(onlineCounts: [3001: 12, 3002: 3]) { site in
                let metrics = try await HTTP.get("\(site.base)/metrics").body
                for series in [
                    #"claw_app_server_tourists_total{result="created"} 0"#, #"claw_app_server_tourists_total{result="rate_limited"} 0"#,
                    #"claw_chatroom_mirror_calls_total{call="queueOffer",result="failed"} 0"#,
                    #"claw_app_server_online_counts_total{result="failed"} 0"#,
                ] {
                    #expect(metrics.contains(series), "\(series) from the first scrape")
                }
                // The machines' first snapshots may already have been coalesced: the family is there.
                #expect(metrics.contains("# HELP claw_chatroom_mirror_coalesced_total"))

                // A new tourist: one user/create, signed, and the demo's shape.
                let first = try await site.post("tourist", "")
                #expect(first.status == 200)
                let data = try #require(first.json["data"] as? [String: Any])
                let accid = try #require(data["accid"] as? String)
                let token = try #require(data["imToken"] as? String)
                let sid = try #require(data["sid"] as? String, "a secret to come back with (sessions: secret)")
                let nickname = data["nickname"] as? String ?? ""
                #expect(
                    first.body == #"{"code":200,"data":{"accid":"\#(accid)","imToken":"\#(token)","nickname":"\#(nickname)","sid":"\#(sid)"}}"#)
                let creates = site.netease.calls("user/create.action")
                #expect(creates.count == 1 && creates[0].headerProblem == nil && creates[0].fields["accid"] == accid)
                #expect(site.netease.chatrooms.users.withLock { $0[accid]?.token } == token)

                // Returning with its sid: the same account, no new one, and the secret is not given again.
                let again = try await site.post("tourist", "sid=\(sid)")
                #expect(again.body == #"{"code":200,"data":{"accid":"\#(accid)","imToken":"\#(token)","nickname":"\#(nickname)"}}"#)
                #expect(site.netease.calls("user/create.action").count == 1)

                // The room list, field by field, once the background count came.
                var list: HTTP.Answer?
                try await eventually("the online counts in the room list") {
                    list = try await site.post("room/list", "sid=\(sid)")
                    // Each room's count comes with its own call: wait for both.
                    return list?.body.contains(#""onlineUserCount":12"#) == true && list?.body.contains(#""onlineUserCount":3"#) == true
                }
                let body = try #require(list?.body)
                #expect(body.hasPrefix(#"{"code":200,"data":{"list":["#))
                #expect(body.hasSuffix(#"],"total":2}}"#))
                #expect(body.contains(
                    #"{"creator":"claw_m1","hlsPullUrl1":"http://live.example/m1-front.m3u8","httpPullUrl1":"http://live.example/m1-front.flv","liveStatus":1,"name":"Pikachu","onlineUserCount":12,"queueCount":0,"roomId":3001,"roomStatus":true,"rtmpPullUrl1":"rtmp://live.example/m1-front","rtmpPullUrl2":"rtmp://live.example/m1-side"}"#
                ), "numbers as numbers, booleans as booleans, no httpPullUrl2 or hlsPullUrl2")
                #expect(body.contains(
                    #"{"creator":"claw_m2","liveStatus":1,"name":"Eevee","onlineUserCount":3,"queueCount":0,"roomId":3002,"roomStatus":true,"rtmpPullUrl1":"rtmp://live.example/m2-front"}"#
                ), "a machine with one camera has no rtmpPullUrl2")
                #expect(!body.contains("claw_m3"), "a machine without a chatroom is no room")
                #expect(!body.contains("null"))

                // Paging.
                let second = try await site.post("room/list", "sid=\(sid)&limit=1&offset=1")
                let page = try #require(second.json["data"] as? [String: Any])
                #expect(page["total"] as? Int == 2)
                #expect((page["list"] as? [[String: Any]])?.map { $0["roomId"] as? Int } == [3002])
                let beyond = try await site.post("room/list", "sid=\(sid)&offset=5")
                #expect(beyond.body == #"{"code":200,"data":{"list":[],"total":2}}"#)

                // The queue count leaves out the player offered the turn; paused is 2, offline 0.
                for player in ["p1", "p2", "p3"] { try await site.copy(from: player, #"{"command":6}"#) }
                try await eventually("two waiting") {
                    try await site.post("room/list", "sid=\(sid)&limit=1").body.contains(#""queueCount":2"#)
                }
                let admin = [("Authorization", "Bearer \(AppServerSite.adminToken)")]
                #expect(try await HTTP.request(.POST, "\(site.base)/v1/machines/m1/pause", headers: admin).status == 200)
                let paused = try await site.post("room/list", "sid=\(sid)&limit=1").body
                #expect(paused.contains(#""liveStatus":2"#) && paused.contains(#""roomStatus":false"#))
                await site.stopSimulator()
                try await eventually("m2 offline in the room list") {
                    let body = try await site.post("room/list", "sid=\(sid)&offset=1").body
                    return body.contains(#""liveStatus":0"#) && body.contains(#""roomStatus":false"#)
                }
                #expect(!site.logText.contains(token), "the token is never logged")
            }
        }

        @Test func badInputsAreAnsweredLikeTheDemoServer() async throws {
            try await AppServerSite.with { site in
                let tourist = try await site.newTourist()
                // Bytes that do not decode are no sid at all.
                for form in ["", "sid=", "sid=%20%20", "limit=3", "sid=%FF%FE"] {
                    let blank = try await site.post("room/list", form)
                    #expect(blank.status == 200)
                    #expect(blank.json["code"] as? Int == 400, "\(form)")
                    #expect(blank.json["msg"] is String)
                    #expect(blank.json["data"] == nil)
                }
                for sid in ["nobody", String(repeating: "x", count: 300), tourist.sid + "x", tourist.accid] {
                    let unknown = try await site.post("room/list", "sid=\(sid)")
                    #expect(unknown.status == 200 && unknown.json["code"] as? Int == 401)
                }
                for paging in ["limit=abc", "limit=-1", "offset=-3", "limit=99999999999999999999", "offset=1e3"] {
                    let bad = try await site.post("room/list", "sid=\(tourist.sid)&\(paging)")
                    #expect(bad.json["code"] as? Int == 400, "\(paging)")
                }
                // The sid may come in the query, as Spring reads it; the body's wins.
                let query = try await HTTP.request(.POST, "\(site.base)/dollsCatcher/room/list?sid=\(tourist.sid)", body: [])
                #expect(query.json["code"] as? Int == 200)
                let overridden = try await HTTP.request(
                    .POST, "\(site.base)/dollsCatcher/room/list?sid=\(tourist.sid)", body: Array("sid=nobody".utf8))
                #expect(overridden.json["code"] as? Int == 401)

                // Hostile bodies: too large, not UTF-8, junk, many fields, JSON.
                let huge = try await HTTP.request(
                    .POST, "\(site.base)/dollsCatcher/room/list", body: Array(("sid=" + String(repeating: "a", count: 70_000)).utf8))
                #expect(huge.status == 200 && huge.json["code"] as? Int == 413)
                let binary = try await HTTP.request(.POST, "\(site.base)/dollsCatcher/room/list", body: [0x73, 0x69, 0x64, 0x3d, 0xff, 0xfe])
                #expect(binary.status == 200 && binary.json["code"] as? Int == 400)
                for junk in ["&&&==&%%%", "sid", "=\(tourist.sid)", String(repeating: "a=b&", count: 900), #"{"sid":"\#(tourist.sid)"}"#] {
                    let answer = try await site.post("room/list", junk)
                    #expect(answer.status == 200, "\(junk.prefix(20))")
                    #expect([400, 401, 413].contains(answer.json["code"] as? Int ?? 0), "\(junk.prefix(20))")
                }
                // A tourist whose sid is junk just gets an account.
                let junkSid = try await site.post("tourist", "sid=%00%0A\u{202E}")
                #expect(junkSid.json["code"] as? Int == 200)
                #expect(try await HTTP.get("\(site.base)/healthz").status == 200)
            }
        }

        @Test func newAccountsAreLimitedPerAddressAndAFailingAPIKeepsNothing() async throws {
            try await AppServerSite.with { site in
                let first = try await site.newTourist()
                for _ in 1..<10 { _ = try await site.newTourist() }
                let refused = try await site.post("tourist", "")
                #expect(refused.status == 200 && refused.json["code"] as? Int == 429)
                #expect((refused.json["msg"] as? String)?.contains("try again") == true)
                #expect(site.netease.calls("user/create.action").count == 10)
                // A returning tourist is not a new account: still served.
                #expect(try await site.post("tourist", "sid=\(first.sid)").json["code"] as? Int == 200)
                let metrics = try await HTTP.get("\(site.base)/metrics").body
                #expect(metrics.contains(#"claw_app_server_tourists_total{result="rate_limited"} 1"#))
            }
            try await AppServerSite.with { site in
                site.netease.setChatroom(.failing)
                let failed = try await site.post("tourist", "")
                #expect(failed.status == 200 && failed.json["code"] as? Int == 500)
                #expect(failed.json["data"] == nil)
                site.netease.setChatroom(.ok)
                let created = try await site.newTourist()
                #expect(site.netease.chatrooms.users.withLock { Array($0.keys) } == [created.accid], "nothing kept of the failure")
            }
        }

        /// SPEC §8 "Who may come back as whom": account ids are public (every
        /// chatroom member reads them in the queue); with `sessions: secret`
        /// knowing one gets nobody's token, and guessing sids is cut off.
        @Test func anAccountIDReadInAQueueDoesNotLogInAsThatTourist() async throws {
            try await AppServerSite.with { site in
                let victim = try await site.newTourist()
                #expect(victim.sid != victim.accid)
                try await site.copy(from: victim.accid, #"{"command":6,"data":"Victim"}"#)
                let thief = try await site.post("tourist", "sid=\(victim.accid)")
                let data = try #require(thief.json["data"] as? [String: Any])
                #expect(data["accid"] as? String != victim.accid, "a new account of the thief's own")
                #expect(data["imToken"] as? String != victim.token)
                #expect(try await site.post("room/list", "sid=\(victim.accid)").json["code"] as? Int == 401)
                // Ten wrong sids in a minute: 429 for a minute, the right sid included.
                for guess in 0..<8 { _ = try await site.post("room/list", "sid=guess\(guess)") }
                let blocked = try await site.post("room/list", "sid=\(victim.sid)")
                #expect(blocked.json["code"] as? Int == 429, "\(blocked.body)")
                let metrics = try await HTTP.get("\(site.base)/metrics").body
                #expect(metrics.contains(#"claw_app_server_tourists_total{result="bad_sid"} 10"#))
            }
            // The demo's own behaviour, for its unchanged clients.
            try await AppServerSite.with(sessions: "accid") { site in
                let tourist = try await site.newTourist()
                #expect(tourist.sid == tourist.accid, "no secret in the answer")
                let again = try await site.post("tourist", "sid=\(tourist.accid)")
                #expect((again.json["data"] as? [String: Any])?["imToken"] as? String == tourist.token)
                #expect(try await site.post("room/list", "sid=\(tourist.accid)").json["code"] as? Int == 200)
            }
        }

        /// With credits (SPEC §8, §11): a new tourist starts with the welcome
        /// credits, and reads their wallet with their secret sid, nobody else's.
        @Test func aNewTouristIsWelcomedAndReadsTheirWalletBySecret() async throws {
            try await AppServerSite.with(
                extra: "credits: { price: 2, topup_secret: app-server-topup-secret, welcome: 5 }", http: "read_token: app-server-read-token-0123"
            ) { site in
                let tourist = try await site.newTourist()
                let wallet = try await site.post("wallet", "sid=\(tourist.sid)")
                let data = try #require(wallet.json["data"] as? [String: Any], "\(wallet.body)")
                #expect(data["balance"] as? Int == 5 && data["account"] as? String == tourist.accid)
                let entries = data["entries"] as? [[String: Any]] ?? []
                #expect(entries.count == 1 && entries.first?["kind"] as? String == "adjust" && entries.first?["reason"] as? String == "welcome")
                #expect(try await site.post("wallet", "sid=").json["code"] as? Int == 400)
                #expect(try await site.post("wallet", "sid=\(tourist.accid)").json["code"] as? Int == 401, "the public account id is no sid")
                #expect(try await site.post("wallet", "sid=\(tourist.sid)&limit=0").json["code"] as? Int == 400)
                // The welcome pays for games: the join is taken, the offer carries the price.
                try await site.copy(from: tourist.accid, #"{"command":6}"#)
                try await eventually("the tourist's offer with the price") {
                    site.netease.attachments(to: tourist.accid).contains { $0.contains(#""command":11"#) && $0.contains(#""balance":5,"price":2"#) }
                }
            }
            // Without credits there is no wallet route.
            try await AppServerSite.with { site in
                let tourist = try await site.newTourist()
                #expect(try await HTTP.request(.POST, "\(site.base)/dollsCatcher/wallet", body: Array("sid=\(tourist.sid)".utf8)).status == 404)
            }
        }

        @Test func theChatroomQueueFollowsJoinsLeavesTurnsAndARestart() async throws {
            try await AppServerSite.with { site in
                func inStep() async throws -> Bool {
                    try await site.waiting() == site.netease.queueKeys(3001)
                }
                try await site.copy(from: "alice", #"{"command":6,"data":"Alice"}"#)
                _ = try await site.offeredSession(to: "alice")
                for player in ["bob", "carol"] { try await site.copy(from: player, #"{"command":6,"data":"\#(player)"}"#) }
                try await eventually("bob and carol in the chatroom queue") { site.netease.queueKeys(3001) == ["bob", "carol"] }
                let values = site.netease.chatrooms.queues.withLock { $0[3001]?.map(\.value) }
                #expect(values == [#"{"nick":"bob"}"#, #"{"nick":"carol"}"#])
                try await site.copy(from: "carol", #"{"command":7}"#)
                try await site.copy(from: "dave", #"{"command":6}"#)
                try await eventually("carol gone, dave behind bob") { site.netease.queueKeys(3001) == ["bob", "dave"] }
                // Alice declines: bob is offered the turn and leaves the chatroom queue.
                let session = try await site.offeredSession(to: "alice")
                try await site.copy(from: "alice", #"{"command":13,"data":"\#(session)"}"#)
                let session2 = try await site.offeredSession(to: "bob")
                try await site.copy(from: "erin", #"{"command":6}"#)
                try await eventually("dave and erin") { site.netease.queueKeys(3001) == ["dave", "erin"] }
                #expect(try await inStep())
                #expect(site.netease.chatrooms.calls.items.allSatisfy { $0.call.headerProblem == nil })

                // A crash, and someone writes into the chatroom queue while the gateway is away.
                site.killGateway()
                site.netease.chatrooms.queues.withLock { $0[3001, default: []].insert(("ghost", "{}"), at: 0) }
                let lists = site.netease.calls("chatroom/queueList.action").count
                try site.startGateway()
                try await eventually("the restarted gateway's repair") {
                    site.netease.calls("chatroom/queueList.action").count > lists && site.netease.queueKeys(3001) == ["dave", "erin"]
                }
                // Bob's open offer was taken up at the start (SPEC §13): offered again, dave and erin still wait.
                try await eventually("bob offered his turn again") {
                    site.netease.attachments(to: "bob").filter { $0.contains(#""command":11"#) }.count == 2
                }
                let bob = try await site.offeredSession(to: "bob")
                #expect(bob == session2, "the same session")
                #expect(try await site.waiting() == ["dave", "erin"])
            }
        }

        @Test func aFailingChatroomAPIIsCountedRepairedAndLeavesGamesAlone() async throws {
            try await AppServerSite.with { site in
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control"])
                try await eventually("the start's repair") { !site.netease.calls("chatroom/queueList.action").isEmpty }
                site.netease.setChatroom(.failing)
                try await site.copy(from: "alice", #"{"command":6}"#)
                for player in ["bob", "carol"] { try await site.copy(from: player, #"{"command":6}"#) }

                // The game goes on: offer, accept, coin, grab, result.
                let session = try await site.offeredSession(to: "alice")
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(session)"}"#)
                try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":1001,"#) }
                try await site.copy(from: "alice", #"{"command":2,"serial":1}"#)
                try await eventually("alice's result") {
                    site.netease.attachments(to: "alice").contains { $0.hasPrefix(#"{"command":4,"#) }
                }
                try await eventually("the failures counted") {
                    let metrics = try await HTTP.get("\(site.base)/metrics").body
                    return metrics.split(separator: "\n").contains {
                        $0.hasPrefix(#"claw_chatroom_mirror_calls_total{call="queueOffer",result="failed"} "#) && !$0.hasSuffix(" 0")
                    }
                }
                #expect(site.netease.queueKeys(3001).isEmpty)

                site.netease.setChatroom(.ok)
                try await eventually("the chatroom queue repaired", timeout: .seconds(40)) {
                    let waiting = try await site.waiting()
                    return !waiting.isEmpty && waiting == site.netease.queueKeys(3001)
                }
                let metrics = try await HTTP.get("\(site.base)/metrics").body
                let repairs = metrics.split(separator: "\n").first { $0.hasPrefix("claw_chatroom_mirror_repairs_total ") }
                #expect((repairs?.split(separator: " ").last).flatMap { Int($0) } ?? 0 >= 2, "read back at start and again after the failures")
                await pc.stop()
            }
        }
    }
}
