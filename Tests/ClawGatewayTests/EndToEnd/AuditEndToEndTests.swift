import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// An accountable arcade (SPEC §16) on a real `claw-gateway run`,
    /// mosquitto and `claw-gateway simulate` (every grab wins): operators by
    /// name, every admin change in the audit trail with its operator, address
    /// and reason, corrected results moving the prize and the stock, and the
    /// odds shown.
    @Suite(.serialized) struct AuditEndToEndTests {
        static let adminToken = "audit-admin-token-0123"
        static let readToken = "audit-read-token-01234"
        static let carolsToken = "carol-operator-token-0123"
        static let viewersToken = "viewer-operator-token-012"
        static let carol = [("Authorization", "Bearer \(carolsToken)"), ("Content-Type", "application/json")]

        static func post(_ site: E2ESite, _ path: String, _ json: String?, headers: [(String, String)] = carol) async throws -> HTTP.Answer {
            try await HTTP.request(.POST, "\(site.base)\(path)", headers: headers, body: json.map { Array($0.utf8) })
        }

        static func audit(_ site: E2ESite, _ query: String = "") async throws -> [[String: Any]] {
            let answer = try await HTTP.request(.GET, "\(site.base)/v1/audit\(query)", headers: carol)
            #expect(answer.status == 200, "\(answer.body)")
            return answer.json["entries"] as? [[String: Any]] ?? []
        }

        static func machine(_ site: E2ESite) async throws -> [String: Any] {
            try await HTTP.get("\(site.base)/v1/machines/m1", bearer: readToken).json
        }

        static func prizes(_ site: E2ESite, _ player: String) async throws -> [[String: Any]] {
            try await PrizesEndToEndTests.prizes(site, player, token: readToken)
        }

        static func stock(_ site: E2ESite) async throws -> Int? {
            try await HTTP.get("\(site.base)/v1/machines/m1/stock", bearer: readToken).json["stock"] as? Int
        }

        @Test func operatorsByNameAnAuditTrailCorrectedResultsAndTheOddsShown() async throws {
            let site = try await E2ESite(
                game: "settings: { guarantee_after: 3 }", adminToken: Self.adminToken, readToken: Self.readToken,
                extra: """
                    prizes: { low_at: 0, forget_address: 30d }
                    operators:
                      - { name: carol, token: \(Self.carolsToken), role: admin }
                      - { name: viewer, token: \(Self.viewersToken), role: read }
                    """,
                machineExtra: #"prize: { id: plush, name: "Plush 20 cm", cost: 4, exchange: 0 }"#)
            do {
                try await run(site)
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }

        private func run(_ site: E2ESite) async throws {
            // Operators by name: the viewer reads and changes nothing; no token reads nothing.
            #expect(try await HTTP.get("\(site.base)/v1/machines", bearer: Self.viewersToken).status == 200)
            #expect(try await HTTP.get("\(site.base)/v1/machines").status == 401, "a read operator closes the read API")
            let viewerPause = try await Self.post(site, "/v1/machines/m1/pause", nil, headers: [("Authorization", "Bearer \(Self.viewersToken)")])
            #expect(viewerPause.status == 401, "\(viewerPause.body)")
            #expect(try await HTTP.get("\(site.base)/v1/audit", bearer: Self.viewersToken).status == 401, "the trail is the admin's")
            #expect(try await HTTP.get("\(site.base)/v1/audit", bearer: Self.readToken).status == 401)
            #expect(try await Self.audit(site).isEmpty, "refused requests are no entries")

            // The odds: three games to the full-power grab.
            #expect(try await Self.machine(site)["plays_until_guarantee"] as? Int == 3)

            // Every admin change, by carol, in the trail; refusals are not.
            #expect(try await Self.post(site, "/v1/machines/m1/stock", #"{"set":5}"#).status == 422, "stock needs its reason")
            #expect(try await Self.post(site, "/v1/machines/m1/maintenance", #"{"on":true}"#).status == 422)
            #expect(try await Self.post(site, "/v1/machines/m1/stock", #"{"set":5,"reason":"opening"}"#).status == 200)
            #expect(try await Self.post(site, "/v1/machines/m1/pause", nil).status == 200)
            #expect(try await Self.post(site, "/v1/machines/m1/resume", nil).status == 200)
            #expect(try await Self.post(site, "/v1/machines/m1/maintenance", #"{"on":true,"reason":"glass cleaning"}"#).status == 200)
            #expect(try await Self.post(site, "/v1/machines/m1/maintenance", #"{"on":false}"#).status == 200)
            let entries = try await Self.audit(site)
            #expect(entries.map { $0["action"] as? String } == ["maintenance", "maintenance", "resume", "pause", "stock"], "\(entries)")
            #expect(entries.allSatisfy { $0["operator"] as? String == "carol" && $0["address"] as? String == "127.0.0.1" })
            #expect(entries.map { $0["target"] as? String } == Array(repeating: "machine/m1", count: 5))
            #expect(entries[1]["reason"] as? String == "glass cleaning" && entries[4]["reason"] as? String == "opening")
            #expect((entries[3]["before"] as? [String: Any])?["paused"] as? Bool == false)
            #expect((entries[3]["after"] as? [String: Any])?["paused"] as? Bool == true)
            let seqs = entries.compactMap { $0["seq"] as? Int }
            #expect(seqs == seqs.sorted(by: >) && Set(seqs).count == 5, "newest first: \(seqs)")
            // The shared admin token acts as the operator `admin`.
            let adminPause = try await Self.post(site, "/v1/machines/m2/pause", nil, headers: [("Authorization", "Bearer \(Self.adminToken)")])
            #expect(adminPause.status == 200)
            #expect(try await Self.audit(site, "?operator=admin").map { $0["target"] as? String } == ["machine/m2"])

            // A game: alice wins; the odds restart from a win.
            let alices = try await PrizesEndToEndTests.win(site, "alice")
            let session = String(alices.dropFirst(2))
            #expect(try await Self.machine(site)["plays_until_guarantee"] as? Int == 3)
            #expect(try await Self.stock(site) == 4)

            // Corrections: refused ones change nothing and are no entries.
            let correct = "/v1/machines/m1/games/\(session)/correct"
            #expect(try await Self.post(site, correct, #"{"outcome":"lost"}"#).status == 422, "a reason is required")
            #expect(try await Self.post(site, correct, #"{"outcome":"lost","reason":""}"#).status == 422)
            #expect(try await Self.post(site, correct, #"{"outcome":"draw","reason":"x"}"#).status == 422)
            #expect(try await Self.post(site, correct, #"{"outcome":"won","reason":"x"}"#).json["code"] as? String == "no_change")
            #expect(try await Self.post(site, "/v1/machines/m1/games/nope/correct", #"{"outcome":"lost","reason":"x"}"#).status == 404)
            #expect(try await Self.post(site, correct, #"{"outcome":"lost","reason":"x"}"#, headers: []).status == 401)
            #expect(try await Self.audit(site, "?action=correct").isEmpty)

            // The replay shows the claw dropped it before the chute: the win is taken back.
            let lost = try await Self.post(site, correct, #"{"outcome":"lost","reason":"replay: dropped before the chute"}"#)
            #expect(lost.status == 200, "\(lost.body)")
            #expect(lost.json["outcome"] as? String == "won", "the machine's word is kept")
            let corrected = lost.json["corrected"] as? [String: Any]
            #expect(corrected?["outcome"] as? String == "lost" && corrected?["by"] as? String == "carol", "\(lost.body)")
            #expect(corrected?["reason"] as? String == "replay: dropped before the chute")
            try await eventually("alice told the corrected result and the prize voided") {
                let results = PrizesEndToEndTests.told(site, "alice", command: 4)
                return results.contains { $0["corrected"] as? Bool == true && $0["data"] as? String == "false" }
                    && PrizesEndToEndTests.told(site, "alice").contains { $0["data"] as? String == alices && $0["state"] as? String == "voided" }
            }
            let prizes = try await Self.prizes(site, "alice")
            #expect(prizes.first?["state"] as? String == "voided", "\(prizes)")
            #expect(try await Self.stock(site) == 5, "the prize back in the machine")
            let games = try await HTTP.get("\(site.base)/v1/machines/m1/games", bearer: Self.readToken).json["games"] as? [[String: Any]]
            #expect((games?.first?["corrected"] as? [String: Any])?["outcome"] as? String == "lost", "\(games ?? [])")

            // Corrected twice: back to a win, the prize held again; both corrections in the trail.
            #expect(try await Self.post(site, correct, #"{"outcome":"lost","reason":"again"}"#).json["code"] as? String == "no_change")
            let won = try await Self.post(site, correct, #"{"outcome":"won","reason":"second camera: it dropped in"}"#)
            #expect((won.json["corrected"] as? [String: Any])?["outcome"] as? String == "won", "\(won.body)")
            #expect(try await Self.prizes(site, "alice").first?["state"] as? String == "held")
            #expect(try await Self.stock(site) == 4)
            let corrections = try await Self.audit(site, "?action=correct")
            #expect(corrections.count == 2 && corrections.allSatisfy { $0["target"] as? String == "game/m1/\(session)" })
            #expect((corrections[0]["before"] as? [String: Any])?["outcome"] as? String == "lost")
            #expect((corrections[0]["after"] as? [String: Any])?["prize"] as? String == "held")

            // Once the prize has left the player's hands, the win stays.
            let ship = try await Self.post(
                site, "/v1/players/netease/alice/prizes/ship", #"{"prizes":["\#(alices)"],"address":\#(PrizesEndToEndTests.address)}"#)
            #expect(ship.status == 200, "\(ship.body)")
            let gone = try await Self.post(site, correct, #"{"outcome":"lost","reason":"late review"}"#)
            #expect(gone.status == 409 && gone.json["code"] as? String == "prize_gone", "\(gone.body)")
            #expect(try await Self.audit(site, "?action=correct").count == 2, "a refused correction is no entry")
            #expect(try await Self.audit(site, "?action=ship").first?["target"] as? String == "player/netease/alice")

            // The machine's odds over today: one game, won as corrected, its prize's cost; games are free here.
            let fairness = try await HTTP.get("\(site.base)/v1/machines/m1/fairness", bearer: Self.readToken)
            #expect(fairness.status == 200, "\(fairness.body)")
            #expect(fairness.json["games"] as? Int == 1 && fairness.json["wins"] as? Int == 1 && fairness.json["win_rate"] as? Double == 1)
            #expect(fairness.json["prize_cost"] as? Int == 4 && fairness.json["credits_taken"] is NSNull && fairness.json["payout"] is NSNull)
            #expect(fairness.json["strong_games"] as? Int == 0, "\(fairness.body)")
            #expect(try await HTTP.get("\(site.base)/v1/machines/m1/fairness").status == 401)
            #expect(try await HTTP.get("\(site.base)/v1/machines/m1/fairness?from=tomorrow", bearer: Self.readToken).status == 400)
            let empty = try await HTTP.get("\(site.base)/v1/machines/m1/fairness?from=2001-01-01&to=2001-01-02", bearer: Self.readToken)
            #expect(empty.json["games"] as? Int == 0 && empty.json["win_rate"] is NSNull, "\(empty.body)")

            // The trail's filters and pages.
            #expect(try await Self.audit(site, "?limit=2").count == 2)
            #expect(try await Self.audit(site, "?target=machine/m2").count == 1)
            #expect(try await Self.audit(site, "?since=2999-01-01T00:00:00Z").isEmpty)
            #expect(try await Self.audit(site, "?since=2000-01-01T00:00:00Z").count == (try await Self.audit(site, "?limit=500")).count)
            for bad in ["?action=dance", "?limit=0", "?since=yesterday", "?colour=red"] {
                #expect(try await HTTP.request(.GET, "\(site.base)/v1/audit\(bad)", headers: Self.carol).status == 400, "\(bad)")
            }
        }
    }
}
