import Clocks
import Foundation
import Logging
import Protocol
import ServiceLifecycle
import Synchronization
import Testing

@testable import ClawGateway

/// `chain.yaml`: every problem named by its key.
@Suite struct RouterConfigTests {
    static let valid = """
        router:
          listen: 127.0.0.1:8181
          read_token: read-token-of-16-bytes
          receipt_timeout: 500ms
          trusted_proxies: [10.0.0.0/8]
        bus:
          urls: [mqtt://127.0.0.1:1883, mqtt://127.0.0.1:1884]
          username: router
          password: secret
        im:
          netease:
            app_key: key
            app_secret: secret

        """

    @Test func aValidFileIsReadWithItsDefaults() throws {
        let config = try RouterConfig.parse(Self.valid)
        #expect(config.router.http.host == "127.0.0.1" && config.router.http.port == 8181)
        #expect(config.router.receiptTimeout == .milliseconds(500))
        #expect(config.router.http.readToken == "read-token-of-16-bytes")
        #expect(config.router.http.trustedProxies.networks.map(\.description) == ["10.0.0.0/8"], "behind the chain's load balancer")
        #expect(config.bus.urls.map(\.port) == [1883, 1884])
        #expect(config.bus.topicPrefix == "claw")
        #expect(config.bus.clientID.hasPrefix("claw-router-") && !config.bus.clientID.contains("."))
        #expect(config.im.netease?.callbackPath == "/im/netease")
        #expect(config.im.generic == nil)
    }

    @Test func theDefaultsListenEverywhereAndWaitASecond() throws {
        let config = try RouterConfig.parse(
            """
            bus: { urls: [mqtts://chain.example.com] }
            im: { generic: { secret: s } }
            """)
        #expect(config.router.http.host == "0.0.0.0" && config.router.http.port == 8080)
        #expect(config.router.receiptTimeout == .seconds(1))
        #expect(config.bus.tls != nil && config.bus.urls[0].port == 8883)
    }

    @Test func theDefaultClientIDIsUniquePerProcessWithoutDots() {
        let one = RouterConfig.defaultClientID(host: "Router.Example.com", pid: 41)
        #expect(one == "claw-router-router-example-com-41")
        #expect(one != RouterConfig.defaultClientID(host: "Router.Example.com", pid: 42))
        #expect(RouterConfig.clientIDProblem(one) == nil)
        #expect(RouterConfig.clientIDProblem("claw.router") != nil)
    }

    @Test(arguments: [
        ("router: { recipt_timeout: 1s }\n", "router.recipt_timeout", "did you mean receipt_timeout"),
        ("router: { read_token: short }\n", "router.read_token", "16"),
        ("router: { ledger_key: short }\n", "router.ledger_key", "16"),
        ("router: { receipt_timeout: soon }\n", "router.receipt_timeout", "not a duration"),
        ("router: { listen: nowhere }\n", "router.listen", "host:port"),
        ("router: { trusted_proxies: [10.0.0.1/8] }\n", "router.trusted_proxies[0]", "write 10.0.0.0/8"),
        ("bus: { urls: [http://x:1] }\nim: { generic: { secret: s } }\n", "bus.urls[0]", "mqtt://"),
        ("bus: { urls: [] }\nim: { generic: { secret: s } }\n", "bus.urls", "at least one"),
        ("bus: { urls: [mqtt://x:1], client_id: claw.router }\nim: { generic: { secret: s } }\n", "bus.client_id", "'.'"),
        ("bus: { urls: [mqtt://x:1], topic_prefix: claw/# }\nim: { generic: { secret: s } }\n", "bus.topic_prefix", "wildcard"),
        ("im: { generic: { secret: s } }\n", "bus", "is required"),
        ("bus: { urls: [mqtt://x:1] }\n", "im", "is required"),
        ("bus: { urls: [mqtt://x:1] }\nim: {}\n", "im", "netease or generic"),
        ("bus: { urls: [mqtt://x:1] }\nim: { netease: { app_key: k } }\n", "im.netease.app_secret", "is required"),
        ("http: {}\n", "http", "unknown key"),
    ])
    func aBadKeyIsNamed(yaml: String, path: String, message: String) throws {
        let error = try #require(throws: ConfigError.self) { try RouterConfig.parse(yaml) }
        #expect(
            error.problems.contains { $0.path == path && $0.message.contains(message) },
            "\(error.problems.map(\.description))")
    }
}

extension DatabaseSuites {
    /// The router in this process against a real mosquitto, with fake sites
    /// (MQTT clients that publish a directory and heartbeats and answer
    /// copies) and the fake NetEase API for the players' replies.
    @Suite struct RouterTests {
        static let readToken = "router-read-token-0123"

        /// A site as the router sees it: its directory, its heartbeats, and
        /// receipts for the copies on its inbox (or none, when told not to answer).
        final class FakeSite: Sendable {
            let name: String
            let client: MQTTClient
            let copies = Recorder<ChainCopy>()
            let beats = Recorder<ContinuousClock.Instant>()
            let topics: ChainTopics
            private let acks = Recorder<MQTTSubscribeAck>()

            /// - Parameter answering: false: copies are recorded, never acknowledged.
            init(broker: MosquittoBroker, name: String, answering: Bool = true) async throws {
                self.name = name
                topics = ChainTopics(prefix: "claw", site: name)
                var configuration = MQTTClientConfiguration(host: "127.0.0.1", port: broker.port, clientID: "claw-site-\(name)")
                configuration.protocolVersion = .v311
                client = try MQTTClient(configuration: configuration, logger: Logger(label: "fake-site"))
                let copies = copies, beats = beats, acks = acks, client = client, topics = topics
                client.onSubscribeAck { acks.append($0) }
                client.onMessage { message in
                    guard message.topic == topics.inbox else { return }
                    if message.payload == ChainRouter.beat {
                        beats.append(.now)
                        return
                    }
                    guard let copy = ChainCopy.decode(message.payload) else { return }
                    copies.append(copy)
                    guard answering else { return }
                    let receipt = ChainReceipt(id: copy.id, status: 200, body: #"{"code":200,"site":"\#(name)"}"#)
                    _ = try? client.publish(topics.inboxAck, payload: receipt.payload, qos: .atLeastOnce, retain: false)
                }
                client.subscribe([topics.inbox], qos: .atLeastOnce)
                client.start()
                try await eventually("site \(name) to subscribe to its inbox") { !acks.items.isEmpty }
            }

            /// Retained, as a site's link publishes it: `(id, im_account)` per machine, and `prices` by id where games cost.
            func publishDirectory(_ machines: [(String, String)], prices: [String: Int64] = [:]) throws {
                let directory = ChainDirectory(
                    site: name,
                    machines: machines.map { .init(id: $0.0, imAccount: $0.1, name: "Machine \($0.0)", price: prices[$0.0]) })
                try client.publish(topics.directory, payload: JSONCoding.encode(directory), qos: .atLeastOnce, retain: true)
            }

            func heartbeat() throws {
                try client.publish(topics.heartbeat, payload: Array(#"{"site":"\#(name)","seq":1}"#.utf8), qos: .atMostOnce, retain: false)
            }

            func publish(_ topic: String, _ payload: String, retain: Bool = true) throws {
                try client.publish(topic, payload: Array(payload.utf8), qos: .atLeastOnce, retain: retain)
            }

            func stop() async {
                await client.shutdown()
            }
        }

        /// The router's services in a group of this test's, on a free port.
        final class RunningRouter {
            let app: ChainRouterApp
            let port: Int
            let clock: TestClock<Duration>?
            private let group: ServiceGroup
            private let task: Task<Void, any Error>

            var base: String { "http://127.0.0.1:\(port)" }

            /// - Parameter testClock: the router's clock is this one (moved by
            ///   the test) when true, the system's otherwise.
            init(broker: MosquittoBroker, netease: FakeNetEaseAPI, testClock: Bool = true, receiptTimeout: String = "1s") async throws {
                port = try FreePort.next()
                let config = try RouterConfig.parse(
                    """
                    router:
                      listen: 127.0.0.1:\(port)
                      read_token: \(RouterTests.readToken)
                      receipt_timeout: \(receiptTimeout)
                      ledger_key: \(ChainHarness.ledgerKey)
                    bus:
                      urls: [\(broker.url)]
                      username: router
                    \(netease.imSection(replyConcurrency: nil, genericSecret: E2ESite.webhookSecret))

                    """)
                let clock = testClock ? TestClock<Duration>() : nil
                self.clock = clock
                let gameClock = clock.map { GameClock($0, wallNow: { Date() }) } ?? .system
                var logger = Logger(label: "router-under-test")
                logger.logLevel = .debug
                app = try ChainRouterApp.build(config: config, logger: logger, clock: gameClock)
                group = ServiceGroup(configuration: ServiceGroupConfiguration(services: app.services, logger: logger))
                let group = group
                task = Task { try await group.run() }
                try await eventually("the router to listen") { await HTTP.reachable(port: self.port) }
            }

            /// Moves the router's test clock a second at a time, each time
            /// until the router's tick has run: a jump of several seconds
            /// at once would be a router that did not run (a stall).
            func run(for seconds: Int) async throws {
                let clock = try #require(self.clock)
                for _ in 0..<seconds {
                    await clock.advance(by: .seconds(1))
                    let now = app.router.sites.clockNow
                    // 30 s: on a loaded machine (CI runs the chaos runs and the package beside the tests) a tick
                    // once waited over 10 s for a thread of the cooperative pool; waiting longer costs a passing run nothing.
                    try await eventually("the router's tick at \(now)", timeout: .seconds(30)) { app.router.sites.lastAwake == now }
                }
            }

            func readiness() async throws -> HTTP.Answer {
                try await HTTP.get("\(base)/readyz")
            }

            func read(_ path: String, token: String? = RouterTests.readToken) async throws -> HTTP.Answer {
                try await HTTP.request(.GET, "\(base)\(path)", headers: token.map { [("Authorization", "Bearer \($0)")] } ?? [])
            }

            func copy(from player: String, to account: String, _ attach: String) async throws -> (answer: HTTP.Answer, body: [UInt8]) {
                let body = NetEaseCopyBody.encode(from: player, to: account, attach: attach)
                let answer = try await HTTP.request(.POST, "\(base)/im/netease", headers: E2ESite.signedCopyHeaders(body), body: body)
                return (answer, body)
            }

            func metric(_ series: String) async throws -> Double? {
                try PrometheusText(try await read("/metrics").body).samples[series]
            }

            func stop() async {
                await group.triggerGracefulShutdown()
                _ = try? await task.value
            }
        }

        /// A broker, the fake NetEase API, a router and two sites with a
        /// directory each (arcade-1: m1/claw_a1; arcade-2: m1/claw_b1, m2/claw_b2),
        /// the router ready; stopped afterwards, also when `body` throws.
        static func with(
            testClock: Bool = true, receiptTimeout: String = "1s", answering: Bool = true,
            _ body: (RunningRouter, [FakeSite], FakeNetEaseAPI) async throws -> Void
        ) async throws {
            let broker = try MosquittoBroker.start()
            let netease = try await FakeNetEaseAPI()
            let router = try await RunningRouter(broker: broker, netease: netease, testClock: testClock, receiptTimeout: receiptTimeout)
            var sites: [FakeSite] = []
            do {
                sites = [
                    try await FakeSite(broker: broker, name: "arcade-1", answering: answering),
                    try await FakeSite(broker: broker, name: "arcade-2", answering: answering),
                ]
                try sites[0].publishDirectory([("m1", "claw_a1")])
                try sites[1].publishDirectory([("m1", "claw_b1"), ("m2", "claw_b2")])
                try await eventually("the router to hold both directories") { router.app.router.sites.known.count == 2 }
                try await body(router, sites, netease)
            } catch {
                await stopAll(router, sites, netease, broker)
                throw error
            }
            await stopAll(router, sites, netease, broker)
        }

        private static func stopAll(_ router: RunningRouter, _ sites: [FakeSite], _ netease: FakeNetEaseAPI, _ broker: MosquittoBroker) async {
            await router.stop()
            for site in sites { await site.stop() }
            await netease.stop()
            broker.stop()
        }

        /// Both sites heard from now, on the router's clock: the router is ready.
        static func heartbeats(_ router: RunningRouter, _ sites: [FakeSite]) async throws {
            for site in sites { try site.heartbeat() }
            try await eventually("both sites to be reachable and the router ready") {
                let reachable = sites.allSatisfy { router.app.router.sites.liveness(of: $0.name) == .reachable }
                guard reachable else { return false }
                return try await router.readiness().status == 200
            }
        }

        /// Until the router has held a directory and listened 3 s, no machine
        /// is nobody's (ChainSites.settled): 3 s on its clock, the sites beating.
        static func settled(_ router: RunningRouter, _ sites: [FakeSite]) async throws {
            while !router.app.router.sites.settled {
                try await heartbeats(router, sites)
                try await router.run(for: 1)
            }
            try await heartbeats(router, sites)
        }

        /// The command 9 the fake NetEase API delivered to `player`.
        static func refusal(to player: String, in netease: FakeNetEaseAPI) async throws -> (sent: FakeNetEaseAPI.Sent, message: WireMessage) {
            var found: (FakeNetEaseAPI.Sent, WireMessage)?
            try await eventually("a command 9 to \(player)") {
                found = netease.sent.items.filter { $0.to == player }.compactMap { sent in
                    (try? WireMessage.decode(Array(sent.attach.utf8))).map { (sent, $0) }
                }.first { $0.1.code == .error }
                return found != nil
            }
            let (sent, message) = try #require(found)
            return (sent, message)
        }

        @Test func aCopyReachesItsOwnersInboxByteForByteAndTheSitesAnswerComesBack() async throws {
            try await Self.with { router, sites, _ in
                try await Self.heartbeats(router, sites)
                let (answer, body) = try await router.copy(from: "alice", to: "claw_b2", #"{"command":6,"serial":7}"#)
                #expect(answer.status == 200)
                #expect(answer.body == #"{"code":200,"site":"arcade-2"}"#)
                let copy = try #require(sites[1].copies.items.first)
                #expect(copy.body == body)
                #expect(copy.provider == "netease")
                #expect(copy.id.hasPrefix(router.app.config.bus.clientID + "-"))
                #expect(Set(copy.headers.keys) == ["appkey", "curtime", "md5", "checksum"])
                #expect(copy.headers["md5"] == Signatures.md5Hex(body))
                #expect(abs(copy.age(at: Date()).seconds) < 5)
                // The site must not play it after the router gives up on its
                // receipt (receipt_timeout 1 s, less the 200 ms a receipt needs to come back).
                #expect(copy.deadlineMS.map { $0 - copy.receivedMS } == 800)
                #expect(sites[0].copies.items.isEmpty)

                // The generic webhook too, `to` an IM account; ids differ per copy.
                let generic = GenericEnvelope.encode(from: "bob", to: "claw_a1", attach: #"{"command":6}"#)
                let answer2 = try await E2ESite.postGeneric(base: router.base, body: generic)
                #expect(answer2.status == 200 && answer2.body.contains("arcade-1"))
                let second = try #require(sites[0].copies.items.first)
                #expect(second.provider == "generic" && second.body == generic && second.id != copy.id)
                #expect(second.headers.keys.sorted() == ["x-claw-signature", "x-claw-timestamp"])

                #expect(try await router.metric(#"claw_router_routed_total{site="arcade-2"}"#) ?? 0 >= 1)
            }
        }

        /// SPEC §9: the router attaches a voucher to an accept of a machine
        /// whose games cost credits, made with its ledger key over what it
        /// read itself (site, player, session, copy, price); a join, an
        /// accept of a free machine, get none.
        @Test func anAcceptOfAPricedMachineCarriesTheRoutersVoucherAndNothingElseDoes() async throws {
            try await Self.with { router, sites, _ in
                try sites[1].publishDirectory([("m1", "claw_b1"), ("m2", "claw_b2")], prices: ["m2": 3])
                try await eventually("the price known") { router.app.router.sites.price(of: "claw_b2", at: "arcade-2") == 3 }
                try await Self.heartbeats(router, sites)
                _ = try await router.copy(from: "alice", to: "claw_b2", #"{"command":12,"data":"arcade-2-m2-7","serial":3}"#)
                let accept = try #require(sites[1].copies.items.last)
                let voucher = try #require(accept.voucher)
                #expect(voucher.copy == accept.id && voucher.receivedMS == accept.receivedMS && voucher.price == 3)
                #expect(voucher.isValid(key: ChainHarness.ledgerKey, site: "arcade-2", provider: "netease", account: "alice", session: "arcade-2-m2-7"))
                #expect(!voucher.isValid(key: ChainHarness.ledgerKey, site: "arcade-1", provider: "netease", account: "alice", session: "arcade-2-m2-7"))
                _ = try await router.copy(from: "alice", to: "claw_b2", #"{"command":6,"serial":4}"#)
                #expect(sites[1].copies.items.last?.voucher == nil, "a join needs none")
                _ = try await router.copy(from: "alice", to: "claw_b1", #"{"command":12,"data":"arcade-2-m1-1","serial":5}"#)
                #expect(sites[1].copies.items.last?.voucher == nil, "a free machine's accept debits nothing")
                #expect(try await router.metric("claw_router_vouchers_total") == 1)
            }
        }

        @Test func aCopyForNobodysAccountTellsThePlayerUnknownMachineWithTheirSerial() async throws {
            try await Self.with { router, sites, netease in
                try await Self.heartbeats(router, sites)
                try await Self.settled(router, sites)
                let (answer, _) = try await router.copy(from: "carol", to: "claw_nobody", #"{"command":1,"data":"left","serial":42}"#)
                #expect(answer.status == 200 && answer.body == #"{"code":200}"#)
                let (sent, message) = try await Self.refusal(to: "carol", in: netease)
                #expect(message.data == "unknown_machine" && message.serial == 42)
                #expect(sent.from == "claw_nobody" && sent.headerProblem == nil)

                // A machine id two sites both have is nobody's: neither gets it.
                let generic = GenericEnvelope.encode(from: "dave", to: "m1", attach: #"{"command":6,"serial":3}"#)
                let answer2 = try await E2ESite.postGeneric(base: router.base, body: generic)
                #expect(answer2.status == 404 && answer2.json["code"] as? String == "unknown_machine")
                #expect(sites.allSatisfy { $0.copies.items.isEmpty })
            }
        }

        /// A router answers `unknown_machine` only to a real player command,
        /// within its sender's budget: players messaging each other (a custom
        /// notification that is no command of §1) cost no call of the
        /// NetEase API, and a flood of commands to nobody gets one refusal a
        /// second, not one each.
        @Test func messagesBetweenPlayersGetNoAnswerAndAFloodOneRefusalASecond() async throws {
            try await Self.with { router, sites, netease in
                try await Self.heartbeats(router, sites)
                try await Self.settled(router, sites)
                for attach in [#"{"text":"see you at m2"}"#, #"{"command":99,"serial":1}"#, "not json"] {
                    let (answer, _) = try await router.copy(from: "gina", to: "hank", attach)
                    #expect(answer.status == 200, "\(attach)")
                }
                // A real command after them: its refusal is all gina is sent.
                _ = try await router.copy(from: "gina", to: "claw_nobody", #"{"command":6,"serial":5}"#)
                let (_, message) = try await Self.refusal(to: "gina", in: netease)
                #expect(message.serial == 5 && message.data == "unknown_machine")
                #expect(netease.sent.items.filter { $0.to == "gina" }.count == 1, "\(netease.sent.items.filter { $0.to == "gina" })")

                let started = ContinuousClock.now
                for serial in 1...30 {
                    _ = try await router.copy(from: "ivan", to: "claw_nobody", #"{"command":1,"data":"left","serial":\#(serial)}"#)
                }
                let seconds = Double((ContinuousClock.now - started).components.seconds) + 1
                _ = try await Self.refusal(to: "ivan", in: netease)
                let told = netease.sent.items.filter { $0.to == "ivan" }.count
                #expect(told >= 1 && Double(told) <= seconds + 1, "\(told) refusals for 30 commands in under \(seconds) s")
            }
        }

        /// SPEC §9: a router that has just started is not ready before it
        /// knows every site's liveness, and never tells a player
        /// `gateway_unavailable` for a site it has simply not heard from yet.
        @Test func aRouterThatHasJustStartedTriesASiteItHasNotHeardFromYetAndIsNotReady() async throws {
            try await Self.with { router, sites, netease in
                let waiting = try await router.readiness()
                #expect(waiting.status == 503 && waiting.body.contains("heartbeats of arcade-1, arcade-2"), "\(waiting.body)")
                // Not heard from yet: the copy goes to the site, whose receipt answers it.
                let (answer, body) = try await router.copy(from: "erin", to: "claw_a1", #"{"command":6,"serial":5}"#)
                #expect(answer.status == 200 && answer.body.contains("arcade-1"), "\(answer.body)")
                #expect(sites[0].copies.items.map(\.body) == [body])
                #expect(netease.sent.items.filter { $0.to == "erin" }.isEmpty, "no gateway_unavailable")
                try sites[0].heartbeat()
                try await eventually("still waiting for arcade-2 only") {
                    let answer = try await router.readiness()
                    return answer.status == 503 && answer.body.contains("heartbeats of arcade-2")
                }
                try sites[1].heartbeat()
                try await eventually("ready") { try await router.readiness().status == 200 }
            }
        }

        @Test func aSiteWithoutAFreshHeartbeatGetsNothingAndThePlayerIsToldGatewayUnavailable() async throws {
            try await Self.with { router, sites, netease in
                // Never heard from in the 3 s since the router listened: unreachable; the router is ready all the same.
                try await router.run(for: 3)
                try await eventually("ready without a heartbeat") { try await router.readiness().status == 200 }
                #expect(router.app.router.sites.liveness(of: "arcade-1") == .unreachable)
                let (answer, _) = try await router.copy(from: "erin", to: "claw_a1", #"{"command":2,"serial":5}"#)
                #expect(answer.status == 200)
                let (_, message) = try await Self.refusal(to: "erin", in: netease)
                #expect(message.data == "gateway_unavailable" && message.serial == 5)

                // Heard from, then silent for 3 s on the router's clock.
                try await Self.heartbeats(router, sites)
                try await router.run(for: 3)
                #expect(router.app.router.sites.liveness(of: "arcade-1") == .unreachable)
                let (late, _) = try await router.copy(from: "frank", to: "claw_a1", #"{"command":2,"serial":6}"#)
                #expect(late.status == 200)
                let (_, again) = try await Self.refusal(to: "frank", in: netease)
                #expect(again.data == "gateway_unavailable" && again.serial == 6)

                // The next copy after a heartbeat is the first the inbox sees.
                try await Self.heartbeats(router, sites)
                let (routed, body) = try await router.copy(from: "frank", to: "claw_a1", #"{"command":2,"serial":7}"#)
                #expect(routed.status == 200 && routed.body.contains("arcade-1"))
                #expect(sites[0].copies.items.map(\.body) == [body])
            }
        }

        /// SPEC §9, no site speaks for another: a receipt counts only on the
        /// `inbox/ack` of the site the copy went to.
        @Test func aReceiptFromAnotherSiteThanTheCopysIsIgnored() async throws {
            try await Self.with(testClock: false, receiptTimeout: "500ms", answering: false) { router, sites, _ in
                try await Self.heartbeats(router, sites)
                // arcade-1 learns arcade-2's copy ids (here by watching; before, ids were a counter) and answers them itself.
                let url = router.app.config.bus.urls[0]
                let spy = try MQTTClient(
                    configuration: MQTTClientConfiguration(host: url.host, port: url.port, clientID: "spy"), logger: Logger(label: "spy"))
                let attacker = sites[0]
                spy.onMessage { message in
                    guard let copy = ChainCopy.decode(message.payload) else { return }
                    let receipt = ChainReceipt(id: copy.id, status: 200, body: #"{"code":200}"#)
                    try? attacker.publish(attacker.topics.inboxAck, String(decoding: receipt.payload, as: UTF8.self), retain: false)
                }
                let granted = Recorder<MQTTSubscribeAck>()
                spy.onSubscribeAck { granted.append($0) }
                spy.subscribe([sites[1].topics.inbox], qos: .atMostOnce)
                spy.start()
                try await eventually("the spy to listen") { !granted.items.isEmpty }
                let (answer, _) = try await router.copy(from: "gina", to: "claw_b1", #"{"command":6}"#)
                await spy.shutdown()
                #expect(answer.status == 503 && answer.json["code"] as? String == "no_receipt", "\(answer.body)")
                #expect(try await router.metric("claw_router_receipts_foreign_total") ?? 0 >= 1)
            }
        }

        /// SPEC §9: an IM account or machine id that two sites name, in either way, routes to neither.
        @Test func aSiteClaimingAnotherSitesNameTakesNothingOfIt() async throws {
            try await Self.with { router, sites, netease in
                try await Self.heartbeats(router, sites)
                // arcade-2 names as its IM account what is arcade-1's machine id for generic copies, and arcade-1's IM account as a machine id.
                try sites[1].publishDirectory([("m1", "claw_b1"), ("m2", "claw_b2"), ("claw_a1", "a1-generic")])
                try await eventually("the new directory") { router.app.router.sites.owner(of: "a1-generic") == .site("arcade-2") }
                #expect(router.app.router.sites.owner(of: "claw_a1") == .disputed(["arcade-1", "arcade-2"]))
                let (answer, _) = try await router.copy(from: "hal", to: "claw_a1", #"{"command":6,"serial":9}"#)
                #expect(answer.status == 200 && answer.body == #"{"code":200}"#)
                let (_, message) = try await Self.refusal(to: "hal", in: netease)
                #expect(message.data == "unknown_machine")
                #expect(sites.allSatisfy { $0.copies.items.isEmpty }, "neither site got it")
            }
        }

        /// SPEC §9: the router keeps snapshots and presence only for machines
        /// in a site's directory, within bounds.
        @Test func snapshotsOfMachinesNoDirectoryListsAreNotKept() async throws {
            try await Self.with { router, sites, _ in
                try await Self.heartbeats(router, sites)
                let big = QueueSnapshot(
                    machine: "m2", seq: 1, state: .idle, online: true, paused: false, player: nil,
                    waiting: (0..<2000).map { WaitingPlayer(accid: "p\($0)", provider: "netease", nick: String(repeating: "n", count: 90)) })
                for index in 0..<50 {
                    try sites[1].publish("claw/arcade-2/ghost\(index)/queue", String(decoding: big.encoded(), as: UTF8.self))
                    try sites[1].publish("claw/arcade-2/ghost\(index)/state", "online")
                }
                try sites[1].publish("claw/arcade-2/m2/queue", String(decoding: big.encoded(), as: UTF8.self))
                var machines: [[String: Any]] = []
                try await eventually("m2's snapshot") {
                    machines = (try await router.read("/v1/sites").json["sites"] as? [[String: Any]])?.last?["machines"] as? [[String: Any]] ?? []
                    return machines.last?["queue_length"] as? Int == 2000
                }
                #expect(machines.map { $0["id"] as? String } == ["m1", "m2"], "no ghost machine")
                #expect(router.app.router.sites.heldSnapshots == 1, "only the listed machine's snapshot is held")
                #expect(router.app.router.sites.heldWaiting == 0, "and not its waiting list")
                // A directory over the bounds is refused whole; the last one stays.
                try sites[1].publishDirectory((0...ChainSites.maxMachines).map { ("x\($0)", "claw_x\($0)") })
                try sites[1].heartbeat()
                #expect(router.app.router.sites.owner(of: "claw_b2") == .site("arcade-2"))
                #expect(router.app.router.sites.owner(of: "claw_x1") == .nobody)
            }
        }

        @Test func noReceiptInTimeIs503AndALateOneIsCountedAndDropped() async throws {
            // The receipt deadlines run on the router's clock: the system's here, to time the answer.
            try await Self.with(testClock: false, receiptTimeout: "300ms", answering: false) { router, sites, _ in
                try await Self.heartbeats(router, sites)
                let lateBefore = try await router.metric("claw_router_receipts_late_total") ?? 0
                let started = ContinuousClock.now
                let (answer, _) = try await router.copy(from: "gina", to: "claw_b1", #"{"command":6}"#)
                let took = ContinuousClock.now - started
                #expect(answer.status == 503 && answer.json["code"] as? String == "no_receipt")
                #expect(took >= .milliseconds(300) && took < .milliseconds(1800), "answered after \(took)")
                let copy = try #require(sites[1].copies.items.first)
                try sites[1].publish(sites[1].topics.inboxAck, String(decoding: ChainReceipt(id: copy.id, status: 200, body: "{}").payload, as: UTF8.self), retain: false)
                try await eventually("the late receipt to be counted") {
                    (try await router.metric("claw_router_receipts_late_total") ?? 0) == lateBefore + 1
                }
            }
        }

        @Test func aBadCheckSumIs401JSONAndTheAddressCheckAndOtherEventsAre200() async throws {
            try await Self.with { router, sites, _ in
                try await Self.heartbeats(router, sites)
                let body = NetEaseCopyBody.encode(from: "hank", to: "claw_a1", attach: #"{"command":6}"#)
                var headers = E2ESite.signedCopyHeaders(body)
                headers = headers.map { $0.0 == "CheckSum" ? ($0.0, String(repeating: "0", count: 40)) : $0 }
                let refused = try await HTTP.request(.POST, "\(router.base)/im/netease", headers: headers, body: body)
                #expect(refused.status == 401 && refused.json["code"] as? String == "unauthorized")
                #expect(refused.json["message"] is String)

                let check = Array("{}".utf8)
                let answer = try await HTTP.request(.POST, "\(router.base)/im/netease", headers: E2ESite.signedCopyHeaders(check), body: check)
                #expect(answer.status == 200 && answer.body == #"{"code":200}"#)
                let chat = Array(#"{"eventType":"2","fromAccount":"hank"}"#.utf8)
                let other = try await HTTP.request(.POST, "\(router.base)/im/netease", headers: E2ESite.signedCopyHeaders(chat), body: chat)
                #expect(other.status == 200)

                let generic = GenericEnvelope.encode(from: "hank", to: "claw_a1", attach: "{}")
                let unsigned = try await E2ESite.postGeneric(base: router.base, body: generic, secret: "not-the-secret")
                #expect(unsigned.status == 401 && unsigned.json["code"] as? String == "unauthorized")
                #expect(sites.allSatisfy { $0.copies.items.isEmpty })
            }
        }

        @Test func beatsReachEveryKnownSitesInboxEverySecond() async throws {
            try await Self.with(testClock: false) { router, sites, _ in
                var firstFour: [ContinuousClock.Instant] = []
                try await eventually("four beats on arcade-2's inbox", timeout: .seconds(15)) {
                    firstFour = Array(sites[1].beats.items.prefix(4))
                    return firstFour.count == 4 && !sites[0].beats.items.isEmpty
                }
                let span = firstFour[3] - firstFour[0]
                #expect(span > .milliseconds(2500) && span < .milliseconds(4500), "three beat intervals took \(span)")
                #expect(try await router.metric("claw_router_beats_total") ?? 0 >= 5)
            }
        }

        @Test func sitesAreListedSortedBehindTheReadTokenWithNullsWhereNothingIsKnown() async throws {
            try await Self.with { router, sites, _ in
                try await Self.heartbeats(router, sites)
                try sites[1].publish("claw/arcade-2/m2/state", "online")
                try sites[1].publish(
                    "claw/arcade-2/m2/queue",
                    String(
                        decoding: QueueSnapshot(
                            machine: "m2", seq: 3, state: .playing, online: true, paused: false,
                            player: CurrentPlayer(accid: "ivy", provider: "netease", nick: "Ivy", session: "s1", deadline: nil),
                            waiting: [WaitingPlayer(accid: "jo", provider: "netease", nick: "Jo")]
                        ).encoded(), as: UTF8.self))
                try sites[1].publish("claw/arcade-2/gateway/state", "online")

                #expect(try await router.read("/v1/sites", token: nil).status == 401)
                #expect(try await router.read("/v1/sites", token: "wrong-token-0123456789").status == 401)
                var listed: [[String: Any]] = []
                try await eventually("m2's snapshot on /v1/sites") {
                    listed = try await router.read("/v1/sites").json["sites"] as? [[String: Any]] ?? []
                    let machines = listed.last?["machines"] as? [[String: Any]] ?? []
                    return machines.last?["queue_length"] as? Int == 1 && machines.last?["online"] as? Bool == true
                }
                #expect(listed.map { $0["site"] as? String } == ["arcade-1", "arcade-2"])
                #expect(listed.allSatisfy { $0["reachable"] as? Bool == true })
                let machines = try #require(listed[1]["machines"] as? [[String: Any]])
                #expect(machines.map { $0["id"] as? String } == ["m1", "m2"])
                let keys: Set<String> = ["id", "name", "im_account", "online", "state", "paused", "suspect", "queue_length", "player", "cameras"]
                #expect(machines.allSatisfy { Set($0.keys) == keys })
                #expect(machines[1]["state"] as? String == "playing")
                #expect((machines[1]["player"] as? [String: Any])?["accid"] as? String == "ivy")
                #expect(machines[1]["name"] as? String == "Machine m2" && machines[1]["im_account"] as? String == "claw_b2")
                // Nothing heard of m1 but its directory entry: null, not left out.
                #expect(machines[0]["online"] is NSNull && machines[0]["state"] is NSNull && machines[0]["player"] is NSNull)
                #expect(machines[0]["cameras"] is NSNull)

                try await router.run(for: 3)
                let stale = try await router.read("/v1/sites").json["sites"] as? [[String: Any]] ?? []
                #expect(stale.allSatisfy { $0["reachable"] as? Bool == false })
                #expect(try await router.read("/metrics", token: nil).status == 401)
                // The page itself needs no token (it asks for one to read /v1/sites); only the Host is checked.
                let page = try await router.read("/dashboard", token: nil)
                #expect(page.status == 200 && page.body.contains("<html"))
                let elsewhere = try await HTTP.request(.GET, "\(router.base)/dashboard", headers: [("Host", "evil.example")])
                #expect(elsewhere.status == 421)
            }
        }

        @Test func notReadyBeforeADirectoryAndReadyAfter() async throws {
            let broker = try MosquittoBroker.start()
            let netease = try await FakeNetEaseAPI()
            let router = try await RunningRouter(broker: broker, netease: netease)
            var site: FakeSite?
            do {
                try await eventually("readyz to say there is no directory") {
                    let answer = try await router.readiness()
                    return answer.status == 503 && answer.body.contains("no site's directory")
                }
                #expect(try await router.readiness().json["code"] as? String == "not_ready")
                #expect(try await HTTP.get("\(router.base)/healthz").status == 200)
                site = try await FakeSite(broker: broker, name: "arcade-9")
                try site?.publishDirectory([("m1", "claw_z1")])
                try site?.heartbeat()
                try await eventually("readyz to be 200") { try await router.readiness().status == 200 }
            } catch {
                Issue.record(error)
            }
            await router.stop()
            await site?.stop()
            await netease.stop()
            broker.stop()
        }

        @Test func routeRunsAsACommandAndStopsOnSIGTERMWithStatus0() async throws {
            let broker = try MosquittoBroker.start()
            let directory = try TemporaryDirectory.make(prefix: "route")
            defer { try? FileManager.default.removeItem(at: directory) }
            let port = try FreePort.next()
            let file = directory.appendingPathComponent("chain.yaml")
            try """
                router: { listen: 127.0.0.1:\(port) }
                bus: { urls: [\(broker.url)] }
                im: { generic: { secret: \(E2ESite.webhookSecret) } }

                """.write(to: file, atomically: true, encoding: .utf8)
            let log = directory.appendingPathComponent("route.log")
            let process = try GatewayBinary.start(["route", "--config", file.path], log: log)
            let site = try await FakeSite(broker: broker, name: "arcade-1")
            do {
                try site.publishDirectory([("m1", "claw_a1")])
                try await eventually("the route command to be ready", timeout: .seconds(20)) {
                    (try? await HTTP.get("http://127.0.0.1:\(port)/readyz"))?.status == 200
                }
                try await eventually("a beat from the route command") { !site.beats.items.isEmpty }
            } catch {
                process.signal(SIGKILL)
                _ = process.wait()
                await site.stop()
                throw error
            }
            process.signal(SIGTERM)
            let status = await process.wait(timeout: 10)
            if status == nil {
                process.signal(SIGKILL)
                _ = process.wait()
            }
            #expect(status == 0, "route exited \(String(describing: status)); its log:\n\((try? String(contentsOf: log, encoding: .utf8)) ?? "")")
            await site.stop()
            broker.stop()
        }

        @Test func routeRefusesABadChainYamlWithExitStatus78NamingTheKey() throws {
            let directory = try TemporaryDirectory.make(prefix: "route-config")
            defer { try? FileManager.default.removeItem(at: directory) }
            let file = directory.appendingPathComponent("chain.yaml")
            try "router:\n  recipt_timeout: 1s\nbus:\n  urls: [mqtt://127.0.0.1:1]\nim:\n  generic: { secret: s }\n".write(
                to: file, atomically: true, encoding: .utf8)
            let result = try GatewayBinary.run(["route", "--config", file.path])
            #expect(result.status == 78)
            #expect(result.error.contains("router.recipt_timeout: unknown key (did you mean receipt_timeout?)"))
        }
    }
}
