import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// Continue (SPEC §3) on a real `claw-gateway run`, mosquitto and
    /// `claw-gateway simulate` (every grab wins): the player who just won is
    /// offered the machine again before the queue, takes it, and the offer
    /// survives a `kill -9` as a continue; declined, the turn passes on.
    @Suite(.serialized) struct ContinueEndToEndTests {
        /// The turn offers (11) `player` was sent, as the fake NetEase API got them.
        static func offers(_ site: E2ESite, to player: String) -> [String] {
            site.netease.attachments(to: player).filter { $0.hasPrefix(#"{"command":11,"#) }
        }

        @Test func theWinnerIsOfferedTheMachineAgainFirstAndTheOfferSurvivesARestart() async throws {
            try await E2ESite.with(game: "continue: 20s\nmax_continues: 2") { site in
                #expect(try await site.copy(from: "alice", #"{"command":6,"data":"Alice"}"#).status == 200)
                let first = try await site.offeredSession(to: "alice")
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(first)"}"#)
                try await site.copy(from: "bob", #"{"command":6,"data":"Bob"}"#)
                try await site.copy(from: "alice", #"{"command":2,"serial":1}"#)
                try await eventually("alice offered a continue after her win") {
                    Self.offers(site, to: "alice").contains { $0.contains(#""continue":true"#) }
                }
                let offer = try #require(Self.offers(site, to: "alice").last)
                #expect(offer.contains(#""timeout":20"#), "the continue timer: \(offer)")
                let machine = try await HTTP.get("\(site.base)/v1/machines/m1").json
                let player = try #require(machine["player"] as? [String: Any])
                #expect(player["accid"] as? String == "alice" && player["continue"] as? Bool == true)
                let continued = try #require(player["session"] as? String)
                #expect(continued != first, "a new session")
                #expect((machine["waiting"] as? [[String: Any]])?.map { $0["accid"] as? String } == ["bob"], "bob keeps his place")
                #expect(Self.offers(site, to: "bob").isEmpty)

                // A restart during the offer: it comes back as the continue it was.
                site.killGateway()
                try site.startGateway()
                try await eventually("alice offered her continue again after the restart") {
                    Self.offers(site, to: "alice").filter { $0.contains(continued) && $0.contains(#""continue":true"#) }.count == 2
                }
                try await eventually("m1 online again") { (try? await HTTP.get("\(site.base)/v1/machines/m1"))?.json["online"] as? Bool == true }
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(continued)"}"#)
                try await eventually("alice's continue started") {
                    site.netease.attachments(to: "alice").contains { $0.hasPrefix(#"{"command":8,"data":"0""#) }
                }
                try await site.copy(from: "alice", #"{"command":2,"serial":2}"#)
                try await eventually("alice's second game won and a second continue offered", timeout: .seconds(20)) {
                    Self.offers(site, to: "alice").filter { $0.contains(#""continue":true"#) }.count == 3
                }
                let third = try await HTTP.get("\(site.base)/v1/machines/m1").json["player"] as? [String: Any]
                let session = try #require(third?["session"] as? String)
                try await site.copy(from: "alice", #"{"command":13,"data":"\#(session)"}"#)
                try await eventually("bob offered the turn once alice declined") { !Self.offers(site, to: "bob").isEmpty }
                #expect(!(Self.offers(site, to: "bob").last ?? "").contains("continue"))
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games").json["games"] as? [[String: Any]] ?? []
                #expect(games.filter { $0["player"] as? String == "alice" }.compactMap { $0["outcome"] as? String }.sorted() == ["declined", "won", "won"])
            }
        }
    }
}
