import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import Synchronization

/// The scenarios of docs/BENCHMARKS.md, each against real processes on loopback.
struct Benchmark {
    var samples = 2000
    var seconds = 10
    var connections = 8
    var machines = 100
    var memoryMachines = 1000
    var memoryPlayers = 10_000
    let logger = Logger(label: "claw-bench")

    struct Latencies {
        var values: [Duration] = []
        func percentile(_ p: Double) -> Duration {
            let sorted = values.sorted()
            guard !sorted.isEmpty else { return .zero }
            return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
        }
        var max: Duration { values.max() ?? .zero }
    }

    // MARK: (a) raw broker baseline

    func rawBaseline(site: BenchSite) async throws -> Latencies {
        let publisher = try client(site, "bench-raw-pub")
        publisher.start()
        let subscriber = try await subscribed(site, "bench-raw-sub", to: "bench/raw", settle: .zero)
        defer { Task { await publisher.shutdown(); await subscriber.shutdown() } }
        try await waitConnected(publisher)
        var messages = subscriber.messages.makeAsyncIterator()
        try await warmUp(publisher: publisher, topic: "bench/raw", messages: &messages)
        var latencies = Latencies()
        let payload = Array(#"{"command":1,"data":"left","serial":1,"session":"s","player":"p"}"#.utf8)
        for _ in 0..<samples {
            let start = ContinuousClock.now
            try publisher.publish("bench/raw", payload: payload, qos: .atMostOnce)
            _ = await messages.next()
            latencies.values.append(ContinuousClock.now - start)
        }
        return latencies
    }

    // MARK: (b) one at a time, end to end

    func endToEnd(site: BenchSite, http: HTTPClient) async throws -> (delivery: Latencies, response: Latencies) {
        let machine = BenchSite.machineID(1)
        let subscriber = try await subscribed(site, "bench-e2e-sub", to: "claw/\(machine)/control", settle: .milliseconds(200))
        defer { Task { await subscriber.shutdown() } }
        var messages = subscriber.messages.makeAsyncIterator()
        try await startGame(site: site, http: http, machine: machine, player: "bench-b")
        let base = site.base
        var delivery = Latencies(), response = Latencies()
        for index in 0..<samples {
            let request = Self.copy(base: base, from: "bench-b", machine: machine, attach: #"{"command":1,"data":"\#(index % 2 == 0 ? "left" : "right")","serial":\#(index + 1)}"#)
            let start = ContinuousClock.now
            async let answer = http.execute(request, timeout: .seconds(10))
            var message = await messages.next()
            while let current = message, !current.payload.starts(with: Array(#"{"command":1,"#.utf8)) {
                message = await messages.next()
            }
            delivery.values.append(ContinuousClock.now - start)
            let result = try await answer
            _ = try await result.body.collect(upTo: 1 << 16)
            response.values.append(ContinuousClock.now - start)
        }
        return (delivery, response)
    }

    // MARK: (c) throughput

    struct Throughput {
        var requests = 0
        var errors = 0
        var forwarded = 0
        var delivered = 0
        var seconds: Double
    }

    func throughput(site: BenchSite) async throws -> Throughput {
        let http = loadClient()
        defer { Task { try? await http.shutdown() } }
        for index in 2...machines {
            try await startGame(site: site, http: http, machine: BenchSite.machineID(index), player: "bench-c\(index)")
        }
        let subscriber = try await subscribed(site, "bench-c-sub", to: "claw/+/control", settle: .milliseconds(300))
        defer { Task { await subscriber.shutdown() } }
        let delivered = SharedCounter(0)
        let counter = Task {
            let move = Array(#"{"command":1,"#.utf8)
            for await message in subscriber.messages where message.payload.starts(with: move) {
                delivered.increment()
            }
        }
        let forwardedBefore = try await metric(site, http, "claw_commands_forwarded_total")
        let serial = SharedCounter(1_000_000)
        let deadline = ContinuousClock.now + .seconds(seconds)
        let started = ContinuousClock.now
        let machines = machines, connections = connections, base = site.base
        let (requests, errors) = try await withThrowingTaskGroup(of: (Int, Int).self) { group in
            for worker in 0..<connections {
                group.addTask {
                    var requests = 0, errors = 0, turn = worker
                    while ContinuousClock.now < deadline {
                        let index = 2 + turn % (machines - 1)
                        turn += connections
                        let number = serial.increment()
                        let request = Self.copy(
                            base: base, from: "bench-c\(index)", machine: BenchSite.machineID(index),
                            attach: #"{"command":1,"data":"up","serial":\#(number)}"#)
                        do {
                            let response = try await http.execute(request, timeout: .seconds(10))
                            _ = try await response.body.collect(upTo: 1 << 16)
                            if response.status == .ok { requests += 1 } else { errors += 1 }
                        } catch {
                            errors += 1
                        }
                    }
                    return (requests, errors)
                }
            }
            return try await group.reduce((0, 0)) { ($0.0 + $1.0, $0.1 + $1.1) }
        }
        let elapsed = (ContinuousClock.now - started).seconds
        try await Task.sleep(for: .seconds(1))
        let forwarded = try await metric(site, http, "claw_commands_forwarded_total") - forwardedBefore
        counter.cancel()
        return Throughput(requests: requests, errors: errors, forwarded: forwarded, delivered: delivered.value, seconds: elapsed)
    }

    // MARK: Soak

    struct SoakSample {
        var elapsed: Duration
        var rss: Int
        var requests: Int
        var errors: Int
    }

    /// `rate` moves a second, paced, across the machines of (c) for `duration`;
    /// the gateway's RSS every `every`.
    func soak(site: BenchSite, duration: Duration, rate: Int, every: Duration, report: (SoakSample) -> Void) async throws {
        guard let gateway = site.gateway else { throw BenchError("no gateway running") }
        let http = loadClient()
        defer { Task { try? await http.shutdown() } }
        for index in 2...machines {
            try await startGame(site: site, http: http, machine: BenchSite.machineID(index), player: "soak\(index)")
        }
        let requests = SharedCounter(0), errors = SharedCounter(0), serial = SharedCounter(10_000_000)
        let start = ContinuousClock.now
        let end = start + duration
        let interval = Duration.seconds(Double(connections) / Double(rate))
        let machines = machines, connections = connections, base = site.base
        let load = Task {
            await withTaskGroup(of: Void.self) { group in
                for worker in 0..<connections {
                    group.addTask {
                        var next = start + interval * Double(worker) / Double(connections)
                        var turn = worker
                        while next < end {
                            try? await Task.sleep(until: next, clock: .continuous)
                            next += interval
                            let index = 2 + turn % (machines - 1)
                            turn += connections
                            let request = Self.copy(
                                base: base, from: "soak\(index)", machine: BenchSite.machineID(index),
                                attach: #"{"command":1,"data":"up","serial":\#(serial.increment())}"#)
                            do {
                                let response = try await http.execute(request, timeout: .seconds(10))
                                _ = try await response.body.collect(upTo: 1 << 16)
                                if response.status == .ok { requests.increment() } else { errors.increment() }
                            } catch {
                                errors.increment()
                            }
                        }
                    }
                }
            }
        }
        let sample = {
            SoakSample(
                elapsed: ContinuousClock.now - start, rss: BenchSite.rss(pid: gateway.processIdentifier) ?? 0,
                requests: requests.value, errors: errors.value)
        }
        var sampleAt = start
        while sampleAt < end {
            try await Task.sleep(until: sampleAt, clock: .continuous)
            report(sample())
            sampleAt += every
        }
        await load.value
        report(sample())
    }

    // MARK: (d) memory

    func memory(site: BenchSite, http: HTTPClient) async throws -> (rss: Int, queued: Int) {
        try site.writeConfig(machines: memoryMachines, maxQueue: max(200, memoryPlayers / memoryMachines + 1))
        let gateway = try site.startGateway()
        try await waitReady(site, http)
        let total = memoryPlayers, machines = memoryMachines, base = site.base
        let next = SharedCounter(0)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<connections {
                group.addTask {
                    while true {
                        let player = next.increment()
                        guard player <= total else { return }
                        let machine = BenchSite.machineID(1 + player % machines)
                        let response = try await http.execute(
                            Self.copy(base: base, from: "queued\(player)", machine: machine, attach: #"{"command":6}"#), timeout: .seconds(30))
                        _ = try await response.body.collect(upTo: 1 << 16)
                    }
                }
            }
            try await group.waitForAll()
        }
        let list = try await get(http, "\(site.base)/v1/machines")
        let object = try JSONSerialization.jsonObject(with: Data(list.utf8)) as? [String: Any]
        let queued = (object?["machines"] as? [[String: Any]])?.reduce(0) { $0 + (($1["queue_length"] as? Int) ?? 0) } ?? 0
        return (BenchSite.peakRSS(pid: gateway.processIdentifier) ?? 0, queued)
    }

    // MARK: (e) start-up

    /// From spawning the gateway to its first 200 on /readyz.
    func startUp(site: BenchSite, http: HTTPClient) async throws -> Duration {
        let start = ContinuousClock.now
        try site.startGateway()
        try await waitReady(site, http, pollEvery: .milliseconds(1))
        return ContinuousClock.now - start
    }

    // MARK: Helpers

    static func copy(base: String, from player: String, machine: String, attach: String) -> HTTPClientRequest {
        NetEaseCopyBody.signedRequest(url: base + "/im/netease", settings: neteaseSettings, from: player, to: "acc_\(machine)", attach: attach)
    }

    static let neteaseSettings = NetEaseSettings(
        appKey: BenchSite.appKey, appSecret: BenchSite.appSecret, apiBase: "", callbackPath: "/im/netease",
        maxClockSkew: .seconds(300), replyTimeout: .seconds(1), replyConcurrency: 1)

    /// A client with `connections` keep-alive connections to the gateway.
    func loadClient() -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: connections)
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// Joins `player` to a free, online machine and accepts the offer.
    func startGame(site: BenchSite, http: HTTPClient, machine: String, player: String) async throws {
        let base = site.base
        _ = try await http.execute(Self.copy(base: base, from: player, machine: machine, attach: #"{"command":6}"#), timeout: .seconds(10))
        let detail = try await get(http, "\(site.base)/v1/machines/\(machine)")
        guard let object = try JSONSerialization.jsonObject(with: Data(detail.utf8)) as? [String: Any],
            let holder = object["player"] as? [String: Any], holder["accid"] as? String == player,
            let session = holder["session"] as? String
        else { throw BenchError("\(player) was not offered \(machine): \(detail)") }
        _ = try await http.execute(Self.copy(base: base, from: player, machine: machine, attach: #"{"command":12,"data":"\#(session)"}"#), timeout: .seconds(10))
    }

    func waitReady(_ site: BenchSite, _ http: HTTPClient, pollEvery: Duration = .milliseconds(20)) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let response = try? await http.execute(HTTPClientRequest(url: site.base + "/readyz"), timeout: .seconds(1)),
                response.status == .ok
            {
                return
            }
            try await Task.sleep(for: pollEvery)
        }
        throw BenchError("the gateway did not become ready; its log:\n" + site.logTail("gateway.log"))
    }

    /// Waits until the simulator has every machine online.
    func waitOnline(_ site: BenchSite, _ http: HTTPClient, count: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            let list = try await get(http, "\(site.base)/v1/machines")
            if list.components(separatedBy: #""online":true"#).count - 1 == count { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw BenchError("the simulated machines did not come online")
    }

    func get(_ http: HTTPClient, _ url: String) async throws -> String {
        let response = try await http.execute(HTTPClientRequest(url: url), timeout: .seconds(10))
        return String(buffer: try await response.body.collect(upTo: 1 << 24))
    }

    /// The sum of a metric's samples on /metrics.
    func metric(_ site: BenchSite, _ http: HTTPClient, _ name: String) async throws -> Int {
        let text = try await get(http, site.base + "/metrics")
        return text.split(separator: "\n").filter { $0.hasPrefix(name + "{") || $0.hasPrefix(name + " ") }
            .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0) { $0 + Int($1) }
    }

    private func client(_ site: BenchSite, _ id: String) throws -> MQTTClient {
        try MQTTClient(configuration: MQTTClientConfiguration(host: "127.0.0.1", port: site.brokerPort, clientID: id), logger: logger)
    }

    /// A started, connected client subscribed to `topic` at QoS 0; `settle`
    /// gives the broker time to register the subscription.
    private func subscribed(_ site: BenchSite, _ id: String, to topic: String, settle: Duration) async throws -> MQTTClient {
        let subscriber = try client(site, id)
        subscriber.subscribe([topic], qos: .atMostOnce)
        subscriber.start()
        try await waitConnected(subscriber)
        try await Task.sleep(for: settle)
        return subscriber
    }

    private func waitConnected(_ clients: MQTTClient...) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !clients.allSatisfy(\.isConnected) {
            guard ContinuousClock.now < deadline else { throw BenchError("could not connect to the broker") }
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    /// Publishes until the subscription is live, then drains the warm-up messages.
    private func warmUp(publisher: MQTTClient, topic: String, messages: inout AsyncStream<MQTTMessage>.Iterator) async throws {
        let warm = Array("warm".utf8)
        let pump = Task {
            while !Task.isCancelled {
                try? publisher.publish(topic, payload: warm, qos: .atMostOnce)
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        _ = await messages.next()
        pump.cancel()
        _ = await pump.value
        try await Task.sleep(for: .milliseconds(100))
        // Whatever warm-up messages are still buffered: consume with a marker.
        try publisher.publish(topic, payload: Array("end".utf8), qos: .atMostOnce)
        while let message = await messages.next(), message.payload != Array("end".utf8) {}
    }
}

/// A counter shared by the load generator's tasks.
final class SharedCounter: Sendable {
    private let atomic: Atomic<Int>
    init(_ start: Int) { atomic = Atomic(start) }
    @discardableResult
    func increment() -> Int { atomic.add(1, ordering: .relaxed).newValue }
    var value: Int { atomic.load(ordering: .relaxed) }
}
