import Foundation
import Protocol
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// Faults injected into real processes: the broker, the PCs, floods and bad
    /// HTTP clients. How each is injected and what was seen: docs/RELIABILITY.md.
    @Suite(.serialized) struct FaultTests {
        @Test func brokerKilledMidGame() async throws {
            try await E2ESite.with { site in
                try await site.generic(from: "ann", #"{"command":6}"#)
                let session = try await HTTP.get("\(site.base)/v1/machines/m1").json["player"].flatMap { ($0 as? [String: Any])?["session"] as? String }
                let acks = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/ack"])
                try await site.generic(from: "ann", #"{"command":12,"data":"\#(session ?? "")"}"#)
                // Mid-game means the PC acked its coin: a coin not acked when
                // the broker goes ends the game (docs/PROTOCOL.md, the coin's ack).
                try await acks.waitFor("claw/m1/ack")
                await acks.stop()

                site.broker.kill()
                try await eventually("/readyz to say 503") { (try? await HTTP.get("\(site.base)/readyz"))?.status == 503 }
                for serial in 1...5 {
                    let answer = try await site.generic(from: "ann", #"{"command":1,"data":"down","serial":\#(serial)}"#)
                    #expect(answer.json["code"] as? String == "gateway_unavailable")
                }
                try site.broker.start()
                let watcher = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control", "claw/m1/queue", "claw/gateway/state"])
                try await watcher.waitFor("claw/gateway/state", timeout: .seconds(40)) { $0 == "online" }
                try await watcher.waitFor("claw/m1/queue", timeout: .seconds(40)) { $0.contains(#""accid":"ann""#) }
                try await eventually("/readyz to recover") { (try? await HTTP.get("\(site.base)/readyz"))?.status == 200 }
                try await eventually("the simulated PC to be back") {
                    (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["online"] as? Bool == true
                }
                let after = try await site.generic(from: "ann", #"{"command":1,"data":"up","serial":6}"#)
                #expect(after.json["result"] as? String == "forwarded")
                try await watcher.waitFor("claw/m1/control") { $0.contains(#""data":"up""#) }
                #expect(!watcher.payloads(on: "claw/m1/control").contains { $0.contains(#""data":"down""#) }, "nothing was delivered late")
                await watcher.stop()
            }
        }

        /// The PC is SIGKILLed mid-game and does not come back within the
        /// grace: the game ends `machine_offline`, the queue waits for it.
        @Test func aPCDyingWithoutDisconnectEndsTheGameAndTheQueueResumes() async throws {
            try await E2ESite.with(game: "offline_grace: 2s", keepalive: 5) { site in
                try await site.generic(from: "ann", #"{"command":6}"#)
                try await site.generic(from: "bob", #"{"command":6}"#)
                let session = try await site.currentSession()
                try await site.generic(from: "ann", #"{"command":12,"data":"\#(session)"}"#)
                let simulator = try #require(site.simulator)
                simulator.signal(SIGKILL)
                _ = simulator.wait()
                // The broker notices after 1.5 × keepalive at the latest, publishes the
                // will, and the grace runs out 2 s later.
                try await eventually("the game to end machine_offline", timeout: .seconds(30)) {
                    (try? await HTTP.get("\(site.base)/v1/machines/m1/games"))?.body.contains(#""outcome":"machine_offline""#) == true
                }
                #expect(try await HTTP.get("\(site.base)/v1/machines/m1").json["state"] as? String == "offline")
                let offline = try await site.generic(from: "ann", #"{"command":1,"data":"up","serial":1}"#)
                #expect(offline.json["code"] as? String == "machine_offline")
                #expect(try await HTTP.get("\(site.base)/v1/machines/m1").json["queue_length"] as? Int == 1, "bob keeps waiting")

                try site.restartSimulator()
                try await eventually("bob to be offered the turn when the PC is back") {
                    let player = (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["player"] as? [String: Any]
                    return player?["accid"] as? String == "bob"
                }
            }
        }

        /// The PC drops and is back within `game.offline_grace`: the game goes
        /// on, nothing sent during the gap reaches the machine, the result counts.
        @Test func aPCBackWithinTheGraceFinishesTheGame() async throws {
            // command_events: the coin's ack is seen on the events topic.
            try await E2ESite.with(game: "offline_grace: 60s\ncommand_events: true", keepalive: 5) { site in
                let events = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/events", "claw/m1/control"])
                try await site.generic(from: "ann", #"{"command":6}"#)
                let session = try await site.currentSession()
                try await site.generic(from: "ann", #"{"command":12,"data":"\#(session)"}"#)
                // The PC started the game: a PC gone before its coin's ack ends it at once.
                try await events.waitFor("claw/m1/events") { $0.contains(#""type":"ack""#) && $0.contains(#""command":"add_coins""#) }
                let simulator = try #require(site.simulator)
                simulator.signal(SIGKILL)
                _ = simulator.wait()
                try await events.waitFor("claw/m1/events", timeout: .seconds(30)) { $0.contains(#""type":"reconnecting""#) }
                let machine = try await HTTP.get("\(site.base)/v1/machines/m1").json
                #expect(machine["state"] as? String == "offline")
                #expect((machine["player"] as? [String: Any])?["session"] as? String == session, "the game is kept")
                let gap = try await site.generic(from: "ann", #"{"command":1,"data":"down","serial":1}"#)
                #expect(gap.json["code"] as? String == "machine_offline")

                try site.restartSimulator()
                try await events.waitFor("claw/m1/events", timeout: .seconds(30)) { $0.contains(#""type":"reconnected""#) }
                let moved = try await site.generic(from: "ann", #"{"command":1,"data":"up","serial":2}"#)
                #expect(moved.json["result"] as? String == "forwarded")
                try await site.generic(from: "ann", #"{"command":2,"serial":3}"#)
                try await eventually("the game to be recorded won") {
                    (try? await HTTP.get("\(site.base)/v1/machines/m1/games"))?.body.contains(#""outcome":"won""#) == true
                }
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games").body
                #expect(!games.contains("machine_offline"))
                #expect(!events.payloads(on: "claw/m1/control").contains { $0.contains(#""data":"down""#) }, "nothing from the gap was delivered")
                await events.stop()
            }
        }

        @Test func aBurstOfTenThousandNotifications() async throws {
            try await E2ESite.with(game: "max_commands_per_second: 10000", logLevel: "warning") { site in
                try await site.generic(from: "ann", #"{"command":6}"#)
                let session = try await HTTP.get("\(site.base)/v1/machines/m1").json["player"].flatMap { ($0 as? [String: Any])?["session"] as? String }
                try await site.generic(from: "ann", #"{"command":12,"data":"\#(session ?? "")"}"#)
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control"])
                let total = 10_000, workers = 16, base = site.base
                let results = try await withThrowingTaskGroup(of: [String].self) { group in
                    for worker in 0..<workers {
                        group.addTask {
                            var results: [String] = []
                            var serial = worker
                            while serial < total {
                                let answer = try await E2ESite.postGeneric(
                                    base: base,
                                    body: GenericEnvelope.encode(from: "ann", to: "m1", attach: #"{"command":1,"data":"left","serial":\#(serial + 1)}"#))
                                results.append(answer.status == 200 ? (answer.json["result"] as? String ?? "?") : "http \(answer.status)")
                                serial += workers
                            }
                            return results
                        }
                    }
                    return try await group.reduce(into: [String]()) { $0 += $1 }
                }
                #expect(results.count == total, "every notification was answered")
                let forwarded = results.filter { $0 == "forwarded" }.count
                #expect(forwarded == total, "answers: \(Dictionary(grouping: results, by: { $0 }).mapValues(\.count))")
                try await eventually("every forwarded command to be delivered", timeout: .seconds(30)) {
                    pc.payloads(on: "claw/m1/control").filter { $0.contains(#""data":"left""#) }.count == forwarded
                }
                #expect(try await HTTP.get("\(site.base)/healthz").status == 200)
                await pc.stop()
            }
        }

        @Test func slowHugeAndOversizedRequestsAreRefusedWithoutHurtingOthers() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let port = site.site.httpPort
                // Slowloris: many connections trickling a request that never ends,
                // from another loopback address (the whole 127/8 is local): 16 of
                // them are that address's share, the rest are closed at once.
                let slow = try (0..<64).map { _ in try RawSocket(port: port, from: "127.0.0.2") }
                for socket in slow { socket.send("POST /v1/notifications HTTP/1.1\r\nHost: x\r\nX-Slow: ") }
                let clock = ContinuousClock()
                let started = clock.now
                #expect(try await HTTP.get("\(site.base)/healthz").status == 200)
                #expect(clock.now - started < .seconds(2), "a normal client is served while 64 requests trickle")
                for socket in slow { socket.send("a") }

                // Huge headers.
                let huge = try RawSocket(port: port)
                huge.send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: \(String(repeating: "h", count: 100 * 1024))\r\n\r\n")
                let hugeAnswer = huge.read(timeout: .seconds(5))
                #expect(!hugeAnswer.hasPrefix("HTTP/1.1 200"), "a 100 KiB header is not served: \(hugeAnswer.prefix(80))")

                // A huge body announced up front: refused after 64 KiB, not read to the end.
                let body = try RawSocket(port: port)
                body.send("POST /v1/notifications HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n")
                body.send([UInt8](repeating: UInt8(ascii: " "), count: 128 * 1024))
                let bodyAnswer = body.read(timeout: .seconds(5))
                #expect(bodyAnswer.hasPrefix("HTTP/1.1 413"), "got: \(bodyAnswer.prefix(80))")
                #expect(bodyAnswer.contains("payload_too_large"))

                #expect(try await HTTP.get("\(site.base)/readyz").status == 200, "the server still serves")
                _ = slow.count
            }
        }
    }
}
