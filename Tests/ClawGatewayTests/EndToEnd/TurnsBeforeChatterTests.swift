import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// Throwaway accounts against a real player's turn (docs/SECURITY.md,
    /// "200 throwaway accounts delay real turns"): every account that joins
    /// makes position replies, and every turn change moves all of them; a slow
    /// IM API falls behind. A turn offer must not wait behind that chatter,
    /// and a player's positions coalesce to the latest.
    @Suite(.serialized) struct TurnsBeforeChatterTests {
        static let bots = (0..<200).map { String(format: "bot%03d", $0) }

        @Test func anOfferReachesTheIMAPIWithinASecondWhile200AccountsJoinBothMachines() async throws {
            try await E2ESite.with(game: "max_queue: 1000") { site in
                // 20 ms a call, 2 calls at a time (the site's reply_concurrency): 100 replies a second.
                site.netease.set(.slow(.milliseconds(20)))
                try await site.copy(from: "bob", #"{"command":6}"#)
                let bobs = try await site.offeredSession(to: "bob")
                try await site.copy(from: "bob", #"{"command":12,"data":"\#(bobs)"}"#)
                try await eventually("bob's game to start") { try await Self.machine(site, "m1")["state"] as? String == "playing" }
                try await site.copy(from: "alice", #"{"command":6}"#)

                // The accounts join m1 and m2 over 8 connections; halfway, bob grabs:
                // his result comes 100 ms later and the turn passes to alice.
                let base = site.base
                let joined = Recorder<String>()
                let grabbedAt = try await withThrowingTaskGroup(of: Void.self) { group in
                    for worker in 0..<8 {
                        group.addTask {
                            for bot in Self.bots.enumerated().filter({ $0.offset % 8 == worker }).map(\.element) {
                                for machine in ["claw_m1", "claw_m2"] {
                                    let body = NetEaseCopyBody.encode(from: bot, to: machine, attach: #"{"command":6}"#)
                                    let answer = try await HTTP.request(
                                        .POST, "\(base)/im/netease", headers: E2ESite.signedCopyHeaders(body), body: body)
                                    if answer.status == 200 { joined.append(bot) }
                                }
                            }
                        }
                    }
                    try await eventually("half the accounts to have joined") { joined.items.count >= 200 }
                    let grabbedAt = ContinuousClock.now
                    try await site.copy(from: "bob", #"{"command":2,"serial":1}"#)
                    try await group.waitForAll()
                    return grabbedAt
                }
                #expect(joined.items.count == 400)

                let offer = try await Self.firstCall(site, to: "alice") { $0.code == .turnOffer }
                #expect(offer.at - grabbedAt < .seconds(1), "alice's offer reached the IM API \(offer.at - grabbedAt) after bob's grab")
                let result = try await Self.firstCall(site, to: "bob") { $0.code == .result }
                #expect(result.at - grabbedAt < .seconds(1), "bob's result too")

                // Alice plays: nothing moves m1's queue any more. Each account's last
                // position from m1 is its place in that queue: what coalesced was the older.
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(offer.message.data ?? "")"}"#)
                let waiting = try #require(try await Self.machine(site, "m1")["waiting"] as? [[String: Any]]).compactMap { $0["accid"] as? String }
                #expect(Set(waiting) == Set(Self.bots))
                try await eventually("every account's last position from m1 to be its place", timeout: .seconds(30)) {
                    let last = Self.lastPositions(site, from: "claw_m1")
                    return waiting.enumerated().allSatisfy { last[$0.element] == String($0.offset + 1) }
                }
                let metrics = try PrometheusText(try await HTTP.get("\(site.base)/metrics").body)
                let coalesced = metrics.samples[#"claw_im_replies_total{provider="netease",result="coalesced"}"#] ?? 0
                #expect(coalesced > 0, "positions that were still waiting gave way to newer ones")
                #expect(metrics.samples[#"claw_im_replies_total{provider="netease",result="overflow"}"#] ?? 0 == 0)
            }
        }

        static func machine(_ site: E2ESite, _ id: String) async throws -> [String: Any] {
            try await HTTP.get("\(site.base)/v1/machines/\(id)").json
        }

        /// The first call to the IM API for `player` whose message matches.
        static func firstCall(
            _ site: E2ESite, to player: String, where match: @escaping (WireMessage) -> Bool
        ) async throws -> (at: ContinuousClock.Instant, message: WireMessage) {
            var found: (at: ContinuousClock.Instant, message: WireMessage)?
            try await eventually("a call to the IM API for \(player)", timeout: .seconds(30)) {
                found = site.netease.sent.items.lazy.filter { $0.to == player }
                    .compactMap { call in (try? WireMessage.decode(Array(call.attach.utf8))).map { (call.at, $0) } }
                    .first { match($0.1) }
                return found != nil
            }
            return try #require(found)
        }

        /// Each player's last position (command 8) from the machine's account, as the IM API got them.
        static func lastPositions(_ site: E2ESite, from account: String) -> [String: String] {
            var last: [String: String] = [:]
            for call in site.netease.sent.items where call.from == account {
                guard let message = try? WireMessage.decode(Array(call.attach.utf8)), message.code == .queuePosition else { continue }
                last[call.to] = message.data
            }
            return last
        }
    }
}
