import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// SPEC §11: every money change is on disk before it is answered or
    /// acted on. Not a read of the pragma: a real `claw-gateway run` whose
    /// SQLite file goes through a power cut (Tests/PowerCut: every write not
    /// synced when the gateway is killed is undone, as a file system that
    /// loses what was not on the disk does), started again on what is left.
    @Suite(.serialized) struct PowerCutTests {
        static let admin = "power-cut-admin-token"
        static let read = "power-cut-read-token-0"
        static let secret = "power-cut-topup-secret"

        static func site(_ cut: PowerCut) async throws -> E2ESite {
            try await E2ESite(
                simulate: false, adminToken: admin, http: "read_token: \(read)",
                extra: "credits: { price: 2, topup_secret: \(secret), max_topup: 100 }\n",
                launcher: { site in cut.launcher(watching: site.database.path) })
        }

        static func balance(_ site: E2ESite, _ account: String) async throws -> Int? {
            let answer = try await HTTP.request(
                .GET, "\(site.base)/v1/players/netease/\(account)/wallet", headers: [("Authorization", "Bearer \(read)")])
            return answer.json["balance"] as? Int
        }

        /// A top-up answered 200, an adjustment answered 200, a game whose
        /// coin went out: the power goes, and every one of them is there.
        /// The same top-up and adjustment sent again are taken once.
        @Test func whatWasAnsweredOrActedOnOutlivesAPowerCut() async throws {
            let cut = try PowerCut.build()
            defer { cut.remove() }
            let site = try await Self.site(cut)
            do {
                let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control"])
                try await site.waitReady()
                try pc.client.publish("claw/m1/state", payload: Array("online".utf8), qos: .atLeastOnce, retain: true)
                try await eventually("m1 online") { (try? await HTTP.request(.GET, "\(site.base)/v1/machines/m1", headers: [("Authorization", "Bearer \(Self.read)")]))?.json["online"] as? Bool == true }

                let topUp = #"{"provider":"netease","account":"alice","credits":10,"order":"pay-1"}"#
                let first = try await CreditsEndToEndTests.topUp(base: site.base, topUp, secret: Self.secret)
                #expect(first.status == 200 && first.json["duplicate"] as? Bool == false, "\(first.body)")
                let adjust = Array(#"{"credits":5,"reason":"goodwill","key":"ops-1"}"#.utf8)
                let adjusted = try await HTTP.request(
                    .POST, "\(site.base)/v1/players/netease/alice/adjust", headers: [("Authorization", "Bearer \(Self.admin)")], body: adjust)
                #expect(adjusted.status == 200 && adjusted.json["balance"] as? Int == 15, "\(adjusted.body)")
                // A paid game: its debit is written with its start, before the coin goes out.
                #expect(try await site.copy(from: "alice", #"{"command":6}"#).status == 200)
                let offered = try await HTTP.request(.GET, "\(site.base)/v1/machines/m1", headers: [("Authorization", "Bearer \(Self.read)")]).json
                let session = try #require((offered["player"] as? [String: Any])?["session"] as? String)
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(session)"}"#)
                try await pc.waitFor("claw/m1/control") { $0.contains(#""command":1001"#) && $0.contains(session) }

                site.killGateway()
                try cut.cut()
                try site.startGateway()
                try await site.waitReady()

                #expect(try await Self.balance(site, "alice") == 13, "the top-up, the adjustment and the game's debit are on the disk")
                let again = try await CreditsEndToEndTests.topUp(base: site.base, topUp, secret: Self.secret)
                #expect(again.status == 200 && again.json["duplicate"] as? Bool == true, "\(again.body)")
                let retried = try await HTTP.request(
                    .POST, "\(site.base)/v1/players/netease/alice/adjust", headers: [("Authorization", "Bearer \(Self.admin)")], body: adjust)
                #expect(retried.status == 200 && retried.json["balance"] as? Int == 15, "the first answer again: \(retried.body)")
                #expect(try await Self.balance(site, "alice") == 13, "nothing added twice")
                let machine = try await HTTP.request(.GET, "\(site.base)/v1/machines/m1", headers: [("Authorization", "Bearer \(Self.read)")]).json
                #expect((machine["player"] as? [String: Any])?["session"] as? String == session, "the game is taken up")
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }
    }
}

/// The power cut itself, on a file of its own: a write not synced is gone
/// after it, a synced one stays. Without this, the test above could pass
/// with a cut that undoes nothing.
@Suite struct PowerCutHarnessTests {
    @Test func aWriteNotSyncedIsLostAndASyncedOneKept() throws {
        let cut = try PowerCut.build()
        defer { cut.remove() }
        let file = cut.directory.appendingPathComponent("money.db")
        func run(sync: Bool) throws {
            try Data("before-before".utf8).write(to: file)
            let script = "import os; f = os.open('\(file.path)', os.O_RDWR); os.pwrite(f, b'after', 7); os.write(f, b'AFTER')"
                + (sync ? "; os.fsync(f)" : "")
            let process = try ChildProcess("/usr/bin/env", cut.launcher(watching: "money.db") + ["python3", "-c", script])
            #expect(process.wait() == 0)
        }
        try run(sync: false)
        #expect(try String(contentsOf: file, encoding: .utf8) == "AFTERe-aftere")
        #expect(try cut.cut() == 2)
        #expect(try String(contentsOf: file, encoding: .utf8) == "before-before", "what was not synced is gone")
        try run(sync: true)
        #expect(try cut.cut() == 0)
        #expect(try String(contentsOf: file, encoding: .utf8) == "AFTERe-aftere", "what was synced stays")
    }
}
