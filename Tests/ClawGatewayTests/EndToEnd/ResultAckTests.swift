import Foundation
import GRDB
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// SPEC §4, `claw/<m>/result/ack`, for real: libmosquitto acknowledges a
    /// QoS 1 result as it receives it, so a gateway killed between that and
    /// the durable write used to lose the result, and the game ended
    /// `no_result`. `claw-gateway simulate` numbers its results and repeats
    /// each until the gateway confirms it; the gateway confirms only once the
    /// game's end is on disk.
    @Suite(.serialized) struct ResultAckTests {
        /// The gateway's writes fail (`prlimit --fsize=1`, as in
        /// DurabilityTests) from before the grab: it takes the PC's result in
        /// memory but cannot write it. It is killed with `kill -9` and started
        /// again: the PC's repeat (kept by the broker for the gateway's
        /// session) makes the game `won`, and the confirmation comes only
        /// once the row says so.
        @Test func aResultTakenButNotSavedBeforeAKillIsRepeatedAndTheGameIsWon() async throws {
            let site = try await E2ESite(
                simulatorArguments: ["--ack-delay", "0s", "--result-delay", "1s", "--win-rate", "1"], machines: ["m1"])
            do {
                try await run(site)
            } catch {
                print("gateway log:\n\(site.site.logText.suffix(5000))")
                await site.stop()
                throw error
            }
            await site.stop()
        }

        private func run(_ site: E2ESite) async throws {
            let watcher = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/result", "claw/m1/result/ack"])
            let session = try #require(try await site.generic(from: "alice", #"{"command":6}"#).json["session"] as? String)
            #expect(try await site.generic(from: "alice", #"{"command":12,"data":"\#(session)"}"#).json["result"] as? String == "accepted")
            try await eventually("the game started") { try await Self.state(site) == "playing" }

            let pid = try #require(site.gateway?.pid)
            try DurabilityTests.prlimit(pid, "--fsize=1:unlimited")
            // The grab goes out (a command waits for no write), though its answer cannot say it was saved.
            try await site.generic(from: "alice", #"{"command":2,"serial":1}"#)
            // The PC's result comes, and the gateway takes it in memory: the machine is free.
            let first = try await watcher.waitFor("claw/m1/result")
            let result = try WireMessage.decode(Array(first.utf8))
            let serial = try #require(result.serial, "the simulator numbers its results: \(first)")
            #expect(result.session == session && result.data == "true")
            try await eventually("the result taken in memory") { try await Self.state(site) == "idle" }
            // Not on disk, so not confirmed: the PC repeats it, same serial.
            try await eventually("the PC's repeat", timeout: .seconds(10)) {
                watcher.payloads(on: "claw/m1/result").count >= 2
            }
            #expect(Set(watcher.payloads(on: "claw/m1/result").map { try? WireMessage.decode(Array($0.utf8)).serial }) == [serial])
            #expect(watcher.payloads(on: "claw/m1/result/ack").isEmpty, "nothing is confirmed before it is on disk")
            #expect(try Self.outcome(site, session) == nil, "the game's end is not on disk")

            site.killGateway()
            try site.startGateway()
            let confirmation = try await watcher.waitFor("claw/m1/result/ack", timeout: .seconds(15))
            // Read at once: the confirmation comes only after the row is written.
            #expect(try Self.outcome(site, session) == "won", "on disk when confirmed")
            #expect(ResultConfirmation.decode(Array(confirmation.utf8)) == ResultConfirmation(serial: serial), "\(confirmation)")
            let games = try await HTTP.get("\(site.base)/v1/machines/m1/games").json["games"] as? [[String: Any]] ?? []
            let game = try #require(games.first { $0["id"] as? String == session })
            #expect(game["outcome"] as? String == "won", "not no_result: \(game)")
            try await eventually("the simulator to hear its result confirmed") {
                let log = (try? String(contentsOf: site.site.directory.appendingPathComponent("simulate.log"), encoding: .utf8)) ?? ""
                return log.contains("Simulated machine's result confirmed")
            }
            await watcher.stop()
        }

        private static func state(_ site: E2ESite) async throws -> String? {
            try await HTTP.get("\(site.base)/v1/machines/m1").json["state"] as? String
        }

        /// The game's outcome as the SQLite file holds it, read beside the running gateway.
        private static func outcome(_ site: E2ESite, _ session: String) throws -> String? {
            var configuration = Configuration()
            configuration.readonly = true
            let file = try DatabaseQueue(path: site.site.database.path, configuration: configuration)
            defer { try? file.close() }
            return try file.read { db in try String.fetchOne(db, sql: "SELECT outcome FROM games WHERE id = ?", arguments: [session]) }
        }
    }
}
