import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension ChainSuites {
    /// A site of a chain takes copies from its inbox on the real cluster as it
    /// takes them over HTTP (SPEC §9): verified with its own secret, deduplicated
    /// by `msgidServer`, too old ones dropped, every handled one acknowledged
    /// with the answer the router passes on.
    @Suite struct ChainInboxTests {
        static func chainSection(_ cluster: NATSCluster) -> String {
            """
            chain:
              site: arcade-1
              bus: [\(cluster.mqttURLs.joined(separator: ", "))]
              username: site-arcade-1
              password: \(NATSCluster.passwords["site-arcade-1"] ?? "")
            """
        }

        /// A copy as the router publishes it: NetEase's headers, lower-case.
        static func copy(
            id: String, from player: String, to account: String = "claw_m1", _ attach: String, messageID: String = UUID().uuidString,
            received: Date = Date(), deadline: Date? = nil, tamper: (inout [String: String]) -> Void = { _ in }
        ) -> ChainCopy {
            let body = NetEaseCopyBody.encode(from: player, to: account, attach: attach, messageID: messageID)
            var headers = Dictionary(
                NetEaseCopyBody.headers(body: body, settings: E2ESite.neteaseSettings, now: Date()).map { ($0.0.lowercased(), $0.1) },
                uniquingKeysWith: { first, _ in first })
            tamper(&headers)
            return ChainCopy(id: id, provider: "netease", received: received, deadline: deadline, headers: headers, body: body)
        }

        @Test func copiesOnTheInboxArePlayedAcknowledgedDeduplicatedAndDroppedWhenStale() async throws {
            let cluster = try await NATSCluster.start()
            let site = try await E2ESite(extra: Self.chainSection(cluster))
            try await eventually("the site ready with its chain link", timeout: .seconds(30)) {
                (try? await HTTP.get("\(site.base)/readyz"))?.status == 200
            }
            let router = try await ChainTestClient(cluster.mqttURLs.reversed(), user: "router")
            #expect(try await router.subscribe(["claw/arcade-1/inbox/ack"]).refused.isEmpty)
            func publish(_ copy: ChainCopy) async throws {
                try await router.publish("claw/arcade-1/inbox", String(decoding: copy.payload, as: UTF8.self))
            }
            func receipt(_ id: String) async throws -> ChainReceipt? {
                let message = try await router.waitFor("claw/arcade-1/inbox/ack") { ChainReceipt.decode($0.payload)?.id == id }
                return message.flatMap { ChainReceipt.decode($0.payload) }
            }
            let pc = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/control"])

            // A whole turn through the inbox: join, accept, move.
            let join = Self.copy(id: "r-1", from: "alice", #"{"command":6,"data":"Alice"}"#, messageID: "msg-join")
            try await publish(join)
            #expect(try await receipt("r-1") == ChainReceipt(id: "r-1", status: 200, body: #"{"code":200}"#))
            let session = try await site.offeredSession(to: "alice")
            try await publish(Self.copy(id: "r-2", from: "alice", #"{"command":12,"data":"\#(session)"}"#))
            #expect(try await receipt("r-2")?.status == 200)
            try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":1001,"#) }
            try await publish(Self.copy(id: "r-3", from: "alice", #"{"command":1,"data":"left","serial":1}"#))
            #expect(try await receipt("r-3")?.status == 200)
            try await pc.waitFor("claw/m1/control") { $0.hasPrefix(#"{"command":1,"data":"left""#) }

            // The cluster delivers a copy twice, or the IM service sends it again:
            // answered, not played twice.
            var again = join
            again.id = "r-4"
            try await publish(again)
            #expect(try await receipt("r-4")?.status == 200)

            // Signed with another secret: the site's own check refuses it.
            try await publish(Self.copy(id: "r-5", from: "mallory", #"{"command":6}"#) { $0["checksum"] = String(repeating: "0", count: 40) })
            let refused = try #require(try await receipt("r-5"))
            #expect(refused.status == 401 && refused.body.contains("unauthorized"), "\(refused)")

            // Older than inbox_max_age (2 s): dropped, no receipt. The next copy's
            // receipt shows the stale one was read before it (one session, in order).
            try await publish(Self.copy(id: "r-6", from: "bob", #"{"command":6,"data":"Bob"}"#, received: Date().addingTimeInterval(-10)))
            // Fresh, but past the deadline its router set: the router has
            // answered 503 by now, so it must not play.
            try await publish(
                Self.copy(id: "r-6b", from: "erin", #"{"command":6,"data":"Erin"}"#, deadline: Date().addingTimeInterval(-0.5)))
            try await publish(Self.copy(id: "r-7", from: "carol", #"{"command":6,"data":"Carol"}"#))
            #expect(try await receipt("r-7")?.status == 200)
            #expect(!router.messages.contains { ["r-6", "r-6b"].contains(ChainReceipt.decode($0.payload)?.id) })

            // Not a copy at all: dropped.
            try await router.publish("claw/arcade-1/inbox", #"{"id":"r-8","provider":"netease"}"#)
            try await publish(Self.copy(id: "r-9", from: "dave", #"{"command":6,"data":"Dave"}"#))
            #expect(try await receipt("r-9")?.status == 200)

            let waiting = try await HTTP.get("\(site.base)/v1/machines/m1").json["waiting"] as? [[String: Any]] ?? []
            #expect(waiting.compactMap { $0["accid"] as? String } == ["carol", "dave"], "bob's stale join was never played")
            #expect(site.netease.attachments(to: "alice").filter { $0.contains(#""command":11"#) }.count == 1, "one offer for one join")
            #expect(site.netease.attachments(to: "bob").isEmpty && site.netease.attachments(to: "erin").isEmpty)
            #expect(site.netease.attachments(to: "mallory").isEmpty)

            let metrics = try await HTTP.get("\(site.base)/metrics").body
            #expect(metrics.contains(#"claw_chain_inbox_copies_total{result="handled"} 7"#), "\(metrics)")
            #expect(metrics.contains(#"claw_chain_inbox_copies_total{result="stale"} 2"#))
            #expect(metrics.contains(#"claw_chain_inbox_copies_total{result="malformed"} 1"#))
            #expect(metrics.contains("claw_chain_inbox_receipts_total 7"))
            #expect(metrics.contains(#"claw_notifications_total{provider="netease",result="duplicate"} 1"#))
            #expect(site.site.logText.contains("A copy reached the site after chain.inbox_max_age"))

            await pc.stop()
            await router.stop()
            await site.stop()
        }
    }
}
