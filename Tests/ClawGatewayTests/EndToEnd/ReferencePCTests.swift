import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// examples/reference-pc/claw_pc.py, the Python PC arcades' developers start
    /// from, as machine m1's PC: a real mosquitto, the real gateway, and the
    /// script run by Debian's python3 with its paho-mqtt.
    @Suite(.serialized) struct ReferencePCTests {
        static let python = "/usr/bin/python3"

        /// examples/reference-pc/claw_pc.py of this checkout.
        static var script: URL {
            var root = URL(fileURLWithPath: #filePath)
            for _ in 0..<4 { root.deleteLastPathComponent() }  // …/Tests/ClawGatewayTests/EndToEnd/<file>
            return root.appendingPathComponent("examples/reference-pc/claw_pc.py")
        }

        /// A whole game through the generic webhook: the PC acks everything it is
        /// sent, its result ends the game with the right session, it is `online`
        /// retained while it runs, and its last will says `offline` when it is killed.
        @Test func aWholeGameAgainstTheRealGateway() async throws {
            try await Self.requirePython()
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let pc = try Self.startPC(site, ["--result-delay", "0.2", "--win-rate", "1"])
                try await Self.waitOnline(site, true)

                // Retained: a subscriber that comes after the PC reads `online` at once.
                let watcher = try await TestSubscriber(
                    broker: site.broker,
                    topics: ["claw/m1/state", "claw/m1/control", "claw/m1/camera", "claw/m1/ack", "claw/m1/result", "claw/m1/result/ack"])
                try await eventually("m1's retained state online") {
                    watcher.messages.contains { $0.topic == "claw/m1/state" && $0.retain && String(decoding: $0.payload, as: UTF8.self) == "online" }
                }

                #expect(try await site.generic(from: "ann", #"{"command":6,"data":"Ann"}"#).json["result"] as? String == "offered")
                let session = try await site.currentSession()
                #expect(try await site.generic(from: "ann", #"{"command":12,"data":"\#(session)"}"#).json["result"] as? String == "accepted")
                for attach in [#"{"command":1,"data":"left","serial":1}"#, #"{"command":3,"data":"2","serial":2}"#, #"{"command":2,"serial":3}"#] {
                    #expect(try await site.generic(from: "ann", attach).json["result"] as? String == "forwarded", "\(attach)")
                }

                // The result: the game's session echoed, recorded won (--win-rate 1).
                let result = try WireMessage.decode(Array(try await watcher.waitFor("claw/m1/result").utf8))
                #expect(result.code == .result && result.data == "true" && result.session == session, "\(result)")
                // Numbered (SPEC §4), and confirmed by the gateway once the game's end is on disk.
                let serial = try #require(result.serial, "the result has no serial")
                try await watcher.waitFor("claw/m1/result/ack") { $0 == #"{"serial":\#(serial)}"# }
                try await eventually("the PC to log the confirmation") { Self.log(site).contains("result \(serial) confirmed") }
                var game: [String: Any] = [:]
                try await eventually("the game to be recorded") {
                    let games = (try? await HTTP.get("\(site.base)/v1/machines/m1/games"))?.json["games"] as? [[String: Any]]
                    game = games?.first { $0["id"] as? String == session } ?? [:]
                    return ["won", "lost"].contains(game["outcome"] as? String ?? "")
                }
                #expect(game["outcome"] as? String == "won")
                #expect(game["player"] as? String == "ann")
                #expect(game["commands"] as? Int == 3, "move, camera, grab")

                // Every message to the machine (1001, move, camera, grab) was acked with
                // its serial, and the gateway matched each ack.
                var sent: [Int64] = []
                try await eventually("1001, move, camera and grab on m1's topics") {
                    sent = Self.serials(watcher, ["claw/m1/control", "claw/m1/camera"])
                    return sent.count == 4
                }
                try await eventually("an ack for every message") { Set(Self.serials(watcher, ["claw/m1/ack"])) == Set(sent) }
                #expect(watcher.payloads(on: "claw/m1/ack").allSatisfy { $0.hasPrefix(#"{"command":5,"data":"ok","serial":"#) })
                try await eventually("the gateway to count four acks from m1") {
                    let text = (try? await HTTP.get("\(site.base)/metrics"))?.body ?? ""
                    return (try? PrometheusText(text))?.samples[#"claw_ack_latency_seconds_count{machine="m1"}"#] == 4
                }

                // SIGKILL: no goodbye, so the broker publishes the PC's will.
                pc.signal(SIGKILL)
                #expect(await pc.wait(timeout: 10) == 128 + SIGKILL)
                try await watcher.waitFor("claw/m1/state", timeout: .seconds(30)) { $0 == "offline" }
                try await Self.waitOnline(site, false)
                await watcher.stop()
            }
        }

        /// Commands retained on the broker before the PC connects are old ones:
        /// the PC neither acks nor acts on them. Unreadable messages are logged
        /// and skipped, numeric strings read as the gateway reads them, a grab
        /// without a session answers with the session of the last 1001, and
        /// SIGTERM says `offline` itself before disconnecting.
        @Test func retainedAndUnreadableCommandsAreNotActedOn() async throws {
            try await Self.requirePython()
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let watcher = try await TestSubscriber(
                    broker: site.broker, topics: ["claw/m1/state", "claw/m1/control", "claw/m1/camera", "claw/m1/ack", "claw/m1/result"])
                let leftOver = [
                    ("claw/m1/control", #"{"command":2,"serial":424242,"session":"left-over"}"#),
                    ("claw/m1/camera", #"{"command":3,"data":"1","serial":424243,"session":"left-over"}"#),
                ]
                for (topic, payload) in leftOver {
                    try watcher.client.publish(topic, payload: Array(payload.utf8), qos: .atLeastOnce, retain: true)
                    try await watcher.waitFor(topic) { $0 == payload }  // the broker has it
                }

                let pc = try Self.startPC(site, ["--result-delay", "0.2", "--win-rate", "0"])
                try await Self.waitOnline(site, true)
                try await eventually("the PC to log both retained messages as ignored") {
                    Self.log(site).components(separatedBy: "ignored a retained message").count == 3
                }

                // Garbage, then a command with numeric strings: only the latter is acked.
                for payload in ["not json", #"{"data":"left","serial":76}"#, #"{"command":"1","data":"left","serial":"77"}"#] {
                    try watcher.client.publish("claw/m1/control", payload: Array(payload.utf8))
                }
                try await watcher.waitFor("claw/m1/ack") { $0 == #"{"command":5,"data":"ok","serial":77}"# }
                try await eventually("the PC to log both unreadable messages") {
                    Self.log(site).components(separatedBy: "ignored an unreadable message").count == 3
                }
                // A 1001 with a session, then a grab without one: the result echoes the 1001's.
                for payload in [#"{"command":1001,"data":"1","serial":78,"session":"bench"}"#, #"{"command":2,"serial":79}"#] {
                    try watcher.client.publish("claw/m1/control", payload: Array(payload.utf8))
                }
                try await watcher.waitFor("claw/m1/result") {
                    $0.wholeMatch(of: /\{"command":4,"data":"false","serial":\d+,"session":"bench"\}/) != nil
                }

                // A real game after that ends lost (--win-rate 0) with its own session.
                try await site.generic(from: "ann", #"{"command":6}"#)
                let session = try await site.currentSession()
                try await site.generic(from: "ann", #"{"command":12,"data":"\#(session)"}"#)
                #expect(try await site.generic(from: "ann", #"{"command":2,"serial":1}"#).json["result"] as? String == "forwarded")
                try await eventually("the game to be recorded lost") {
                    (try? await HTTP.get("\(site.base)/v1/machines/m1/games"))?.body.contains(#""outcome":"lost""#) == true
                }
                try await watcher.waitFor("claw/m1/result") { $0.contains(session) }

                // The PC publishes acks and results in the order it reads commands, and
                // read the retained ones first: had it answered them, those answers
                // would be here by now.
                var acked: [Int64] = []
                try await eventually("the acks of 77, 78, 79 and the game's 1001 and grab") {
                    acked = Self.serials(watcher, ["claw/m1/ack"])
                    return acked.count >= 5
                }
                #expect(!acked.contains(424242) && !acked.contains(424243), "retained commands acked: \(acked)")
                #expect(!acked.contains(76), "a message without a command was acked")
                #expect(acked.count == 5, "77, 78, 79, the game's 1001 and grab: \(acked)")
                // Two results, each numbered (a repeat, if the gateway was slow to confirm, has its serial).
                let results = watcher.payloads(on: "claw/m1/result")
                #expect(Set(Self.serials(watcher, ["claw/m1/result"])).count == 2 && !results.contains { $0.contains("left-over") }, "\(results)")

                // SIGTERM: the PC says offline itself and exits cleanly.
                pc.signal(SIGTERM)
                #expect(await pc.wait(timeout: 10) == 0)
                try await watcher.waitFor("claw/m1/state") { $0 == "offline" }
                try await Self.waitOnline(site, false)
                #expect(Self.log(site).contains("offline; stopped"))
                await watcher.stop()
            }
        }

        /// SPEC §4: a result the gateway does not confirm is repeated every
        /// 2 s, same serial; the gateway, back, takes it once and confirms
        /// it (and the repeats), and the PC stops. The gateway is frozen
        /// (SIGSTOP) from the grab until the PC has repeated its result.
        @Test func anUnconfirmedResultIsRepeatedUntilTheGatewayConfirmsIt() async throws {
            try await Self.requirePython()
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                let pc = try Self.startPC(site, ["--result-delay", "0.2", "--win-rate", "1", "--result-timeout", "30"])
                try await Self.waitOnline(site, true)
                let watcher = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control", "claw/m1/result", "claw/m1/result/ack"])
                try await site.generic(from: "ann", #"{"command":6}"#)
                let session = try await site.currentSession()
                try await site.generic(from: "ann", #"{"command":12,"data":"\#(session)"}"#)
                try await eventually("the game started") {
                    (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["state"] as? String == "playing"
                }
                #expect(try await site.generic(from: "ann", #"{"command":2,"serial":1}"#).json["result"] as? String == "forwarded")
                try await watcher.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":2,"#) }
                site.gateway?.signal(SIGSTOP)
                try await eventually("the result sent, then repeated", timeout: .seconds(15)) {
                    watcher.payloads(on: "claw/m1/result").count >= 2
                }
                let serials = Self.serials(watcher, ["claw/m1/result"])
                #expect(Set(serials).count == 1, "a repeat has the same serial: \(serials)")
                #expect(Self.log(site).contains("result repeated (not confirmed yet)"))
                site.gateway?.signal(SIGCONT)

                let serial = serials.first ?? -1
                try await watcher.waitFor("claw/m1/result/ack") { $0 == #"{"serial":\#(serial)}"# }
                try await eventually("the PC to log the confirmation") { Self.log(site).contains("result \(serial) confirmed") }
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games").json["games"] as? [[String: Any]] ?? []
                #expect(games.filter { $0["id"] as? String == session }.map { $0["outcome"] as? String } == ["won"])
                pc.signal(SIGTERM)
                _ = await pc.wait(timeout: 10)
                await watcher.stop()
            }
        }

        // MARK: Helpers

        /// The tests need Debian's python3 with paho-mqtt; ./scripts/test installs both.
        static func requirePython() async throws {
            let hint = "run ./scripts/test (it installs python3-paho-mqtt), or: sudo apt-get install -y python3 python3-paho-mqtt"
            try #require(FileManager.default.isExecutableFile(atPath: python), "\(python) is missing: \(hint)")
            let check = try ChildProcess(python, ["-c", "import paho.mqtt.client"])
            let status = await check.wait(timeout: 30)
            try #require(status == 0, "\(python) cannot import paho.mqtt (exit status \(status.map(String.init) ?? "none")): \(hint)")
        }

        static func startPC(_ site: E2ESite, _ arguments: [String]) throws -> ChildProcess {
            try ChildProcess(
                python, [script.path, "--host", "127.0.0.1", "--port", String(site.broker.port), "--machine", "m1"] + arguments,
                output: site.site.directory.appendingPathComponent("pc.log"))
        }

        static func log(_ site: E2ESite) -> String {
            (try? String(contentsOf: site.site.directory.appendingPathComponent("pc.log"), encoding: .utf8)) ?? ""
        }

        static func waitOnline(_ site: E2ESite, _ online: Bool) async throws {
            try await eventually("the gateway to see m1 \(online ? "online" : "offline")", timeout: .seconds(30)) {
                (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["online"] as? Bool == online
            }
        }

        /// The serials of the wire messages received on `topics`, in order.
        static func serials(_ watcher: TestSubscriber, _ topics: [String]) -> [Int64] {
            watcher.messages.filter { topics.contains($0.topic) }.compactMap { try? WireMessage.decode($0.payload).serial }
        }
    }
}
