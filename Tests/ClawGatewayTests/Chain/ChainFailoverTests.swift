import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension ChainSuites {
    /// The chain's failover for real on one box (SPEC §9): three NATS nodes,
    /// two sites (each its own mosquitto, gateway and simulated PCs), two
    /// routers, one fake NetEase API. What reached a PC is the PC's word (the
    /// simulator's receipt log), matched to the player's serial by the site's
    /// command events.
    @Suite(.serialized) struct ChainFailoverTests {
        // MARK: Routing

        @Test func copiesReachTheSiteThatOwnsTheMachineAndAnAddedMachineIsRoutedWithoutTouchingARouter() async throws {
            try await ChainHarness.with { chain in
                let (one, two) = (chain.sites[0], chain.sites[1])
                let routers = chain.routers.map(\.process?.pid)
                try await Self.playWholeGame(chain, site: 0, machine: "m1", player: "ann", via: 0)
                try await Self.playWholeGame(chain, site: 1, machine: "m3", player: "ben", via: 1)
                #expect(!two.receipts.contains { $0.player == "ann" }, "nothing of ann's reached arcade-2's PCs")
                #expect(!one.receipts.contains { $0.player == "ben" }, "nothing of ben's reached arcade-1's PCs")

                let unknown = try await chain.copy(via: 0, from: "cat", to: "claw_nobody", #"{"command":6,"serial":7}"#)
                #expect(unknown.status == 200, "an account nobody owns is answered: \(unknown.body)")
                try await eventually("cat to be told unknown_machine") { chain.told("cat", "unknown_machine", serial: 7) }
                #expect(chain.netease.sent.items.filter { $0.to == "cat" }.allSatisfy { $0.headerProblem == nil })

                // A machine added to arcade-2's config: the site's directory says so, the routers follow.
                try two.addMachine("m5")
                try await two.restart()
                try await two.waitReady()
                for router in chain.routers {
                    try await eventually("router \(router.number) to learn m5 from arcade-2's directory", timeout: .seconds(20)) {
                        await router.sites()["arcade-2"]?.machines.contains("m5") == true
                    }
                }
                try await Self.playWholeGame(chain, site: 1, machine: "m5", player: "dan", via: 0)
                #expect(chain.routers.map(\.process?.pid) == routers, "the routers ran throughout")
            }
        }

        // MARK: A node dies

        @Test func killingTheNodeOfTheSiteLinksAndARouterLosesNoCopySilentlyAndDeliversNoneLate() async throws {
            try await ChainHarness.with { chain in
                let node = ChainHarness.firstNode
                let clients = chain.sites.map { "claw-site-\($0.name)" } + [chain.routers[0].clientID]
                try await eventually("both site links and router 1 to be on node \(node + 1)", timeout: .seconds(20)) {
                    for client in clients where await chain.node(holding: client) != node { return false }
                    return true
                }
                // At each site, a game about to have its result, and a game its player steers through the stream.
                let finishing = [(site: 0, machine: "m1", player: "ann"), (site: 1, machine: "m3", player: "ben")]
                var sessions: [String: String] = [:]
                for game in finishing {
                    sessions[game.player] = try await Self.startGame(chain, site: game.site, machine: game.machine, player: game.player, via: 1)
                }
                let stream = try await Self.steer(chain, via: 1)
                for game in finishing {
                    let site = chain.sites[game.site], session = sessions[game.player] ?? ""
                    #expect(try await chain.copy(via: 1, from: game.player, to: "claw_\(game.machine)", #"{"command":2,"serial":1}"#).status == 200)
                    try await eventually("\(game.player)'s grab at the PC") {
                        site.receipts.contains { $0.command == 2 && $0.session == session }
                    }
                }

                let killedAt = Date()
                chain.cluster.kill(node)

                // The games running at both sites go on: they are local.
                for game in finishing {
                    let session = sessions[game.player] ?? ""
                    try await eventually("\(game.player)'s result while the cluster lost a node", timeout: .seconds(15)) {
                        chain.replies(to: game.player).contains { $0.code == .result && $0.session == session }
                    }
                }
                // Copies flow again: a run of good copies through both routers to both sites, for longer than
                // the cluster's redelivery (ack_wait 5 s), so that anything it held would have come by now.
                var recovered: Date?
                try await eventually("copies to flow again for 6 s", timeout: .seconds(40)) {
                    let run = Self.trailingGoodRun(stream.answered, after: killedAt, chain)
                    recovered = run.first?.sentAt
                    guard let first = run.first, let last = run.last else { return false }
                    return last.sentAt.timeIntervalSince(first.sentAt) >= 6
                }
                let copies = await stream.stop()
                let recovery = (recovered ?? .distantFuture).timeIntervalSince(killedAt)
                #expect(recovery < 20, "copies flowed again \(recovery) s after the kill")
                #expect(await chain.node(holding: clients[0]) != nil, "arcade-1's link is on a node that lives")

                let fates = try await Self.check(copies, chain)
                let during = copies.filter { $0.sentAt >= killedAt && $0.sentAt < killedAt.addingTimeInterval(recovery) }
                print(
                    "chain node kill: copies flowed again after \(String(format: "%.1f", recovery)) s; of \(copies.count) copies, "
                        + "\(during.count) sent before then: \(Self.summary(fates, of: during))")
            }
        }

        // MARK: A site falls silent

        @Test func aFrozenSiteIsAnsweredUnavailableAndNothingFromTheGapReachesAPCLater() async throws {
            try await ChainHarness.with { chain in
                let frozen = chain.sites[0]
                let stream = try await Self.steer(chain, via: 0)

                let frozenAt = Date()
                frozen.freeze()
                try await eventually("cat to be told gateway_unavailable", timeout: .seconds(10)) {
                    stream.answered.contains { $0.lane.site == 0 && $0.sentAt > frozenAt && Self.toldUnavailable($0, chain) }
                }
                let firstTold = stream.answered.filter { $0.lane.site == 0 && $0.sentAt > frozenAt && Self.toldUnavailable($0, chain) }
                    .map(\.sentAt).min() ?? .distantFuture
                let noticed = firstTold.timeIntervalSince(frozenAt)
                // A heartbeat is missed after 3 s; a second more for the beat in flight and a loaded machine.
                #expect(noticed < 5, "the first copy told gateway_unavailable was sent \(noticed) s after the site froze")

                // The deliberate gap: the site stays silent for 8 s in all.
                try await Task.sleep(for: .seconds(max(0, 8 - Date().timeIntervalSince(frozenAt))))
                let thawedAt = Date()
                frozen.thaw()

                // The site serves again, and has long dropped what the cluster held for it.
                var back: Date?
                try await eventually("a copy sent after the thaw to reach cat's PC", timeout: .seconds(25)) {
                    let now = Self.deliveries(chain)
                    back = stream.answered.filter { $0.lane.site == 0 && $0.sentAt > thawedAt && Self.delivered($0, now).count == 1 }
                        .map(\.sentAt).min()
                    return back != nil
                }
                try await eventually("6 s more of copies to both sites", timeout: .seconds(15)) {
                    (stream.answered.map(\.sentAt).max() ?? .distantPast).timeIntervalSince(back ?? .distantFuture) >= 6
                }
                let copies = await stream.stop()
                let fates = try await Self.check(copies, chain)

                let gap = copies.filter { $0.lane.site == 0 && $0.sentAt >= frozenAt && $0.sentAt < thawedAt }
                #expect(gap.count >= 15)
                let final = Self.deliveries(chain)
                for copy in gap {
                    #expect(Self.delivered(copy, final).isEmpty, "copy \(copy.serial), sent during the gap, reached a PC")
                }
                #expect(
                    frozen.site.logText.contains("A copy reached the site after chain.inbox_max_age"),
                    "the cluster delivered what it held, and the site dropped it as too old")
                let untouched = copies.filter { $0.lane.site == 1 && $0.sentAt >= frozenAt && $0.sentAt < thawedAt }
                #expect(untouched.count >= 15)
                for copy in untouched {
                    #expect(fates[copy.serial] == .delivered, "arcade-2's copy \(copy.serial) during arcade-1's silence: \(String(describing: fates[copy.serial]))")
                }
                print(
                    "chain site frozen 8 s: first gateway_unavailable for a copy sent \(String(format: "%.1f", noticed)) s in; "
                        + "arcade-1 during the gap: \(Self.summary(fates, of: gap)); arcade-2: \(Self.summary(fates, of: untouched))")
            }
        }

        // MARK: The routers' beats stop

        @Test func whenTheRoutersBeatsStopTheSitesTakeTheirLinksDownAndUpAndARestartedRouterBringsThemBack() async throws {
            try await ChainHarness.with { chain in
                let watcher = try await ChainTestClient(chain.cluster.mqttURLs, user: "site-arcade-1")
                #expect(try await watcher.subscribe(["claw/arcade-1/inbox"]).refused.isEmpty)
                func beats() -> Int { watcher.payloads(on: "claw/arcade-1/inbox").filter { $0.contains(#""beat""#) }.count }
                try await eventually("the routers' beats on arcade-1's inbox") { beats() > 0 }

                for router in chain.routers { await router.stop() }
                for site in chain.sites {
                    try await eventually("\(site.name) to take its link down for the silence", timeout: .seconds(20)) {
                        (await site.metric("claw_chain_link_silences_total") ?? 0) >= 1
                    }
                    #expect(site.site.logText.contains("No beat from the chain's routers"))
                    try await eventually("\(site.name)'s link up again", timeout: .seconds(20)) {
                        let connects = await site.metric("claw_chain_link_connects_total") ?? 0
                        let ready = (try? await HTTP.get("\(site.base)/readyz"))?.status == 200
                        return connects >= 2 && ready
                    }
                }

                try chain.routers[0].start()
                try await chain.routers[0].waitReady(for: chain.sites)
                let before = beats()
                try await eventually("beats on arcade-1's inbox again") { beats() > before }
                var silences: [Double] = []
                for site in chain.sites { silences.append(await site.metric("claw_chain_link_silences_total") ?? -1) }
                // Seven beats are over six seconds: longer than the silence a site tolerates.
                let resumed = beats()
                try await eventually("seven more beats", timeout: .seconds(15)) { beats() >= resumed + 7 }
                for (site, count) in zip(chain.sites, silences) {
                    #expect(await site.metric("claw_chain_link_silences_total") == count, "\(site.name) took its link down while beats came")
                }
                await watcher.stop()

                try await Self.playWholeGame(chain, site: 1, machine: "m3", player: "ben", via: 0)
            }
        }

        // MARK: A router dies

        @Test func whenOneRouterIsKilledTheOtherServesTheSameCopies() async throws {
            try await ChainHarness.with { chain in
                chain.routers[0].kill()
                // The load balancer's retry: the copy router 1 never answered, sent to router 2.
                for (site, machine, player) in [(0, "m1", "ann"), (1, "m3", "ben")] {
                    let id = UUID().uuidString
                    let join = #"{"command":6,"data":"\#(player)"}"#
                    let lost = try? await ChainHarness.postCopy(
                        base: chain.routers[0].base, from: player, to: "claw_\(machine)", attach: join, messageID: id, timeout: .seconds(1))
                    #expect(lost == nil, "a killed router answered")
                    #expect(try await chain.copy(via: 1, from: player, to: "claw_\(machine)", join, messageID: id).status == 200)
                    try await Self.playWholeGame(chain, site: site, machine: machine, player: player, via: 1, joined: true)
                }
                let unknown = try await chain.copy(via: 1, from: "cat", to: "claw_nobody", #"{"command":6,"serial":3}"#)
                #expect(unknown.status == 200)
                try await eventually("cat to be told unknown_machine") { chain.told("cat", "unknown_machine", serial: 3) }
            }
        }

        /// SPEC §9's readyz, tried as a new user would: start a router, wait
        /// for its `/readyz`, play. Before, it said ready once it held the
        /// directories, before it had heard any site's heartbeat, and the
        /// first join through it was refused `gateway_unavailable`.
        @Test func aRouterJustStartedIsReadyOnlyWhenItKnowsTheSitesAndItsFirstJoinPlays() async throws {
            try await ChainHarness.with { chain in
                let router = chain.routers[0]
                await router.stop()
                try router.start()
                try await eventually("the new router's readyz", timeout: .seconds(30)) {
                    (try? await HTTP.get("\(router.base)/readyz"))?.status == 200
                }
                let join = try await chain.copy(via: 0, from: "eve", to: "claw_m1", #"{"command":6,"data":"eve","serial":4}"#)
                #expect(join.status == 200, "\(join.body)")
                _ = try await chain.offeredSession(to: "eve")
                #expect(!chain.told("eve", "gateway_unavailable", serial: 4), "the first join went to its site")
            }
        }

        // MARK: Games

        /// Join (unless `joined`), the offer, accept: the coin at the PC. Returns the session.
        static func startGame(
            _ chain: ChainHarness, site index: Int, machine: String, player: String, via router: Int, joined: Bool = false
        ) async throws -> String {
            let site = chain.sites[index], account = "claw_\(machine)"
            if !joined {
                let join = try await chain.copy(via: router, from: player, to: account, #"{"command":6,"data":"\#(player)"}"#)
                #expect(join.status == 200, "\(player)'s join: \(join.body)")
            }
            let session = try await chain.offeredSession(to: player)
            #expect(chain.netease.sent.items.contains { $0.to == player && $0.from == account }, "the offer comes from \(account)")
            let accept = try await chain.copy(via: router, from: player, to: account, #"{"command":12,"data":"\#(session)"}"#)
            #expect(accept.status == 200, "\(player)'s accept: \(accept.body)")
            try await eventually("the coin at \(site.name)'s \(machine)") {
                site.receipts.contains { $0.machine == machine && $0.command == 1001 && $0.session == session }
            }
            return session
        }

        /// Games for cat at arcade-1's m2 and dan at arcade-2's m4, started
        /// through router `router`, and a stream of their moves through both
        /// routers, once it reaches both PCs.
        static func steer(_ chain: ChainHarness, via router: Int) async throws -> CopyStream {
            let lanes = [
                CopyStream.Lane(site: 0, player: "cat", account: "claw_m2"), CopyStream.Lane(site: 1, player: "dan", account: "claw_m4"),
            ]
            for lane in lanes {
                _ = try await startGame(chain, site: lane.site, machine: String(lane.account.dropFirst(5)), player: lane.player, via: router)
            }
            let stream = CopyStream(lanes: lanes, routers: chain.routers.map { ($0.number, $0.base) })
            try await eventually("the stream to reach both sites' PCs") {
                let now = deliveries(chain)
                return lanes.allSatisfy { lane in
                    stream.answered.contains { $0.lane.player == lane.player && delivered($0, now).count == 1 }
                }
            }
            return stream
        }

        /// A whole game through router `router`: join, offer, accept, a move, the grab, the result reply.
        static func playWholeGame(
            _ chain: ChainHarness, site index: Int, machine: String, player: String, via router: Int, joined: Bool = false
        ) async throws {
            let site = chain.sites[index], account = "claw_\(machine)"
            let session = try await startGame(chain, site: index, machine: machine, player: player, via: router, joined: joined)
            #expect(try await chain.copy(via: router, from: player, to: account, #"{"command":1,"data":"left","serial":1}"#).status == 200)
            try await eventually("the move at \(site.name)'s \(machine)") {
                site.receipts.contains { $0.machine == machine && $0.command == 1 && $0.data == "left" && $0.session == session }
            }
            #expect(try await chain.copy(via: router, from: player, to: account, #"{"command":2,"serial":2}"#).status == 200)
            try await eventually("the grab at \(site.name)'s \(machine)") {
                site.receipts.contains { $0.machine == machine && $0.command == 2 && $0.session == session }
            }
            try await eventually("the result to reach \(player)") {
                chain.replies(to: player).contains { $0.code == .result && $0.data == "true" && $0.session == session }
            }
        }

        // MARK: Fates of copies

        enum Fate: Equatable, CustomStringConvertible {
            case delivered, refused, unavailable

            var description: String {
                switch self {
                case .delivered: "delivered once"
                case .refused: "answered 5xx"
                case .unavailable: "told gateway_unavailable"
                }
            }
        }

        /// What reached the PCs, read once: by site, player and the player's serial.
        typealias Deliveries = [[String: [Int64: [ChainHarness.Site.Receipt]]]]

        static func deliveries(_ chain: ChainHarness) -> Deliveries {
            chain.sites.map { $0.deliveries() }
        }

        static func delivered(_ copy: CopyStream.Sent, _ deliveries: Deliveries) -> [ChainHarness.Site.Receipt] {
            deliveries[copy.lane.site][copy.lane.player]?[copy.serial] ?? []
        }

        /// The players and serials told `gateway_unavailable`, read once: `player/serial`.
        static func toldUnavailable(_ chain: ChainHarness) -> Set<String> {
            Set(
                chain.netease.sent.items.compactMap { sent in
                    guard let message = try? WireMessage.decode(Array(sent.attach.utf8)), message.code == .error,
                        message.data == "gateway_unavailable", let serial = message.serial
                    else { return nil }
                    return "\(sent.to)/\(serial)"
                })
        }

        static func toldUnavailable(_ copy: CopyStream.Sent, _ chain: ChainHarness) -> Bool {
            copy.status == 200 && chain.told(copy.lane.player, "gateway_unavailable", serial: copy.serial)
        }

        /// Whether `copy` was answered 200 and its player told
        /// `gateway_unavailable`: for its own serial, or, since a player is
        /// told at most one refusal of a code a second (SPEC §2), for a copy
        /// the same router refused less than a second before.
        static func unavailable(_ copy: CopyStream.Sent, among copies: [CopyStream.Sent], told: Set<String>) -> Bool {
            func wasTold(_ copy: CopyStream.Sent) -> Bool { copy.status == 200 && told.contains("\(copy.lane.player)/\(copy.serial)") }
            guard copy.status == 200 else { return false }
            if wasTold(copy) { return true }
            return copies.contains { other in
                other.lane.player == copy.lane.player && other.router == copy.router && other.sentAt <= copy.sentAt
                    && copy.sentAt.timeIntervalSince(other.sentAt) < 1.2 && wasTold(other)
            }
        }

        /// The copies sent after `start`, from the last one that was not
        /// answered 200 and delivered to its PC, on.
        static func trailingGoodRun(_ answered: [CopyStream.Sent], after start: Date, _ chain: ChainHarness) -> [CopyStream.Sent] {
            let sorted = answered.filter { $0.sentAt > start }.sorted { $0.serial < $1.serial }
            let now = deliveries(chain)
            var run: [CopyStream.Sent] = []
            for copy in sorted.reversed() {
                guard copy.status == 200, delivered(copy, now).count == 1 else { break }
                run.insert(copy, at: 0)
            }
            return run
        }

        /// Every copy's fate, once every copy answered 200 either reached its
        /// PC or was refused `gateway_unavailable`: each was delivered exactly
        /// once and not late; or refused with 5xx, and reached no PC after
        /// that answer (one it reached before, its receipt lost with the
        /// node, the IM service's resend finds deduplicated); or answered 200
        /// with `gateway_unavailable` and reached no PC. Anything else is an
        /// issue naming the copy.
        static func check(_ copies: [CopyStream.Sent], _ chain: ChainHarness) async throws -> [Int64: Fate] {
            let maxAge = 2.0
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: .seconds(10))
            func pending() -> [CopyStream.Sent] {
                let now = deliveries(chain), told = toldUnavailable(chain)
                return copies.filter { $0.status == 200 && delivered($0, now).isEmpty && !unavailable($0, among: copies, told: told) }
            }
            while clock.now < deadline, !pending().isEmpty {
                try await Task.sleep(for: .milliseconds(50))
            }
            var fates: [Int64: Fate] = [:]
            var problems: [String] = []
            let final = deliveries(chain), told = toldUnavailable(chain)
            for copy in copies {
                let at = delivered(copy, final)
                let what = "copy \(copy.serial) to \(copy.lane.account) via router \(copy.router), sent \(Timestamp.string(copy.sentAt)),"
                switch copy.status {
                case 200 where told.contains("\(copy.lane.player)/\(copy.serial)"):
                    if !at.isEmpty { problems.append("\(what) was answered gateway_unavailable, yet reached the PC") }
                    fates[copy.serial] = .unavailable
                case 200 where at.isEmpty && unavailable(copy, among: copies, told: told):
                    fates[copy.serial] = .unavailable
                case 200:
                    if at.count != 1 { problems.append("\(what) was answered 200 and reached the PC \(at.count) times: \(copy.body)") }
                    if let late = at.first?.at.timeIntervalSince(copy.sentAt), late >= maxAge + 1 {
                        problems.append("\(what) reached the PC \(String(format: "%.3f", late)) s after it was sent")
                    }
                    fates[copy.serial] = .delivered
                case 500...599:
                    let answered = copy.answeredAt.timeIntervalSince(copy.sentAt)
                    for late in at.map({ $0.at.timeIntervalSince(copy.sentAt) }) where late > answered {
                        problems.append(
                            "\(what) was answered \(copy.status) after \(String(format: "%.3f", answered)) s, "
                                + "yet reached the PC \(String(format: "%.3f", late)) s after it was sent")
                    }
                    if at.count > 1 { problems.append("\(what) reached the PC \(at.count) times") }
                    fates[copy.serial] = .refused
                default:
                    problems.append("\(what) was answered \(copy.status): \(copy.body)")
                }
            }
            for problem in problems { Issue.record(Comment(rawValue: problem)) }
            if !problems.isEmpty { print("The copies, as answered and received:\n" + timeline(copies, final, told: told)) }
            return fates
        }

        /// One line per copy: how it was answered, when it reached a PC.
        static func timeline(_ copies: [CopyStream.Sent], _ deliveries: Deliveries, told: Set<String>) -> String {
            copies.map { copy in
                let at = delivered(copy, deliveries).map { String(format: "+%.3f", $0.at.timeIntervalSince(copy.sentAt)) }
                let toldText = told.contains("\(copy.lane.player)/\(copy.serial)") ? " told unavailable" : ""
                return "  \(copy.serial) \(copy.lane.player) router \(copy.router) sent \(Timestamp.string(copy.sentAt)) "
                    + "answered \(copy.status) +\(String(format: "%.3f", copy.answeredAt.timeIntervalSince(copy.sentAt)))\(toldText)"
                    + (at.isEmpty ? "" : " at the PC \(at.joined(separator: ","))")
            }.joined(separator: "\n")
        }

        static func summary(_ fates: [Int64: Fate], of copies: [CopyStream.Sent]) -> String {
            let counted = Dictionary(grouping: copies.compactMap { fates[$0.serial] }, by: \.self).mapValues(\.count)
            return [Fate.delivered, .refused, .unavailable].map { "\(counted[$0] ?? 0) \($0)" }.joined(separator: ", ")
        }
    }
}
