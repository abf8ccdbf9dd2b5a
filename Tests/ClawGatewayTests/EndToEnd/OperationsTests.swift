import Foundation
import Protocol
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// What operators use: admin actions, readiness, metrics, a clean stop.
    @Suite(.serialized) struct OperationsTests {
        static let token = "op-secret-token-16"

        @Test func adminActionsNeedTheTokenAndShowEverywhere() async throws {
            try await E2ESite.with(adminToken: Self.token) { site in
                let watcher = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/queue", "claw/m1/events"])
                let admin = [("Authorization", "Bearer \(Self.token)")]
                let pause = "\(site.base)/v1/machines/m1/pause"

                #expect(try await HTTP.request(.POST, pause).status == 401)
                let wrong = try await HTTP.request(.POST, pause, headers: [("Authorization", "Bearer nope")])
                #expect(wrong.status == 401)
                #expect(wrong.json["code"] as? String == "unauthorized")
                #expect(try await HTTP.request(.POST, "\(site.base)/v1/machines/m9/pause", headers: admin).status == 404)

                let paused = try await HTTP.request(.POST, pause, headers: admin)
                #expect(paused.status == 200)
                #expect(paused.json["changed"] as? Bool == true)
                try await watcher.waitFor("claw/m1/queue") { $0.contains(#""paused":true"#) }
                try await watcher.waitFor("claw/m1/events") { $0.contains(#""type":"paused""#) }
                #expect(try await site.generic(from: "ann", #"{"command":6}"#).json["result"] as? String == "queued", "no offer while paused")
                try await site.generic(from: "ben", #"{"command":6}"#)

                #expect(try await HTTP.request(.POST, "\(site.base)/v1/machines/m1/resume", headers: admin).status == 200)
                try await watcher.waitFor("claw/m1/events") { $0.contains(#""type":"offered""#) && $0.contains("ann") }
                let skipped = try await HTTP.request(.POST, "\(site.base)/v1/machines/m1/skip", headers: admin)
                #expect(skipped.json["changed"] as? Bool == true)
                try await watcher.waitFor("claw/m1/events") { $0.contains(#""outcome":"skipped""#) }
                try await site.generic(from: "cat", #"{"command":6}"#)
                let removed = try await HTTP.request(.DELETE, "\(site.base)/v1/machines/m1/queue/cat", headers: admin)
                #expect(removed.status == 200)
                try await watcher.waitFor("claw/m1/events") { $0.contains(#""type":"removed""#) && $0.contains("cat") }
                #expect(try await HTTP.request(.DELETE, "\(site.base)/v1/machines/m1/queue/cat", headers: admin).status == 404)
                // A player is the pair (provider, account): dan waits once for each provider.
                try await site.generic(from: "dan", #"{"command":6}"#)
                try await site.copy(from: "dan", #"{"command":6}"#)
                try await eventually("both dans to wait") {
                    let waiting = (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["waiting"] as? [[String: Any]] ?? []
                    return waiting.filter { $0["accid"] as? String == "dan" }.compactMap { $0["provider"] as? String }.sorted() == ["generic", "netease"]
                }
                let ambiguous = try await HTTP.request(.DELETE, "\(site.base)/v1/machines/m1/queue/dan", headers: admin)
                #expect(ambiguous.status == 409)
                #expect(ambiguous.json["code"] as? String == "ambiguous")
                #expect((ambiguous.json["message"] as? String)?.contains("?provider=") == true)
                #expect(try await HTTP.request(.DELETE, "\(site.base)/v1/machines/m1/queue/dan?provider=other", headers: admin).status == 404)
                #expect(try await HTTP.request(.DELETE, "\(site.base)/v1/machines/m1/queue/dan?provider=generic", headers: admin).status == 200)
                let left = try await HTTP.get("\(site.base)/v1/machines/m1").json["waiting"] as? [[String: Any]] ?? []
                #expect(left.filter { $0["accid"] as? String == "dan" }.compactMap { $0["provider"] as? String } == ["netease"])
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games")
                #expect(games.body.contains(#""outcome":"skipped""#))
                #expect(games.body.contains(#""provider":"generic""#), "a game names its player's provider")
                await watcher.stop()
            }
        }

        @Test func adminRoutesDoNotExistWithoutAToken() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let answer = try await HTTP.request(.POST, "\(site.base)/v1/machines/m1/pause", headers: [("Authorization", "Bearer x")])
                #expect(answer.status == 404)
            }
        }

        @Test func readinessFollowsTheBroker() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                site.broker.kill()
                try await eventually("/readyz to say 503") {
                    (try? await HTTP.get("\(site.base)/readyz"))?.status == 503
                }
                let notReady = try await HTTP.get("\(site.base)/readyz")
                #expect((notReady.json["message"] as? String)?.contains("MQTT") == true)
                #expect(try await HTTP.get("\(site.base)/healthz").status == 200, "alive all the same")
                try site.broker.start()
                try await eventually("/readyz to recover", timeout: .seconds(40)) {
                    (try? await HTTP.get("\(site.base)/readyz"))?.status == 200
                }
            }
        }

        @Test func metricsCoverTheGame() async throws {
            try await E2ESite.with { site in
                try await site.generic(from: "ann", #"{"command":6}"#)
                let session = try await site.currentSession()
                try await site.generic(from: "ann", #"{"command":12,"data":"\#(session)"}"#)
                try await site.generic(from: "ann", #"{"command":1,"data":"up","serial":1}"#)
                try await site.generic(from: "bob", #"{"command":1,"data":"up","serial":1}"#)
                try await site.generic(from: "ann", #"{"command":2,"serial":2}"#)
                try await eventually("the game to be counted won") {
                    (try? await HTTP.get("\(site.base)/metrics"))?.body.contains(#"claw_games_total{machine="m1",outcome="won"} 1"#) == true
                }
                let text = try await HTTP.get("\(site.base)/metrics").body
                for name in [
                    #"claw_notifications_total{provider="generic",result="forwarded"} 2"#, #"claw_commands_forwarded_total{machine="m1"} 2"#,
                    #"claw_commands_dropped_total{machine="m1",reason="not_your_turn"} 1"#, #"claw_ack_latency_seconds_count{machine="m1"} 3"#,
                    #"claw_queue_length{machine="m1"} 0"#, #"claw_machine_online{machine="m2"} 1"#,
                    "claw_mqtt_connected 1", #"claw_http_requests_total{route="/v1/notifications",status="200"}"#,
                ] {
                    #expect(text.contains(name), "\(name) missing from /metrics")
                }
            }
        }

        /// SPEC §5: every family with its HELP, and the counters present at 0
        /// before anything happened, as Prometheus users expect.
        @Test func theFirstScrapeShowsEveryFamilyWithItsHelp() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let text = try await HTTP.get("\(site.base)/metrics").body
                let exposition = try PrometheusText(text)
                #expect(exposition.problems == [], "\(exposition.problems)")
                for family in exposition.types.keys {
                    #expect(exposition.help[family]?.isEmpty == false, "\(family) has no HELP")
                    if exposition.types[family] == "counter" { #expect(family.hasSuffix("_total"), "counter \(family) is not named _total") }
                }
                for machine in ["m1", "m2"] {
                    for series in [
                        #"claw_commands_forwarded_total{machine="\#(machine)"}"#, #"claw_ack_timeouts_total{machine="\#(machine)"}"#,
                        #"claw_commands_dropped_total{machine="\#(machine)",reason="not_your_turn"}"#,
                        #"claw_commands_dropped_total{machine="\#(machine)",reason="rate_limited"}"#,
                        #"claw_games_total{machine="\#(machine)",outcome="won"}"#, #"claw_games_total{machine="\#(machine)",outcome="no_result"}"#,
                        #"claw_ack_latency_seconds_count{machine="\#(machine)"}"#, #"claw_commands_lost_total{machine="\#(machine)"}"#,
                        #"claw_machine_suspect{machine="\#(machine)"}"#, #"claw_machine_online{machine="\#(machine)"}"#,
                    ] {
                        #expect(exposition.samples[series] == 0, "\(series) is not at 0 before anything happened")
                    }
                }
                // Every route, at 0 before its first request (waitReady asked /readyz already).
                for route in [
                    "/v1/machines", "/v1/machines/{id}", "/v1/machines/{id}/games", "/v1/stream", "/metrics", "/dashboard",
                    "/dashboard/app.js", "/healthz", "/v1/notifications", "/im/netease",
                ] {
                    #expect(exposition.samples[#"claw_http_requests_total{route="\#(route)",status="200"}"#] == 0, "\(route)")
                }
                #expect(exposition.samples[#"claw_http_requests_total{route="/readyz",status="200"}"#] ?? 0 >= 1)
                #expect(exposition.samples[#"claw_notifications_total{provider="netease",result="forwarded"}"#] == 0)
                #expect(exposition.samples[#"claw_im_replies_total{provider="generic",result="failed"}"#] == 0)
                #expect(exposition.samples[#"claw_build_info{version="\#(ClawGatewayCommand.version)"}"#] == 1)
                #expect(exposition.samples["claw_mqtt_connects_total"] == 1)
                #expect(exposition.samples["claw_mqtt_connected"] == 1)
                #expect(exposition.samples["claw_storage_writable"] == 1)
                #expect(exposition.types["claw_ack_latency_seconds"] == "histogram")
            }
        }

        @Test func sigtermStopsCleanly() async throws {
            let site = try await E2ESite(simulate: false)
            try await site.waitReady()
            try await site.generic(from: "ann", #"{"command":6}"#)
            let watcher = try await TestSubscriber(broker: site.broker, topics: ["claw/gateway/state"])
            try await watcher.waitFor("claw/gateway/state") { $0 == "online" }
            let gateway = try #require(site.gateway)
            gateway.signal(SIGTERM)
            let status = await gateway.wait(timeout: 15)
            #expect(status == 0)
            try await watcher.waitFor("claw/gateway/state") { $0 == "offline" }
            let wal = site.site.database.path + "-wal"
            let walSize = (try? FileManager.default.attributesOfItem(atPath: wal)[.size] as? Int) ?? 0
            #expect(walSize == 0, "storage was checkpointed and closed")
            await watcher.stop()
            await site.stop()
        }
    }
}
