import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// SPEC §13: a second `claw-gateway run` on the same storage or the same
    /// port fails before it touches anything of the gateway already running:
    /// not its MQTT session (the same client id), not its retained state and
    /// snapshots, not its games. Its message says what is held, by whom, and
    /// what to do. With the built binary against a real mosquitto.
    @Suite(.serialized) struct SecondInstanceTests {
        /// What the first gateway publishes while the second one tries.
        static let watched = ["claw/gateway/state", "claw/m1/queue", "claw/m2/queue"]

        /// The snapshots' `seq` of `machine`, in the order they came.
        static func seqs(_ watch: TestSubscriber, _ machine: String) -> [Int] {
            watch.payloads(on: "claw/\(machine)/queue").compactMap { payload in
                payload.firstMatch(of: /"seq":(\d+)/).flatMap { Int($0.1) }
            }
        }

        /// A copy of the site's gateway.yaml in its folder (so that a relative
        /// storage.path names the same file), with `replace` applied.
        static func variant(_ site: E2ESite, _ name: String, _ replace: (String) -> String) throws -> URL {
            let text = try String(contentsOf: site.site.config, encoding: .utf8)
            let file = site.site.directory.appendingPathComponent(name)
            let changed = replace(text)
            #expect(changed != text, "the variant differs")
            try changed.write(to: file, atomically: true, encoding: .utf8)
            return file
        }

        /// Runs a second gateway on `config` to its exit, then checks the
        /// first: nothing published meanwhile (no `offline`, no snapshot), the
        /// game in progress on m1 goes on to its result.
        private func tryASecond(
            _ site: E2ESite, config: URL, expect status: Int32, _ messages: [String]
        ) async throws {
            let first = try #require(site.gateway)
            let watch = try await TestSubscriber(broker: site.broker, topics: Self.watched)
            try await watch.waitFor("claw/gateway/state") { $0 == "online" }
            try await watch.waitFor("claw/m1/queue") { $0.contains(#""state":"playing""#) }
            let before = watch.messages.count
            let seq = Self.seqs(watch, "m1").last

            let second = try GatewayBinary.run(["run", "--config", config.path])
            #expect(second.status == status, "exit status; stderr: \(second.error)")
            for message in messages + ["pid \(first.pid)"] {
                #expect(second.error.contains(message), "\(message) in: \(second.error)")
            }
            #expect(!second.error.contains("errno"), "said in words: \(second.error)")
            #expect(first.isRunning)

            // Nothing came from the first gateway (or from the second in its name) meanwhile.
            let during = watch.messages.dropFirst(before).map { "\($0.topic) \(String(decoding: $0.payload, as: UTF8.self))" }
            #expect(during.isEmpty, "published while the second one tried: \(during)")
            #expect(Self.seqs(watch, "m1").last == seq)
            // And the game goes on: a move, the grab, the simulated PC's result.
            let move = try await site.generic(from: "ann", #"{"command":1,"data":"left","serial":\#(Int.random(in: 1000...9999))}"#)
            #expect(move.json["result"] as? String == "forwarded", "\(move.body)")
            let grab = try await site.generic(from: "ann", #"{"command":2,"serial":\#(Int.random(in: 10000...99999))}"#)
            #expect(grab.json["result"] as? String == "forwarded", "\(grab.body)")
            try await watch.waitFor("claw/m1/queue") { $0.contains(#""state":"idle""#) }
            #expect(!watch.payloads(on: "claw/gateway/state").contains("offline"), "the first gateway never said offline")
            await watch.stop()
        }

        /// ann joins m1 and accepts; the simulated PC acks the coin: a game in progress.
        private func startAGame(_ site: E2ESite) async throws {
            let offer = try await site.generic(from: "ann", #"{"command":6,"data":"Ann"}"#)
            let session = try #require(offer.json["session"] as? String, "\(offer.body)")
            let accept = try await site.generic(from: "ann", #"{"command":12,"data":"\#(session)"}"#)
            #expect(accept.json["result"] as? String == "accepted", "\(accept.body)")
            try await eventually("ann playing on m1") {
                (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["state"] as? String == "playing"
            }
        }

        @Test func aSecondGatewayOnTheSameConfigFailsBeforeItTouchesTheFirst() async throws {
            try await E2ESite.with(game: "play_timeout: 60s") { site in
                try await startAGame(site)
                let lock = site.site.database.path + ".lock"
                try await tryASecond(site, config: site.site.config, expect: 1, ["already_running", lock, "systemctl stop claw-gateway"])
            }
        }

        @Test func aSecondGatewayOnTheSameStorageButAnotherPortFailsOnTheLock() async throws {
            try await E2ESite.with(game: "play_timeout: 60s") { site in
                try await startAGame(site)
                let port = try FreePort.next()
                let config = try Self.variant(site, "other-port.yaml") {
                    $0.replacingOccurrences(of: "listen: 127.0.0.1:\(site.site.httpPort)", with: "listen: 127.0.0.1:\(port)")
                }
                try await tryASecond(site, config: config, expect: 1, ["already_running", site.site.database.path + ".lock"])
                #expect(await HTTP.reachable(port: port) == false, "the second never listened")
            }
        }

        @Test func aSecondGatewayOnTheSamePortButAnotherStorageFailsOnThePort() async throws {
            try await E2ESite.with(game: "play_timeout: 60s") { site in
                try await startAGame(site)
                let config = try Self.variant(site, "other-storage.yaml") {
                    $0.replacingOccurrences(of: "path: data/gateway.sqlite", with: "path: other/gateway.sqlite")
                }
                try await tryASecond(site, config: config, expect: 1, ["port_in_use", "127.0.0.1:\(site.site.httpPort)", "claw-gateway"])
                let other = site.site.directory.appendingPathComponent("other/gateway.sqlite").path
                #expect(!FileManager.default.fileExists(atPath: other), "the second never opened its storage")
            }
        }

        /// The lock goes with the process, however it ends: after a `kill -9`
        /// the next gateway starts on the same storage.
        @Test func aKilledGatewayLeavesNoLockBehind() async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                site.killGateway()
                try site.startGateway()
                try await site.waitReady()
                let lock = try String(contentsOfFile: site.site.database.path + ".lock", encoding: .utf8)
                #expect(lock == "\(try #require(site.gateway).pid)\n", "the lock file holds the running gateway's pid")
            }
        }
    }
}
