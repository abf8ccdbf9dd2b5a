import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// `claw-gateway notify`, the README's way of playing a first game: the
    /// real binary against a running gateway, a broker and simulated PCs.
    @Suite(.serialized) struct NotifyCommandTests {
        private func notify(_ site: E2ESite, _ arguments: [String]) throws -> GatewayBinary.Result {
            try GatewayBinary.run(["notify", "--config", site.site.config.path] + arguments)
        }

        @Test func aWholeGameThroughNotify() async throws {
            try await E2ESite.with { site in
                let machine = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control", "claw/m1/camera"])

                let joined = try notify(site, ["--from", "alice", "--to", "m1", "join", "Alice", "Liddell"])
                #expect(joined.status == 0, "\(joined.error)")
                #expect(joined.output.hasPrefix("HTTP 200 "))
                #expect(joined.output.contains(#""result":"offered""#))
                let detail = try await HTTP.get("\(site.base)/v1/machines/m1").json
                let waitingNick = (detail["player"] as? [String: Any])?["nick"] as? String
                #expect(waitingNick == "Alice Liddell", "every word after join is the nickname")

                // accept without a session: notify reads it from the read API.
                let accepted = try notify(site, ["--from", "alice", "--to", "m1", "accept"])
                #expect(accepted.status == 0, "\(accepted.error)")
                #expect(accepted.output.contains(#""result":"accepted""#))
                let session = try await site.currentSession()
                try await machine.waitFor("claw/m1/control") { $0.contains(#""command":1001"#) && $0.contains(session) }

                let moved = try notify(site, ["--from", "alice", "--to", "m1", "--serial", "41", "move", "left"])
                #expect(moved.output.contains(#""result":"forwarded""#))
                try await machine.waitFor("claw/m1/control") { $0.contains(#""command":1"#) && $0.contains(#""data":"left""#) }

                // A NetEase message copy, signed with the app secret. alice on
                // NetEase is another player than alice on the generic webhook
                // (SPEC §5): the copy is answered 200, she is told through the
                // NetEase API that it is not her turn, and nothing reaches m1.
                let viaNetEase = try notify(site, ["--from", "alice", "--to", "claw_m1", "--via", "netease", "--serial", "42", "move", "up"])
                #expect(viaNetEase.status == 0, "\(viaNetEase.error)")
                #expect(viaNetEase.output.hasPrefix("HTTP 200 "))
                try await eventually("NetEase's alice to be told it is not her turn") {
                    site.netease.attachments(to: "alice").contains { $0.contains(#""data":"not_your_turn""#) && $0.contains(#""serial":42"#) }
                }

                let camera = try notify(site, ["--from", "alice", "--to", "m1", "--serial", "43", "camera", "2"])
                #expect(camera.output.contains(#""result":"forwarded""#))
                try await machine.waitFor("claw/m1/camera") { $0.contains(#""command":3"#) && $0.contains(#""data":"2""#) }

                let raw = try notify(site, ["--from", "alice", "--to", "m1", #"{"command":1,"data":"right","serial":44}"#])
                #expect(raw.output.contains(#""result":"forwarded""#))
                try await machine.waitFor("claw/m1/control") { $0.contains(#""data":"right""#) }

                #expect(!machine.payloads(on: "claw/m1/control").contains { $0.contains(#""data":"up""#) })
                let grabbed = try notify(site, ["--from", "alice", "--to", "m1", "--serial", "45", "grab"])
                #expect(grabbed.output.contains(#""result":"forwarded""#))
                try await machine.waitFor("claw/m1/control") { $0.contains(#""command":2"#) }
                try await eventually("alice's game to be recorded") {
                    let games = try? await HTTP.get("\(site.base)/v1/machines/m1/games").json["games"] as? [[String: Any]]
                    return games?.first?["outcome"] as? String == "won"
                }
                await machine.stop()
            }
        }

        @Test func acceptFindsTheSessionWithTheConfigsReadToken() async throws {
            let token = "a-read-token-for-notify-0123456789"
            try await E2ESite.with(simulate: false, http: "read_token: \(token)") { site in
                try site.restartSimulator()
                try await eventually("m1 to be online") {
                    let machine = try? await HTTP.request(
                        .GET, "\(site.base)/v1/machines/m1", headers: [("Authorization", "Bearer \(token)")], body: nil)
                    return machine?.json["online"] as? Bool == true
                }
                #expect(try notify(site, ["--from", "alice", "--to", "m1", "join"]).output.contains(#""result":"offered""#))
                let accepted = try notify(site, ["--from", "alice", "--to", "m1", "accept"])
                #expect(accepted.status == 0, "\(accepted.error)")
                #expect(accepted.output.contains(#""result":"accepted""#))
            }
        }

        @Test func refusalsAndMistakesSayWhatIsWrong() async throws {
            // A long accept timer: alice's offer must outlast the refusals.
            try await E2ESite.with(game: "accept_timeout: 120s") { site in
                _ = try notify(site, ["--from", "alice", "--to", "m1", "join"])

                // The gateway's refusal is printed; it is an answer, not a failure of notify.
                let notYours = try notify(site, ["--from", "bob", "--to", "m1", "--serial", "1", "move", "up"])
                #expect(notYours.status == 0)
                #expect(notYours.output.contains(#""code":"not_your_turn""#))

                // A payload the gateway refuses as invalid: 422, and notify fails.
                let invalid = try notify(site, ["--from", "bob", "--to", "m1", "--serial", "2", "move", "sideways"])
                #expect(invalid.status == 1)
                #expect(invalid.output.contains("HTTP 422"))
                #expect(invalid.output.contains("invalid_payload"))

                let unknownVerb = try notify(site, ["--from", "bob", "--to", "m1", "fly"])
                #expect(unknownVerb.status == 64)
                #expect(unknownVerb.error.contains(#"Unknown notification "fly""#))
                let noDirection = try notify(site, ["--from", "bob", "--to", "m1", "move"])
                #expect(noDirection.status == 64)
                #expect(noDirection.error.contains("move needs a direction"))
                let nothing = try notify(site, ["--from", "bob", "--to", "m1"])
                #expect(nothing.status != 0)
                let noTurn = try notify(site, ["--from", "bob", "--to", "m1", "accept"])
                #expect(noTurn.status == 64)
                #expect(noTurn.error.contains("bob holds no turn on m1"))
                let badProvider = try notify(site, ["--from", "bob", "--to", "m1", "--via", "carrier-pigeon", "leave"])
                #expect(badProvider.status == 64)
                #expect(badProvider.error.contains("--via must be generic or netease"))

                // Nobody listening: the exit status says unavailable (69); the message says
                // in words that no gateway runs where it tried, and how to start one.
                let port = try FreePort.next()
                for words in [["leave"], ["accept"]] {
                    let down = try notify(site, ["--from", "bob", "--to", "m1", "--url", "http://127.0.0.1:\(port)"] + words)
                    #expect(down.status == 69, "\(words): \(down.error)")
                    #expect(down.error.contains("Nothing listens at http://127.0.0.1:\(port): no gateway is running there"), "\(down.error)")
                    #expect(down.error.contains("./scripts/run") && down.error.contains("claw-gateway run --config"), "\(down.error)")
                    #expect(!down.error.contains("errno") && !down.error.contains("connection reset"), "\(down.error)")
                }
                // Without --url, the address is the config's http.listen, and the message says so.
                let elsewhere = site.site.directory.appendingPathComponent("elsewhere.yaml")
                try (try String(contentsOf: site.site.config, encoding: .utf8))
                    .replacingOccurrences(of: "listen: 127.0.0.1:\(site.site.httpPort)", with: "listen: 127.0.0.1:\(port)")
                    .write(to: elsewhere, atomically: true, encoding: .utf8)
                let unconfigured = try GatewayBinary.run(["notify", "--config", elsewhere.path, "--from", "bob", "--to", "m1", "leave"])
                #expect(unconfigured.status == 69)
                #expect(
                    unconfigured.error.contains("Nothing listens at http://127.0.0.1:\(port) (http.listen of \(elsewhere.path))"),
                    "\(unconfigured.error)")

                let machine = try await HTTP.get("\(site.base)/v1/machines/m1").json
                #expect((machine["player"] as? [String: Any])?["accid"] as? String == "alice", "no refused notification changed the game")
            }
        }
    }
}
