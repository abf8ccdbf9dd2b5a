import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension DatabaseSuites.RecorderTests {
    /// A site's audit entries in the chain (SPEC §16): shipped in the records'
    /// numbering to `claw-gateway record` (a real mosquitto and PostgreSQL 15),
    /// kept once at their place, served chain-wide by `/v1/audit`; a
    /// correction keeps the machine's word and its new version, whichever of
    /// the game and the correction came first, and the figures count it.
    @Test func aSitesEntriesAndCorrectionsAreKeptChainWide() async throws {
        try await Self.with(sites: ["arcade-1", "arcade-2"]) { recorder, sites, database, _ in
            let (site, other) = (sites[0], sites[1])
            func entry(_ action: AuditAction, target: String, after: AuditValue = .null, reason: String? = nil) -> AuditEntry {
                AuditEntry(
                    seq: 99, at: Date(), operatorName: "carol", action: action, target: target, before: .null, after: after,
                    reason: reason, address: "10.0.0.7")
            }
            func correct(_ game: String, _ outcome: GameOutcome) -> AuditEntry {
                entry(.correct, target: "game/m1/\(game)", after: .object(["outcome": .string(outcome.rawValue), "prize": .null]), reason: "replay")
            }
            let day = Date()
            // 1: a won game; 2: a pause; 3: its correction to lost; 4: a correction of game 5, which comes after it.
            try site.send(Self.record("arcade-1", 1, outcome: .won, offered: day))
            try site.send(ChainAuditRecord(site: "arcade-1", epoch: "e1", seq: 2, audit: entry(.pause, target: "machine/m1")).payload)
            try site.send(ChainAuditRecord(site: "arcade-1", epoch: "e1", seq: 3, audit: correct("g-arcade-1-1", .lost)).payload)
            try site.send(ChainAuditRecord(site: "arcade-1", epoch: "e1", seq: 4, audit: correct("g-arcade-1-5", .won)).payload)
            try await eventually("arcade-1 up to 4") { site.acks.items.last == 4 }
            try site.send(Self.record("arcade-1", 5, outcome: .lost, offered: day))
            // Sent again: kept once. Another site's entry naming arcade-1: set aside, arcade-1's own untouched.
            try site.send(ChainAuditRecord(site: "arcade-1", epoch: "e1", seq: 2, audit: entry(.pause, target: "machine/m1")).payload)
            try other.send(ChainAuditRecord(site: "arcade-1", epoch: "e1", seq: 1, audit: entry(.resume, target: "machine/m9")).payload)
            // One the database must not take as it is: set aside, the records behind it go on.
            let long = entry(.pause, target: String(repeating: "t", count: 300))
            try other.send(ChainAuditRecord(site: "arcade-2", epoch: "e1", seq: 2, audit: long).payload)
            try other.send(ChainAuditRecord(site: "arcade-2", epoch: "e1", seq: 3, audit: entry(.stock, target: "machine/m2", reason: "delivery")).payload)
            try await eventually("both sites acknowledged") { site.acks.items.last == 5 && other.acks.items.last == 3 }

            #expect(try database.psql("SELECT count(*) FROM audit WHERE site = 'arcade-1'") == ["3"])
            #expect(try database.psql("SELECT site || ':' || seq FROM set_aside ORDER BY site, seq") == ["arcade-2:1", "arcade-2:2"])
            let answer = try await recorder.read("/v1/audit?site=arcade-1", token: Self.adminToken)
            #expect(answer.status == 200, "\(answer.body)")
            let entries = answer.json["entries"] as? [[String: Any]] ?? []
            #expect(entries.map { $0["action"] as? String } == ["correct", "correct", "pause"], "\(answer.body)")
            #expect(entries.allSatisfy { $0["site"] as? String == "arcade-1" && $0["operator"] as? String == "carol" })
            let others = try await recorder.read("/v1/audit?site=arcade-2", token: Self.adminToken).json["entries"] as? [[String: Any]]
            #expect(others?.map { $0["action"] as? String } == ["stock"], "arcade-2's own entry, the one set aside not")
            #expect(try await recorder.read("/v1/audit", token: Self.readToken).status == 401, "the trail is the admin's")
            #expect(try await recorder.read("/v1/audit?site=", token: Self.adminToken).status == 400)

            // The games: the machine's word kept, the correction beside it, before or after its game's record.
            let games = try await recorder.read("/v1/games?site=arcade-1").json["games"] as? [[String: Any]] ?? []
            let byID = Dictionary(uniqueKeysWithValues: games.compactMap { game in (game["id"] as? String).map { ($0, game) } })
            #expect(byID["g-arcade-1-1"]?["outcome"] as? String == "won")
            #expect((byID["g-arcade-1-1"]?["corrected"] as? [String: Any])?["outcome"] as? String == "lost")
            #expect((byID["g-arcade-1-1"]?["corrected"] as? [String: Any])?["by"] as? String == "carol")
            #expect((byID["g-arcade-1-5"]?["corrected"] as? [String: Any])?["outcome"] as? String == "won", "the correction came first")
            #expect(try database.psql("SELECT count(*) FROM game_corrections") == ["2"])
            let won = try await recorder.read("/v1/games?site=arcade-1&outcome=won").json["games"] as? [[String: Any]] ?? []
            #expect(won.compactMap { $0["id"] as? String } == ["g-arcade-1-5"], "the figures count the corrected outcome")
            // Each machine's odds, as corrected (SPEC §16): game 1 lost, game 5 won; a strong game won.
            var strong = Self.record("arcade-1", 6, outcome: .won, offered: day)
            strong.game.strong = true
            try site.send(strong)
            try await eventually("arcade-1 up to 6") { site.acks.items.last == 6 }
            let report = try await recorder.read("/v1/report/fairness?site=arcade-1&days=1")
            #expect(report.status == 200, "\(report.body)")
            let m1 = (report.json["machines"] as? [[String: Any]])?.first
            #expect(m1?["machine"] as? String == "m1" && m1?["games"] as? Int == 3 && m1?["wins"] as? Int == 2, "\(report.body)")
            #expect(m1?["strong_games"] as? Int == 1 && m1?["strong_wins"] as? Int == 1 && m1?["credits_taken"] as? Int == 0)
            #expect(m1?["payout"] is NSNull && m1?["prize_cost"] as? Int == 0, "\(report.body)")
            #expect(try await recorder.read("/v1/report/fairness?days=0").status == 400)

            // The database refuses to change the trail.
            #expect(throws: (any Error).self) { try database.psql("UPDATE audit SET operator = 'nobody' WHERE site = 'arcade-1'") }
        }
    }
}
