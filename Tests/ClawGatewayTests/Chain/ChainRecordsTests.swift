import Foundation
import Protocol
import Synchronization
import Testing

@testable import ClawGateway

extension DatabaseSuites {
    /// Nothing lost, nothing twice (SPEC §10), for real: PostgreSQL 15, the
    /// three-node cluster, two sites playing whole games all along, and
    /// `claw-gateway record`, while the recorder, the database, a node and
    /// the sites are broken one after another. Afterwards PostgreSQL holds
    /// every ended game of both sites' SQLite files exactly once, as the site
    /// holds it.
    @Suite(.serialized) struct ChainRecordsTests {
        /// How long each deliberate outage lasts. The chain's contract speaks
        /// of 30 s; 10 s is as long as the recorder's database backoff (1 s
        /// doubling to 10 s) and five of the sites' resend intervals, which
        /// is what an outage tests, and keeps the suite near two minutes.
        static let outage: Duration = .seconds(10)

        @Test func everyGameOfBothSitesIsInPostgreSQLExactlyOnceAfterTheRecorderTheDatabaseANodeAndASiteFail() async throws {
            let database = try PostgresServer.start()
            try await ChainHarness.with { chain in
                let clock = ContinuousClock()
                let began = clock.now
                var phases: [String] = []
                func phase(_ name: String) { phases.append("\(name) at +\(String(format: "%.1f", (clock.now - began).seconds)) s") }

                // The sites resend every 2 s (the default is 10 s).
                for site in chain.sites {
                    try site.setResendInterval("2s")
                    try await site.restart()
                }
                for site in chain.sites { try await site.waitReady() }
                for router in chain.routers { try await router.waitReady(for: chain.sites) }
                // Node 1 first: killing it later cuts the recorder off as well as both site links.
                let recorder = try ChainHarness.RecorderNode(urls: chain.cluster.mqttURLs, database: database)
                try recorder.start()
                try await recorder.waitReady()
                phase("recorder ready")

                let loop = GameLoop(
                    lanes: chain.sites.enumerated().flatMap { index, site in site.machines.map { GameLoop.Lane(site: index, machine: $0, receipts: site.receiptLog) } },
                    routers: chain.routers.map(\.base), netease: chain.netease)
                do {
                    try await eventually("a game of each site in PostgreSQL", timeout: .seconds(40)) {
                        let sites = Set(((try? database.recordedGames()) ?? []).map(\.site))
                        return sites == Set(chain.sites.map(\.name))
                    }
                    phase("games recorded at both sites")

                    // 1. The recorder killed, and down for a while: the cluster keeps its session, the sites resend.
                    recorder.kill()
                    try await Task.sleep(for: Self.outage)
                    try recorder.start()
                    try await recorder.waitReady()
                    phase("recorder back")

                    // 2. PostgreSQL down for a while: nothing acknowledged, the recorder retries.
                    database.stop()
                    let stoppedAt = clock.now
                    try await eventually("the recorder to say the database is down", timeout: .seconds(10)) {
                        let answer = try? await HTTP.get("\(recorder.base)/readyz")
                        return answer?.status == 503 && answer?.body.contains("database") == true
                    }
                    try await Task.sleep(until: stoppedAt.advanced(by: Self.outage))
                    try database.start()
                    try await recorder.waitReady()
                    phase("database back")

                    // 3. A node killed: the one the recorder and both site links dial first.
                    let node = ChainHarness.firstNode
                    chain.cluster.kill(node)
                    try await recorder.waitReady()
                    for site in chain.sites { try await site.waitReady() }
                    phase("node \(node + 1) killed, recorder and sites linked again")

                    // 4. arcade-1 cut off: its gateway frozen, then thawed.
                    let frozen = chain.sites[0]
                    frozen.freeze()
                    try await Task.sleep(for: Self.outage)
                    frozen.thaw()
                    try await frozen.waitReady()
                    phase("arcade-1 thawed")

                    // 5. arcade-2's gateway (and its PCs) restarted.
                    let restarted = chain.sites[1]
                    let restartedAt = Date()
                    try await restarted.restart()
                    try await restarted.waitReady()
                    phase("arcade-2 restarted")

                    // Games go on at both sites after all that.
                    try await eventually("a game to end at each site after arcade-2's restart", timeout: .seconds(40)) {
                        chain.sites.indices.allSatisfy { index in loop.played.items.contains { $0.site == index && $0.endedAt > restartedAt } }
                    }
                    phase("games ended at both sites after the restart")
                } catch {
                    await loop.stop()
                    print("--- recorder log (tail) ---\n\(recorder.logText.suffix(6000))")
                    throw error
                }
                await loop.stop()
                phase("games stopped")

                // Every ended game of each site's SQLite file in PostgreSQL, once, as the site holds it.
                var problems: [String] = []
                var totals: [String: Int] = [:]
                let deadline = clock.now.advanced(by: .seconds(60))
                repeat {
                    (problems, totals) = try Self.compare(chain, database)
                    if problems.isEmpty { break }
                    try await Task.sleep(for: .milliseconds(200))
                } while clock.now < deadline
                phase("PostgreSQL agrees with the sites")
                #expect(problems.isEmpty, "\(problems.count) problems:\n\(problems.prefix(40).joined(separator: "\n"))")
                if !problems.isEmpty {
                    print("--- recorder log (tail) ---\n\(recorder.logText.suffix(6000))")
                    await Self.printFigures(chain, recorder)
                }
                for site in chain.sites {
                    #expect((totals[site.name] ?? 0) >= 10, "\(site.name) ended only \(totals[site.name] ?? 0) games")
                    // Read again each time: a turn offered just before the
                    // games stopped may still end (its offer expiring) and be numbered.
                    try await eventually("\(site.name) to have every record acknowledged", timeout: .seconds(15)) {
                        let last = (try? site.endedGames().compactMap(\.seq).max()) ?? -1
                        let acked = await site.metric("claw_chain_records_acked")
                        let pending = await site.metric("claw_chain_records_pending")
                        return acked == Double(last) && pending == 0
                    }
                }
                #expect(await recorder.records("forged") == 0)
                #expect(await recorder.records("malformed") == 0)

                // A site publishing under another site's name is refused by the cluster's users;
                // a record that does not decode is counted and never written.
                let live = chain.cluster.mqttURLs.enumerated().filter { $0.offset != Self.killedNode(chain) }.map(\.element)
                let watcher = try await ChainTestClient(live, user: "recorder")
                #expect(try await watcher.subscribe(["claw/+/records"]).refused.isEmpty)
                let forgedID = "g-forged-\(UUID().uuidString.prefix(8))"
                let forger = try await ChainTestClient(live, user: "site-arcade-1")
                let now = Timestamp.string(Date())
                let forged = ChainRecord(
                    site: "arcade-2", epoch: "", seq: 1_000_000,
                    game: GameRecord(
                        id: forgedID, machine: "m3", player: "mallory", provider: "netease", nick: "Mallory", outcome: .won, offeredAt: now,
                        startedAt: now, endedAt: now, commands: 1))
                _ = try? forger.client.publish("claw/arcade-2/records", payload: forged.payload, qos: .atLeastOnce, retain: false)
                // Published after the forged record was sent, from a connection opened after it.
                let garbage = "not a record \(UUID().uuidString)"
                let garbler = try await ChainTestClient(live, user: "site-arcade-1")
                try await garbler.publish("claw/arcade-1/records", garbage)
                try await watcher.waitFor("claw/arcade-1/records") { String(decoding: $0.payload, as: UTF8.self) == garbage }
                try await eventually("the recorder to count the record that does not decode") {
                    await recorder.records("malformed") == 1
                }
                #expect(
                    !watcher.messages.contains { String(decoding: $0.payload, as: UTF8.self).contains(forgedID) },
                    "the cluster passed on a record arcade-1 published under arcade-2's name")
                #expect(await recorder.records("forged") == 0)
                #expect(try database.psql("SELECT count(*) FROM games WHERE id = '\(forgedID)' OR id LIKE 'not a record%'") == ["0"])
                // A turn left open when the games stopped may have ended since (expired, no_result): it is shipped too.
                try await eventually("PostgreSQL to agree with the sites again", timeout: .seconds(15)) {
                    try Self.compare(chain, database).problems.isEmpty
                }
                print(
                    "chain records: \(totals.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value) games" }.joined(separator: ", ")) "
                        + "in PostgreSQL exactly once (\(loop.played.items.count) played to their result, \(loop.abandoned.items.count) given up); the forger's connection \(forger.client.isConnected ? "stayed up" : "was dropped"); "
                        + phases.joined(separator: "; "))
                for client in [watcher, forger, garbler] { await client.stop() }
                await recorder.stop()
            }
            database.stop()
        }

        /// The recorder's and the sites' own figures of the records, for a failure's report.
        static func printFigures(_ chain: ChainHarness, _ recorder: ChainHarness.RecorderNode) async {
            let answer = try? await HTTP.request(
                .GET, "\(recorder.base)/metrics", headers: [("Authorization", "Bearer \(ChainHarness.RecorderNode.readToken)")])
            let lines = (answer?.body ?? "").split(separator: "\n").filter { $0.hasPrefix("claw_recorder_") && !$0.contains("_bucket") }
            print("--- recorder figures ---\n\(lines.joined(separator: "\n"))")
            for site in chain.sites {
                let text = (try? await HTTP.get("\(site.base)/metrics"))?.body ?? ""
                print("--- \(site.name) figures ---\n\(text.split(separator: "\n").filter { $0.hasPrefix("claw_chain_") }.joined(separator: "\n"))")
            }
        }

        /// The node the test killed: the first one, which no longer runs.
        private static func killedNode(_ chain: ChainHarness) -> Int {
            chain.cluster.nodes.firstIndex { $0.process == nil } ?? -1
        }

        /// Every way PostgreSQL differs from the sites' SQLite files, and the
        /// number of ended games at each site.
        static func compare(_ chain: ChainHarness, _ database: PostgresServer) throws -> (problems: [String], totals: [String: Int]) {
            var problems: [String] = []
            var totals: [String: Int] = [:]
            var rows: [String: [ChainHarness.Site.StoredGame]] = [:]
            for row in try database.recordedGames() { rows["\(row.site)/\(row.game.id)", default: []].append(row.game) }
            var known = Set<String>()
            for site in chain.sites {
                let games = try site.endedGames()
                totals[site.name] = games.count
                for game in games {
                    let key = "\(site.name)/\(game.id)"
                    known.insert(key)
                    let found = rows[key] ?? []
                    if game.seq == nil {
                        problems.append("\(key) ended but has no record number: \(game)")
                    } else if found.isEmpty {
                        problems.append("\(key) is missing from PostgreSQL: \(game)")
                    } else if found.count > 1 {
                        problems.append("\(key) is in PostgreSQL \(found.count) times")
                    } else if found[0] != game {
                        problems.append("\(key) differs: the site holds \(game), PostgreSQL \(found[0])")
                    }
                }
            }
            for key in rows.keys.sorted() where !known.contains(key) {
                problems.append("\(key) is in PostgreSQL but in no site's SQLite file as an ended game")
            }
            return (problems, totals)
        }
    }
}

/// Whole games played at every lane (a machine of a site) one after another
/// until stopped, each by a new player through the routers in turn: join,
/// the offer, accept, the grab, the result. Every step is sent again while
/// its answer does not come, so the games go on through outages; a game that
/// cannot finish within 40 s, or whose turn is over, is given up and the next player joins.
final class GameLoop: Sendable {
    struct Lane: Sendable {
        var site: Int
        var machine: String
        /// The site's simulator's receipt log: what its PCs received.
        var receipts: URL

        /// Whether the PC received the coin (command 1001) for `session`.
        func coin(_ session: String) -> Bool {
            let text = (try? String(contentsOf: receipts, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").contains { line in
                guard line.contains(session),
                    let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                else { return false }
                return object["machine"] as? String == machine && object["command"] as? Int == 1001 && object["session"] as? String == session
            }
        }
    }

    struct Played: Sendable {
        var site: Int
        var machine: String
        var player: String
        var endedAt: Date
    }

    let played = Recorder<Played>()
    let abandoned = Recorder<String>()
    private let stopped = Mutex(false)
    private let tasks: Mutex<[Task<Void, Never>]> = Mutex([])

    init(lanes: [Lane], routers: [String], netease: FakeNetEaseAPI) {
        let started = lanes.map { lane in
            Task { [self] in
                var number = 0
                while !isStopped {
                    number += 1
                    let player = "p-\(lane.machine)-\(number)"
                    let router = routers[number % routers.count]
                    if await play(lane, player: player, via: router, netease: netease) {
                        played.append(Played(site: lane.site, machine: lane.machine, player: player, endedAt: Date()))
                    } else if !isStopped {
                        abandoned.append(player)
                    }
                }
            }
        }
        tasks.withLock { $0 = started }
    }

    private var isStopped: Bool { stopped.withLock { $0 } }

    /// Stops at once: a game half played stays so.
    func stop() async {
        stopped.withLock { $0 = true }
        for task in tasks.withLock({ $0 }) { await task.value }
    }

    private func play(_ lane: Lane, player: String, via router: String, netease: FakeNetEaseAPI) async -> Bool {
        let account = "claw_\(lane.machine)"
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: .seconds(40))
        func replies() -> [WireMessage] { netease.attachments(to: player).compactMap { try? WireMessage.decode(Array($0.utf8)) } }
        func send(_ attach: String) async {
            _ = try? await ChainHarness.postCopy(
                base: router, from: player, to: account, attach: attach, messageID: UUID().uuidString, timeout: .seconds(5))
        }
        /// Does `action` (told which try it is) every `every` until `done` gives a value.
        func step<T>(every: Duration, _ action: (Int) async -> Void, until done: () -> T?) async -> T? {
            var attempt = 0
            while clock.now < deadline, !isStopped {
                attempt += 1
                await action(attempt)
                let next = clock.now.advanced(by: every)
                while clock.now < next, !isStopped {
                    if let value = done() { return value }
                    // Polling what the fake NetEase API delivered, not waiting for an outcome.
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            return nil
        }
        guard
            let session = await step(
                every: .seconds(5), { _ in await send(#"{"command":6,"data":"\#(player)"}"#) },
                until: { replies().last { $0.code == .turnOffer }?.data })
        else { return false }
        // The accept again while no coin comes; given up as soon as the offer
        // is over (it ran out while the site restarted, say): waiting out the
        // lane's 40 s would leave the next player no time to play.
        guard
            await step(
                every: .seconds(3), { _ in await send(#"{"command":12,"data":"\#(session)"}"#) },
                until: { () -> Bool? in
                    if lane.coin(session) { return true }
                    if replies().contains(where: { $0.code == .error && $0.serial == nil && $0.data == ErrorCode.offerExpired.rawValue }) {
                        return false
                    }
                    return nil
                }) == true
        else { return false }
        // The grab again, with a new serial, while no result comes: longer apart than the PC's 2 s to a result.
        let result = await step(
            every: .seconds(4), { await send(#"{"command":2,"serial":\#($0)}"#) },
            until: { () -> Bool? in
                let now = replies()
                if now.contains(where: { $0.code == .result && $0.session == session }) { return true }
                // The turn is over without a result (closed as no_result when
                // its gateway stopped): a grab is refused, not for the site's silence.
                if now.contains(where: { $0.code == .error && $0.serial != nil && $0.data != "gateway_unavailable" }) { return false }
                return nil
            })
        return result == true
    }
}
