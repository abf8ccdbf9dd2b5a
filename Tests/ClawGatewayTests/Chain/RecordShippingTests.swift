import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension ChainSuites {
    /// A site ships its finished games on its chain link (SPEC §10): each
    /// once it ended, again while the recorder has not acknowledged them,
    /// never again once it has, and again after the link comes back.
    @Suite struct RecordShippingTests {
        static func records(_ client: ChainTestClient) -> [ChainRecord] {
            client.messages.filter { $0.topic == "claw/arcade-1/records" }.compactMap { ChainRecord.decode($0.payload) }
        }

        /// One whole game of `player` on m1, through HTTP: the simulated PC wins it.
        static func play(_ site: E2ESite, _ player: String) async throws {
            try await site.copy(from: player, #"{"command":6,"data":"\#(player)"}"#)
            let session = try await site.offeredSession(to: player)
            try await site.copy(from: player, #"{"command":12,"data":"\#(session)"}"#)
            try await site.copy(from: player, #"{"command":2,"serial":1}"#)
            try await eventually("\(player)'s result") {
                site.netease.attachments(to: player).contains { $0.hasPrefix(#"{"command":4,"#) }
            }
        }

        @Test func gamesAreShippedResentUntilAcknowledgedAndAfterTheLinkComesBack() async throws {
            let cluster = try await NATSCluster.start()
            let site = try await E2ESite(
                extra: """
                    chain:
                      site: arcade-1
                      bus: [\(cluster.mqttURLs.joined(separator: ", "))]
                      username: site-arcade-1
                      password: \(NATSCluster.passwords["site-arcade-1"] ?? "")
                      resend_interval: 2s
                    """)
            let recorder = try await ChainTestClient(cluster.mqttURLs, user: "recorder")
            #expect(try await recorder.subscribe(["claw/+/records"]).refused.isEmpty)
            try await eventually("the site ready with its chain link", timeout: .seconds(30)) {
                (try? await HTTP.get("\(site.base)/readyz"))?.status == 200
            }

            try await Self.play(site, "alice")
            try await Self.play(site, "bob")
            try await eventually("both games shipped") { Set(Self.records(recorder).map(\.seq)) == [1, 2] }
            let shipped = Self.records(recorder)
            #expect(shipped.allSatisfy { $0.site == "arcade-1" })
            // What the site's own API says of the same games, field for field.
            let api = try await HTTP.get("\(site.base)/v1/machines/m1/games").body
            let local = try JSONDecoder().decode([String: [GameRecord]].self, from: Data(api.utf8))["games"] ?? []
            for record in shipped {
                #expect(local.contains(record.game), "\(record.game) is what the site holds")
            }
            #expect(shipped.first { $0.seq == 1 }?.game.player == "alice")
            #expect(shipped.first { $0.seq == 2 }?.game.outcome == .won)

            // No acknowledgement: sent again, in order, after resend_interval.
            try await eventually("a resend", timeout: .seconds(15)) {
                Self.records(recorder).filter { $0.seq == 1 }.count >= 2
            }
            let again = Self.records(recorder).map(\.seq)
            #expect(again == again.sorted() || again.count > 2, "resent in order")

            // Acknowledged: nothing more of 1 and 2, however long we watch
            // (three resend intervals, timed by the site's own heartbeats).
            let epoch = try #require(shipped.first?.epoch)
            try await recorder.publish("claw/arcade-1/records/ack", #"{"epoch":"\#(epoch)","upto":2}"#, retain: true)
            try await eventually("the site to take the acknowledgement") {
                (try? await HTTP.get("\(site.base)/metrics"))?.body.contains("claw_chain_records_acked 2") == true
            }
            let countAtAck = Self.records(recorder).count
            // The recorder's user may not read heartbeats; a router's may.
            let watch = try await ChainTestClient(cluster.mqttURLs, user: "router")
            #expect(try await watch.subscribe(["claw/arcade-1/gateway/heartbeat"]).refused.isEmpty)
            try await eventually("six heartbeats", timeout: .seconds(20)) {
                watch.payloads(on: "claw/arcade-1/gateway/heartbeat").count >= 6
            }
            await watch.stop()
            #expect(Self.records(recorder).count == countAtAck, "nothing acknowledged is sent again")

            // A third game, shipped once at once; the gateway killed before it
            // is acknowledged: after the restart it is sent again, 1 and 2 not.
            try await Self.play(site, "carol")
            try await eventually("game 3 shipped") { Self.records(recorder).contains { $0.seq == 3 } }
            site.killGateway()
            let beforeRestart = Self.records(recorder).count
            try site.startGateway()
            try await eventually("game 3 sent again after the restart", timeout: .seconds(30)) {
                Self.records(recorder).dropFirst(beforeRestart).contains { $0.seq == 3 }
            }
            #expect(!Self.records(recorder).dropFirst(beforeRestart).contains { $0.seq <= 2 })
            try await recorder.publish("claw/arcade-1/records/ack", #"{"epoch":"\#(epoch)","upto":3}"#, retain: true)
            try await eventually("everything acknowledged") {
                let metrics = (try? await HTTP.get("\(site.base)/metrics"))?.body ?? ""
                return metrics.contains("claw_chain_records_acked 3") && metrics.contains("claw_chain_records_pending 0")
            }
            await recorder.stop()
            await site.stop()
        }

        /// SPEC §10: a site whose SQLite file is restored from a backup, or
        /// replaced by a new one, ships its new games from 1 in a new epoch.
        /// Before, the recorder's acknowledgement of the old numbering made
        /// the site skip every new game up to the old number, silently.
        @Test func aRestoredOrReplacedFileShipsItsNewGamesInANewEpoch() async throws {
            let cluster = try await NATSCluster.start()
            let site = try await E2ESite(
                extra: """
                    chain:
                      site: arcade-1
                      bus: [\(cluster.mqttURLs.joined(separator: ", "))]
                      username: site-arcade-1
                      password: \(NATSCluster.passwords["site-arcade-1"] ?? "")
                    """)
            let recorder = try await ChainTestClient(cluster.mqttURLs, user: "recorder")
            #expect(try await recorder.subscribe(["claw/+/records"]).refused.isEmpty)
            func ready() async throws {
                try await eventually("the site ready with its chain link", timeout: .seconds(30)) {
                    (try? await HTTP.get("\(site.base)/readyz"))?.status == 200
                }
            }
            func acknowledge(_ record: ChainRecord) async throws {
                let ack = ChainRecordsAck(epoch: record.epoch, upto: record.seq)
                try await recorder.publish("claw/arcade-1/records/ack", String(decoding: ack.payload, as: UTF8.self), retain: true)
                try await eventually("the site to take the acknowledgement") {
                    (try? await HTTP.get("\(site.base)/metrics"))?.body.contains("claw_chain_records_acked \(record.seq)") == true
                }
            }
            func shipped(_ player: String) async throws -> ChainRecord {
                var found: ChainRecord?
                try await eventually("\(player)'s game shipped", timeout: .seconds(20)) {
                    found = Self.records(recorder).first { $0.game.player == player }
                    return found != nil
                }
                return try #require(found)
            }
            func stopGateway() async throws {
                let gateway = try #require(site.gateway)
                gateway.signal(SIGTERM)
                #expect(await gateway.wait(timeout: 15) == 0)
            }
            let file = site.site.database
            let backup = site.site.directory.appendingPathComponent("backup.sqlite")

            try await ready()
            try await Self.play(site, "alice")
            let first = try await shipped("alice")
            #expect(first.seq == 1 && !first.epoch.isEmpty)
            try await acknowledge(first)
            try await stopGateway()
            try FileManager.default.copyItem(at: file, to: backup)

            try site.startGateway()
            try await ready()
            try await Self.play(site, "bob")
            let second = try await shipped("bob")
            #expect(second.epoch == first.epoch && second.seq == 2)
            try await acknowledge(second)
            try await stopGateway()

            // The backup of after alice's game is put back: the chain holds game 2 of that epoch, the file does not.
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: file.path + suffix) }
            try FileManager.default.copyItem(at: backup, to: file)
            try site.startGateway()
            try await ready()
            try await Self.play(site, "carol")
            let restored = try await shipped("carol")
            #expect(restored.epoch != first.epoch && restored.seq == 1, "\(restored.epoch) \(restored.seq)")
            try await stopGateway()

            // The file is lost: a new one, a new epoch, from 1, though the acknowledgement on the cluster is the old one's.
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: file.path + suffix) }
            try site.startGateway()
            try await ready()
            try await Self.play(site, "dave")
            let fresh = try await shipped("dave")
            #expect(fresh.epoch != first.epoch && fresh.epoch != restored.epoch && fresh.seq == 1)
            await recorder.stop()
            await site.stop()
        }
    }
}
