import Foundation
import Logging
import Protocol
import Synchronization
import Testing

@testable import ClawGateway

/// `recorder.yaml`: every problem named by its key.
@Suite struct RecorderConfigTests {
    @Test func aValidFileIsReadWithItsDefaults() throws {
        let config = try RecorderConfig.parse(
            """
            recorder:
              database: postgres://recorder:p%40ss@db.example.com/claw_chain
              read_token: read-token-of-16-bytes
            bus:
              urls: [mqtt://127.0.0.1:1883, mqtt://127.0.0.1:1884]
              username: recorder

            """)
        #expect(config.recorder.http.host == "127.0.0.1" && config.recorder.http.port == 8090)
        #expect(
            config.recorder.database
                == DatabaseURL(host: "db.example.com", port: 5432, username: "recorder", password: "p@ss", database: "claw_chain"))
        #expect(config.recorder.database.description == "postgres://recorder@db.example.com:5432/claw_chain")
        #expect(config.recorder.http.readToken == "read-token-of-16-bytes")
        #expect(config.bus.urls.map(\.port) == [1883, 1884])
        // The same after a restart: the cluster keeps the recorder's session under it.
        #expect(config.bus.clientID == RecorderConfig.defaultClientID())
        #expect(RecorderConfig.defaultClientID(host: "Rec.Example.com") == "claw-recorder-rec-example-com")
        #expect(config.bus.topicPrefix == "claw")
    }

    @Test(arguments: [
        ("bus: { urls: [mqtt://x:1] }\n", "recorder", "is required"),
        ("recorder: { listen: 127.0.0.1:1 }\nbus: { urls: [mqtt://x:1] }\n", "recorder.database", "is required"),
        ("recorder: { database: mysql://u@h/d }\nbus: { urls: [mqtt://x:1] }\n", "recorder.database", "postgres://"),
        ("recorder: { database: postgres://h/d }\nbus: { urls: [mqtt://x:1] }\n", "recorder.database", "no user"),
        ("recorder: { database: postgres://u@h }\nbus: { urls: [mqtt://x:1] }\n", "recorder.database", "no database"),
        ("recorder: { database: postgres://u@h/d?sslmode=maybe }\nbus: { urls: [mqtt://x:1] }\n", "recorder.database", "sslmode"),
        ("recorder: { database: postgres://u@h/d, read_token: short }\nbus: { urls: [mqtt://x:1] }\n", "recorder.read_token", "16"),
        ("recorder: { database: postgres://u@h/d, databse: x }\nbus: { urls: [mqtt://x:1] }\n", "recorder.databse", "did you mean database"),
        ("recorder: { database: postgres://u@h/d }\n", "bus", "is required"),
        ("recorder: { database: postgres://u@h/d }\nbus: { urls: [http://x:1] }\n", "bus.urls[0]", "mqtt://"),
        ("recorder: { database: postgres://u@h/d }\nbus: { urls: [mqtt://x:1], client_id: a.b }\n", "bus.client_id", "'.'"),
        ("recorder: { database: postgres://u@h/d }\nbus: { urls: [mqtt://x:1] }\nim: {}\n", "im", "unknown key"),
        ("recorder: { database: postgres://u@h/d }\nbus: { urls: [mqtt://x:1] }\ncredits: { max_topup: 5 }\n", "credits.topup_secret", "is required"),
        ("recorder: { database: postgres://u@h/d }\nbus: { urls: [mqtt://x:1] }\ncredits: { topup_secret: 0123456789abcdef, price: 2 }\n", "credits.price", "unknown key"),
        // SPEC §11: the chain's wallets are never open.
        ("recorder: { database: postgres://u@h/d }\nbus: { urls: [mqtt://x:1] }\ncredits: { topup_secret: 0123456789abcdef }\n", "recorder.read_token",
         "is required with credits: (the chain's wallets); without it they are open to anyone who reaches the port"),
    ])
    func aBadKeyIsNamed(yaml: String, path: String, message: String) throws {
        let error = try #require(throws: ConfigError.self) { try RecorderConfig.parse(yaml) }
        #expect(
            error.problems.contains { $0.path == path && $0.message.contains(message) },
            "\(error.problems.map(\.description))")
    }

    @Test func aPasswordIsNeverShownInAProblem() throws {
        let error = try #require(throws: ConfigError.self) {
            try RecorderConfig.parse("recorder: { database: \"mysql://u:secret@h/d\" }\nbus: { urls: [mqtt://x:1] }\n")
        }
        #expect(!error.description.contains("secret"))
    }
}

extension DatabaseSuites {
    /// `claw-gateway record` as a child process against a real mosquitto (the
    /// bus) and a real PostgreSQL 15, with fake sites publishing records.
    @Suite struct RecorderTests {
        static let readToken = "recorder-read-token-0123"
        static let adminToken = "recorder-admin-token-0123"

        /// A site as the recorder sees it: records out, acknowledgements in.
        final class FakeSite: Sendable {
            let name: String
            let client: MQTTClient
            let topics: ChainTopics
            /// Every `upto` acknowledged to this site, in order, and with its epoch.
            let acks = Recorder<Int64>()
            let epochAcks = Recorder<ChainRecordsAck>()
            private let subscribed = Recorder<MQTTSubscribeAck>()

            init(broker: MosquittoBroker, name: String, clientID: String? = nil) async throws {
                self.name = name
                topics = ChainTopics(prefix: "claw", site: name)
                var configuration = MQTTClientConfiguration(host: "127.0.0.1", port: broker.port, clientID: clientID ?? "claw-site-\(name)")
                configuration.protocolVersion = .v311
                client = try MQTTClient(configuration: configuration, logger: Logger(label: "fake-site"))
                let acks = acks, epochAcks = epochAcks, subscribed = subscribed, topics = topics
                client.onSubscribeAck { subscribed.append($0) }
                client.onMessage { message in
                    guard message.topic == topics.recordsAck, let ack = ChainRecordsAck.decode(message.payload) else { return }
                    acks.append(ack.upto)
                    epochAcks.append(ack)
                }
                client.subscribe([topics.recordsAck], qos: .atLeastOnce)
                client.start()
                try await eventually("site \(name) to subscribe to its acknowledgements") { !subscribed.items.isEmpty }
            }

            func send(_ record: ChainRecord) throws {
                try send(record.payload)
            }

            func send(_ payload: [UInt8]) throws {
                try client.publish(topics.records, payload: payload, qos: .atLeastOnce, retain: false)
            }

            /// Waits for the next acknowledgement after `count` of them, and returns it.
            func ack(after count: Int, timeout: Duration = .seconds(10)) async throws -> Int64 {
                try await eventually("acknowledgement \(count + 1) for \(name)", timeout: timeout) { acks.items.count > count }
                return acks.items[count]
            }

            func stop() async {
                await client.shutdown()
            }
        }

        /// `claw-gateway record` in its own process.
        final class RecorderProcess {
            let port: Int
            let folder: URL
            private var process: ChildProcess?

            var base: String { "http://127.0.0.1:\(port)" }
            var log: String { (try? String(contentsOf: folder.appendingPathComponent("recorder.log"), encoding: .utf8)) ?? "" }

            init(broker: MosquittoBroker, database: PostgresServer, clientID: String = "claw-recorder-test") async throws {
                port = try FreePort.next()
                folder = try TemporaryDirectory.make(prefix: "recorder")
                let config = folder.appendingPathComponent("recorder.yaml")
                try """
                    recorder:
                      listen: 127.0.0.1:\(port)
                      database: \(database.url)
                      read_token: \(RecorderTests.readToken)
                      admin_token: \(RecorderTests.adminToken)
                      log_level: debug
                    bus:
                      urls: [\(broker.url)]
                      username: recorder
                      client_id: \(clientID)
                    credits:
                      topup_secret: \(HeavySuites.CreditsEndToEndTests.secret)
                      max_topup: 100

                    """.write(to: config, atomically: true, encoding: .utf8)
                process = try GatewayBinary.start(["record", "--config", config.path], log: folder.appendingPathComponent("recorder.log"))
                do {
                    try await eventually("the recorder to be ready", timeout: .seconds(30)) {
                        (try? await HTTP.get("\(self.base)/readyz"))?.status == 200
                    }
                } catch {
                    print("recorder log:\n\(log)")
                    throw error
                }
            }

            func read(_ path: String, token: String? = RecorderTests.readToken) async throws -> HTTP.Answer {
                try await HTTP.request(.GET, "\(base)\(path)", headers: token.map { [("Authorization", "Bearer \($0)")] } ?? [])
            }

            func metric(_ series: String) async throws -> Double {
                try PrometheusText(try await read("/metrics").body).samples[series] ?? -1
            }

            func records(_ result: String) async throws -> Double {
                try await metric(#"claw_recorder_records_total{result="\#(result)"}"#)
            }

            /// SIGTERM, and waits for the process to end: its exit status,
            /// nil when it had to be killed after 15 s (or was stopped before).
            @discardableResult
            func stop() async -> Int32? {
                guard let process else { return nil }
                self.process = nil
                process.signal(SIGTERM)
                if let status = await process.wait(timeout: 15) { return status }
                process.signal(SIGKILL)
                process.wait()
                return nil
            }

            /// SIGKILL: no goodbye to the cluster or the database.
            func kill() {
                guard let process else { return }
                self.process = nil
                process.signal(SIGKILL)
                process.wait()
            }

            deinit {
                process?.signal(SIGKILL)
                try? FileManager.default.removeItem(at: folder)
            }
        }

        /// A broker, PostgreSQL, a recorder (ready) and the sites named; all
        /// stopped afterwards, also when `body` throws.
        static func with(
            sites names: [String] = ["arcade-1"],
            _ body: (RecorderProcess, [FakeSite], PostgresServer, MosquittoBroker) async throws -> Void
        ) async throws {
            let broker = try MosquittoBroker.start()
            let database = try PostgresServer.start()
            let recorder = try await RecorderProcess(broker: broker, database: database)
            var sites: [FakeSite] = []
            do {
                for name in names { sites.append(try await FakeSite(broker: broker, name: name)) }
                try await body(recorder, sites, database, broker)
            } catch {
                print("recorder log:\n\(recorder.log)")
                await stopAll(recorder, sites, database, broker)
                throw error
            }
            await stopAll(recorder, sites, database, broker)
        }

        private static func stopAll(_ recorder: RecorderProcess, _ sites: [FakeSite], _ database: PostgresServer, _ broker: MosquittoBroker) async {
            await recorder.stop()
            for site in sites { await site.stop() }
            database.stop()
            broker.stop()
        }

        static func record(
            _ site: String, _ seq: Int64, epoch: String = "e1", id: String? = nil, machine: String = "m1", player: String = "alice",
            outcome: GameOutcome? = .lost, offered: Date = Date(), started: Bool = true
        ) -> ChainRecord {
            ChainRecord(
                site: site, epoch: epoch, seq: seq,
                game: GameRecord(
                    id: id ?? "g-\(site)-\(seq)", machine: machine, player: player, provider: "netease", nick: "Nick of \(player)",
                    outcome: outcome, offeredAt: Timestamp.string(offered),
                    startedAt: started ? Timestamp.string(offered.addingTimeInterval(2)) : nil,
                    endedAt: outcome == nil ? nil : Timestamp.string(offered.addingTimeInterval(30)), commands: started ? 7 : 0))
        }

        @Test func aRecordIsWrittenOnceHoweverOftenSentAndUptoCoversOnlyWhatIsContiguous() async throws {
            try await Self.with { recorder, sites, database, broker in
                let site = sites[0]
                var expected: [Int64] = []
                // 1, 2, 2 (again), 3, then 5 before 4.
                for (seq, upto) in [(1, 1), (2, 2), (2, 2), (3, 3), (5, 3), (4, 5)] as [(Int64, Int64)] {
                    try site.send(Self.record("arcade-1", seq))
                    let ack = try await site.ack(after: expected.count)
                    expected.append(upto)
                    #expect(ack == upto, "after seq \(seq): \(site.acks.items)")
                }
                #expect(site.acks.items == expected)
                let rows = try database.psql("SELECT seq, id FROM games WHERE site = 'arcade-1' ORDER BY seq")
                #expect(rows == (1...5).map { "\($0)|g-arcade-1-\($0)" })
                #expect(try database.psql("SELECT epoch, upto FROM sites_progress WHERE site = 'arcade-1'") == ["e1|5"])
                #expect(site.epochAcks.items.allSatisfy { $0.epoch == "e1" })
                #expect(try await recorder.records("written") == 5)
                #expect(try await recorder.records("duplicate") == 1)
                // The acknowledgement is retained: the site's link, connecting again, gets it at once.
                let again = try await FakeSite(broker: broker, name: "arcade-1", clientID: "claw-site-arcade-1-again")
                #expect(try await again.ack(after: 0) == 5)
                await again.stop()
                // SIGTERM stops it gracefully.
                #expect(await recorder.stop() == 0)
            }
        }

        @Test func theAcknowledgementComesOnlyAfterCommitAndPostgreSQLDownLosesNothing() async throws {
            try await Self.with { recorder, sites, database, _ in
                let site = sites[0]
                try site.send(Self.record("arcade-1", 1))
                #expect(try await site.ack(after: 0) == 1)

                database.stop()
                try await eventually("readyz to say the database is down", timeout: .seconds(15)) {
                    let answer = try? await HTTP.get("\(recorder.base)/readyz")
                    return answer?.status == 503 && answer?.body.contains("database") == true
                }
                #expect(try await recorder.metric("claw_recorder_database_up") == 0)
                try site.send(Self.record("arcade-1", 2))
                try await eventually("the recorder to try to write record 2", timeout: .seconds(15)) {
                    try await recorder.metric("claw_recorder_write_failures_total") >= 1
                }
                // Tried, not written: nothing acknowledged.
                #expect(site.acks.items == [1])

                try database.start()
                // The recorder's own retry (1 s doubling to 10 s) writes it; the site's resend finds it there.
                #expect(try await site.ack(after: 1, timeout: .seconds(30)) == 2)
                try site.send(Self.record("arcade-1", 2))
                #expect(try await site.ack(after: 2) == 2)
                #expect(try database.psql("SELECT count(*) FROM games WHERE site = 'arcade-1' AND seq = 2") == ["1"])
                try await eventually("readyz to be ready again", timeout: .seconds(15)) {
                    (try? await HTTP.get("\(recorder.base)/readyz"))?.status == 200
                }
                #expect(try await recorder.metric("claw_recorder_database_up") == 1)
                #expect(try await recorder.records("written") == 2)
                #expect(try await recorder.records("duplicate") == 1)
            }
        }

        @Test func aRecorderKilledAndStartedAgainGetsWhatWasPublishedMeanwhileFromItsSession() async throws {
            try await Self.with { recorder, sites, database, broker in
                let site = sites[0]
                try site.send(Self.record("arcade-1", 1))
                #expect(try await site.ack(after: 0) == 1)
                recorder.kill()
                // Published while no recorder runs: the cluster keeps them for its session (clean session false).
                for seq in 2...4 as ClosedRange<Int64> { try site.send(Self.record("arcade-1", seq)) }
                let again = try await RecorderProcess(broker: broker, database: database)
                try await eventually("the records published meanwhile to be acknowledged, without a resend") { site.acks.items.last == 4 }
                #expect(try database.psql("SELECT count(*) FROM games") == ["4"])
                #expect(await again.stop() == 0)
            }
        }

        /// SPEC §10: a record the database refuses for what it holds is set
        /// aside, counted and shown, and never stops the records behind it;
        /// every field has a length limit. Before, a 4 KB player (too long
        /// for PostgreSQL's index row) was taken for an outage and retried
        /// for ever while every record behind it waited.
        @Test func recordsTheDatabaseCannotHoldAreSetAsideAndTheOnesBehindThemGoOn() async throws {
            try await Self.with { recorder, sites, database, _ in
                let site = sites[0]
                try site.send(Self.record("arcade-1", 1))
                #expect(try await site.ack(after: 0) == 1)
                try site.send(Self.record("arcade-1", 2, player: String(repeating: "p", count: 4096)))
                var nul = Self.record("arcade-1", 3, id: "g-nul")
                nul.game.nick = "a\u{0}b"
                try site.send(nul)
                var badTime = Self.record("arcade-1", 4, id: "g-bad-time")
                badTime.game.offeredAt = "yesterday"
                try site.send(badTime)
                // Published on arcade-1's topic under arcade-2's name.
                try site.send(Self.record("arcade-2", 5))
                try site.send(Array(#"{"site":"arcade-1","epoch":"e1","seq":6}"#.utf8))
                try site.send(Array("not a record".utf8))
                try site.send(Self.record("arcade-1", 7))
                try await eventually("record 7 acknowledged", timeout: .seconds(20)) { site.acks.items.last == 7 }
                #expect(try database.psql("SELECT seq, id FROM games ORDER BY seq") == ["1|g-arcade-1-1", "7|g-arcade-1-7"])
                let aside = try database.psql("SELECT seq FROM set_aside WHERE site = 'arcade-1' AND epoch = 'e1' ORDER BY seq")
                #expect(aside == ["2", "3", "4", "5", "6"])
                #expect(try await recorder.records("set_aside") == 5)
                #expect(try await recorder.records("forged") == 1)
                #expect(try await recorder.records("malformed") == 1)
                #expect(try await recorder.records("written") == 2)
                // What an operator sees of them: where they stand, why, and what came.
                let listed = try await recorder.read("/v1/records/set-aside?site=arcade-1")
                #expect(listed.status == 200, "\(listed.body)")
                let records = try #require(listed.json["records"] as? [[String: Any]])
                #expect(Set(records.compactMap { $0["seq"] as? Int }) == [2, 3, 4, 5, 6])
                let reasons = Dictionary(uniqueKeysWithValues: records.compactMap { record in
                    (record["seq"] as? Int).map { ($0, record["reason"] as? String ?? "") }
                })
                #expect(reasons[2]?.contains("player is longer than") == true, "\(reasons)")
                #expect(reasons[3]?.hasPrefix("22") == true, "the database's own refusal: \(reasons)")
                #expect(reasons[4]?.contains("offered_at") == true && reasons[5]?.contains("not its topic") == true)
                #expect((records.first { $0["seq"] as? Int == 6 }?["payload"] as? String)?.contains(#""seq":6"#) == true)
                #expect(try await recorder.read("/v1/records/set-aside", token: nil).status == 401)
            }
        }

        /// SPEC §10: a site's numbering is per epoch of its SQLite file; a
        /// new epoch starts at 1 and the old one's progress stays.
        @Test func eachEpochOfASiteIsNumberedFromOne() async throws {
            try await Self.with { _, sites, database, _ in
                let site = sites[0]
                for seq in 1...3 as ClosedRange<Int64> { try site.send(Self.record("arcade-1", seq)) }
                try await eventually("epoch e1 acknowledged up to 3") { site.epochAcks.items.last == ChainRecordsAck(epoch: "e1", upto: 3) }
                for seq in 1...2 as ClosedRange<Int64> { try site.send(Self.record("arcade-1", seq, epoch: "e2", id: "g-e2-\(seq)")) }
                try await eventually("epoch e2 acknowledged up to 2") { site.epochAcks.items.last == ChainRecordsAck(epoch: "e2", upto: 2) }
                #expect(try database.psql("SELECT epoch, upto FROM sites_progress ORDER BY epoch") == ["e1|3", "e2|2"])
                #expect(try database.psql("SELECT count(*) FROM games") == ["5"])
            }
        }

        @Test func twoRecordersAtOnceNeverDoubleARow() async throws {
            try await Self.with { first, sites, database, broker in
                let second = try await RecorderProcess(broker: broker, database: database, clientID: "claw-recorder-second")
                let site = sites[0]
                let count: Int64 = 300
                // Every record twice, the second round in reverse: both recorders get every copy.
                for seq in 1...count { try site.send(Self.record("arcade-1", seq)) }
                for seq in (1...count).reversed() { try site.send(Self.record("arcade-1", seq)) }
                try await eventually("every record acknowledged", timeout: .seconds(60)) { site.acks.items.last == count }
                #expect(try database.psql("SELECT count(*), count(DISTINCT id), min(seq), max(seq) FROM games") == ["\(count)|\(count)|1|\(count)"])
                #expect(try database.psql("SELECT upto FROM sites_progress") == ["\(count)"])
                try await eventually("both recorders to have handled all four copies of each record", timeout: .seconds(60)) {
                    let firstTotal = try await first.records("written") + first.records("duplicate")
                    let secondTotal = try await second.records("written") + second.records("duplicate")
                    return firstTotal == Double(2 * count) && secondTotal == Double(2 * count)
                }
                let written = try await first.records("written") + second.records("written")
                #expect(written == Double(count))
                // An acknowledgement never says more than the database holds.
                #expect(site.acks.items.allSatisfy { $0 <= count })
                await second.stop()
            }
        }

        @Test func theHistoryAndTheDailyReportGiveTheFiguresOfTheRowsPutIn() async throws {
            try await Self.with(sites: ["arcade-1", "arcade-2"]) { recorder, sites, _, _ in
                let now = Date()
                let today = RecorderRoutes.startOfDay(now)
                let yesterday = today.addingTimeInterval(-86_400 + 3600 * 10)
                let one = "arcade-1", two = "arcade-2"
                let records = [
                    // arcade-1 m1 yesterday: 2 played (1 won), 1 declined (not played).
                    Self.record(one, 1, machine: "m1", player: "alice", outcome: .won, offered: yesterday),
                    Self.record(one, 2, machine: "m1", player: "bob", outcome: .lost, offered: yesterday.addingTimeInterval(60)),
                    Self.record(one, 3, machine: "m1", player: "carol", outcome: .declined, offered: yesterday.addingTimeInterval(120), started: false),
                    // arcade-1 m1 today: 3 played (1 won, 1 no_result).
                    Self.record(one, 4, machine: "m1", player: "alice", outcome: .won, offered: today.addingTimeInterval(10)),
                    Self.record(one, 5, machine: "m1", player: "alice", outcome: .noResult, offered: today.addingTimeInterval(20)),
                    Self.record(one, 6, machine: "m1", player: "bob", outcome: .lost, offered: today.addingTimeInterval(30)),
                    // arcade-1 m2 today: 1 played, won.
                    Self.record(one, 7, machine: "m2", player: "dave", outcome: .won, offered: today.addingTimeInterval(40)),
                    // arcade-2 m1 (another arcade's m1) today: 2 played, none won; one not ended yet.
                    Self.record(two, 1, machine: "m1", player: "alice", outcome: .lost, offered: today.addingTimeInterval(50)),
                    Self.record(two, 2, machine: "m1", player: "erin", outcome: nil, offered: today.addingTimeInterval(60)),
                ]
                for record in records { try sites[record.site == one ? 0 : 1].send(record) }
                try await eventually("both sites acknowledged", timeout: .seconds(20)) {
                    sites[0].acks.items.last == 7 && sites[1].acks.items.last == 2
                }

                // Newest first, the §5 shape plus site, nulls written as null.
                let all = try await recorder.read("/v1/games")
                #expect(all.status == 200)
                let games = try #require(all.json["games"] as? [[String: Any]])
                #expect(games.map { "\($0["site"]!)/\($0["id"]!)" } == ["arcade-2/g-arcade-2-2", "arcade-2/g-arcade-2-1", "arcade-1/g-arcade-1-7", "arcade-1/g-arcade-1-6", "arcade-1/g-arcade-1-5", "arcade-1/g-arcade-1-4", "arcade-1/g-arcade-1-3", "arcade-1/g-arcade-1-2", "arcade-1/g-arcade-1-1"])
                let open = games[0]
                #expect(Set(open.keys) == ["site", "id", "machine", "player", "provider", "nick", "outcome", "offered_at", "started_at", "ended_at", "commands"])
                #expect(open["outcome"] is NSNull && open["ended_at"] is NSNull)
                #expect(open["offered_at"] as? String == Timestamp.string(today.addingTimeInterval(60)))
                #expect(games[6]["started_at"] is NSNull)

                func ids(_ query: String) async throws -> [String] {
                    let answer = try await recorder.read("/v1/games?\(query)")
                    #expect(answer.status == 200, "\(query): \(answer.body)")
                    return ((answer.json["games"] as? [[String: Any]]) ?? []).map { "\($0["site"]!)/\($0["id"]!)" }
                }
                #expect(try await ids("site=arcade-1&machine=m1&outcome=won") == ["arcade-1/g-arcade-1-4", "arcade-1/g-arcade-1-1"])
                #expect(try await ids("machine=m1&player=alice") == ["arcade-2/g-arcade-2-1", "arcade-1/g-arcade-1-5", "arcade-1/g-arcade-1-4", "arcade-1/g-arcade-1-1"])
                #expect(try await ids("outcome=no_result") == ["arcade-1/g-arcade-1-5"])
                let since = Timestamp.string(today).replacingOccurrences(of: ".000Z", with: "Z")
                #expect(try await ids("site=arcade-1&until=\(since)") == ["arcade-1/g-arcade-1-3", "arcade-1/g-arcade-1-2", "arcade-1/g-arcade-1-1"])
                #expect(try await ids("site=arcade-1&since=\(Timestamp.string(today.addingTimeInterval(30)))") == ["arcade-1/g-arcade-1-7", "arcade-1/g-arcade-1-6"])
                #expect(try await ids("limit=2&offset=1") == ["arcade-2/g-arcade-2-1", "arcade-1/g-arcade-1-7"])
                #expect(try await ids("player=%E5%B0%8F%E6%98%8E").isEmpty)

                // Per UTC day and machine: games played, wins, win rate, no_result.
                let daily = try await recorder.read("/v1/report/daily?days=2")
                #expect(daily.status == 200, "\(daily.body)")
                let rows = try #require(daily.json["days"] as? [[String: Any]])
                func day(_ date: Date) -> String { String(Timestamp.string(date).prefix(10)) }
                let figures = rows.map { row in
                    "\(row["day"]!) \(row["site"]!) \(row["machine"]!) \(row["games"]!) \(row["wins"]!) \(row["win_rate"]!) \(row["no_result"]!)"
                }
                #expect(
                    figures == [
                        "\(day(yesterday)) arcade-1 m1 2 1 0.5 0",
                        "\(day(today)) arcade-1 m1 3 1 \(1.0 / 3.0) 1",
                        "\(day(today)) arcade-1 m2 1 1 1 0",
                        "\(day(today)) arcade-2 m1 2 0 0 0",
                    ])
                let todayOnly = try await recorder.read("/v1/report/daily?days=1&site=arcade-1&machine=m1")
                #expect(((todayOnly.json["days"] as? [[String: Any]]) ?? []).map { "\($0["day"]!) \($0["games"]!)" } == ["\(day(today)) 3"])

                // Games played per hour and site.
                let hourly = try await recorder.read("/v1/report/hourly?hours=48&site=arcade-1")
                #expect(hourly.status == 200, "\(hourly.body)")
                let hours = ((hourly.json["hours"] as? [[String: Any]]) ?? []).map { "\($0["hour"]!) \($0["site"]!) \($0["games"]!) \($0["wins"]!)" }
                let yesterdayHour = Timestamp.string(RecorderRoutes.startOfHour(yesterday))
                #expect(hours == ["\(yesterdayHour) arcade-1 2 1", "\(Timestamp.string(today)) arcade-1 4 2"])
            }
        }

        /// SPEC §11: the recorder serves the chain's top-ups, wallets and
        /// adjustments over its PostgreSQL, as a site does over its SQLite.
        @Test func theRecorderTakesSignedTopUpsAndServesTheChainsWallets() async throws {
            try await Self.with { recorder, _, database, _ in
                let order = #"{"provider":"generic","account":"zoe","credits":40,"order":"chain-pay-1"}"#
                let taken = try await HeavySuites.CreditsEndToEndTests.topUp(base: recorder.base, order)
                #expect(taken.status == 200 && taken.json["balance"] as? Int == 40 && taken.json["duplicate"] as? Bool == false, "\(taken.body)")
                let again = try await HeavySuites.CreditsEndToEndTests.topUp(base: recorder.base, order)
                #expect(again.status == 200 && again.json["duplicate"] as? Bool == true && again.json["balance"] as? Int == 40)
                let conflict = try await HeavySuites.CreditsEndToEndTests.topUp(
                    base: recorder.base, #"{"provider":"generic","account":"zoe","credits":41,"order":"chain-pay-1"}"#)
                #expect(conflict.status == 409 && conflict.json["code"] as? String == "order_conflict")
                let bad = try await HeavySuites.CreditsEndToEndTests.topUp(base: recorder.base, order, secret: "not-the-secret-0123")
                #expect(bad.status == 401)
                let over = try await HeavySuites.CreditsEndToEndTests.topUp(
                    base: recorder.base, #"{"provider":"generic","account":"zoe","credits":101,"order":"chain-pay-2"}"#)
                #expect(over.status == 422 && over.json["code"] as? String == "invalid_body")

                let adjust = "\(recorder.base)/v1/players/generic/zoe/adjust"
                let admin = [("Authorization", "Bearer \(RecorderTests.adminToken)")]
                #expect(try await HTTP.request(.POST, adjust, body: Array(#"{"credits":-1,"reason":"x"}"#.utf8)).status == 401)
                let overdraft = try await HTTP.request(.POST, adjust, headers: admin, body: Array(#"{"credits":-41,"reason":"too much"}"#.utf8))
                #expect(overdraft.status == 409 && overdraft.json["code"] as? String == "insufficient_credits", "\(overdraft.body)")
                let goodwill = try await HTTP.request(.POST, adjust, headers: admin, body: Array(#"{"credits":-5,"reason":"chargeback"}"#.utf8))
                #expect(goodwill.status == 200 && goodwill.json["balance"] as? Int == 35, "\(goodwill.body)")

                #expect(try await recorder.read("/v1/players/generic/zoe/wallet", token: nil).status == 401)
                let wallet = try await recorder.read("/v1/players/generic/zoe/wallet")
                #expect(wallet.json["balance"] as? Int == 35, "\(wallet.body)")
                let entries = wallet.json["entries"] as? [[String: Any]] ?? []
                #expect(entries.map { $0["kind"] as? String } == ["adjust", "topup"] && entries.last?["order"] as? String == "chain-pay-1")
                #expect(try await recorder.read("/v1/players/wechat/zoe/wallet").status == 404)
                #expect(try database.psql("SELECT balance FROM wallets WHERE account = 'zoe'") == ["35"])
            }
        }

        @Test func badParametersAre400NamingThemAndTheReadsNeedTheToken() async throws {
            try await Self.with { recorder, _, _, _ in
                for (query, name) in [
                    ("/v1/games?limit=501", "limit"), ("/v1/games?limit=0", "limit"), ("/v1/games?offset=-1", "offset"),
                    ("/v1/games?outcome=jackpot", "outcome"), ("/v1/games?since=yesterday", "since"), ("/v1/games?until=2026-13-01", "until"),
                    ("/v1/games?site=", "site"), ("/v1/games?machne=m1", "machne"), ("/v1/games?site=a&site=b", "site"),
                    ("/v1/games?player=x%27%20OR%201%3D1", ""), ("/v1/report/daily?days=91", "days"), ("/v1/report/daily?days=0", "days"),
                    ("/v1/report/daily?limit=5", "limit"), ("/v1/report/hourly?hours=721", "hours"), ("/v1/games?offset=100001", "offset"),
                ] {
                    let answer = try await recorder.read(query)
                    if name.isEmpty {
                        // A value is a bound parameter: quotes find nobody, they break nothing.
                        #expect(answer.status == 200 && (answer.json["games"] as? [Any])?.isEmpty == true, "\(query): \(answer.body)")
                        continue
                    }
                    #expect(answer.status == 400, "\(query): \(answer.status) \(answer.body)")
                    #expect(answer.json["code"] as? String == "bad_request")
                    #expect((answer.json["message"] as? String)?.hasPrefix(name) == true, "\(query): \(answer.body)")
                }
                // The 401 names the recorder's own key (it named the gateway's http.read_token).
                let refused = try await recorder.read("/v1/games", token: nil)
                #expect((refused.json["message"] as? String)?.contains("recorder.read_token") == true, "\(refused.body)")
                for path in ["/v1/games", "/v1/report/daily", "/v1/report/hourly", "/metrics"] {
                    #expect(try await recorder.read(path, token: nil).status == 401, "\(path)")
                    #expect(try await recorder.read(path, token: "wrong-token-0123456789").status == 401, "\(path)")
                    #expect(try await recorder.read(path).status == 200, "\(path)")
                }
                #expect(try await recorder.read("/healthz", token: nil).status == 200)
                #expect(try await recorder.read("/readyz", token: nil).status == 200)
                #expect(try await recorder.read("/dashboard").status == 404)
                // The history page and Debian's Chart.js, from the recorder itself.
                let page = try await recorder.read("/history", token: nil)
                #expect(page.status == 200 && page.body.contains("<canvas"), "\(page.status)")
                let chart = try await recorder.read("/history/chart.js", token: nil)
                #expect(chart.status == 200 && chart.body.contains("Chart"), "\(chart.status)")
                // Every family with its HELP, the results at 0 from the first scrape.
                let metrics = try PrometheusText(try await recorder.read("/metrics").body)
                #expect(metrics.problems.isEmpty, "\(metrics.problems)")
                for result in ["written", "duplicate", "malformed", "forged", "set_aside"] {
                    #expect(metrics.samples[#"claw_recorder_records_total{result="\#(result)"}"#] == 0)
                }
                for family in ["claw_recorder_database_up", "claw_recorder_bus_up", "claw_recorder_bus_connects_total", "claw_recorder_write_latency_seconds"] {
                    #expect(metrics.help[family] != nil, "\(family)")
                }
            }
        }
    }
}
