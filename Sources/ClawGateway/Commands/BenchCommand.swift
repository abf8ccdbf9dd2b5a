import ArgumentParser
import AsyncHTTPClient
import Foundation
import Logging

/// `claw-gateway bench`: the figures of docs/BENCHMARKS.md.
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Measure latency, throughput, memory and start-up against a broker and gateway it starts on loopback.",
        discussion: "Run a release build: ./scripts/bench. See docs/BENCHMARKS.md."
    )

    @Option(help: "Samples for the one-at-a-time latencies.")
    var samples = 2000
    @Option(help: "Seconds of the throughput run.")
    var seconds = 10
    @Option(help: "Keep-alive connections of the throughput run.")
    var connections = 8
    @Option(help: "Machines in the throughput run, each with a player in a game.")
    var machines = 100
    @Option(help: "Machines of the memory run.")
    var memoryMachines = 1000
    @Option(help: "Players queued in the memory run.")
    var memoryPlayers = 10_000

    @Option(help: "Instead of the scenarios: a soak of this length (e.g. 10m) at --rate, printing the gateway's RSS.")
    var soak: String?
    @Option(help: "Notifications a second during --soak.")
    var rate = 1000

    func run() async throws {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .warning
            return handler
        }
        var bench = Benchmark()
        bench.samples = samples
        bench.seconds = seconds
        bench.connections = connections
        bench.machines = max(2, machines)
        bench.memoryMachines = memoryMachines
        bench.memoryPlayers = memoryPlayers
        let site = try BenchSite()
        defer { site.stop() }
        let http = HTTPClient.shared
        try site.startBroker()
        print("claw-gateway bench: \(ProcessInfo.processInfo.activeProcessorCount) cores, broker, gateway and load generator on one machine")
        if let soak {
            guard let duration = ConfigDuration.parse(soak) else { throw ValidationError("--soak must be a duration such as 10m.") }
            try site.writeConfig(machines: bench.machines)
            try site.startGateway()
            try await bench.waitReady(site, http)
            try site.startSimulator()
            try await bench.waitOnline(site, http, count: bench.machines)
            print("soak: \(rate) notifications/s for \(soak) across \(bench.machines - 1) machines")
            print("elapsed     RSS        answered     errors")
            try await bench.soak(site: site, duration: duration, rate: rate, every: .seconds(30)) { sample in
                print(String(
                    format: "%5.0f s  %6.1f MiB  %10d  %8d", sample.elapsed.seconds, Double(sample.rss) / 1_048_576,
                    sample.requests, sample.errors))
            }
            return
        }

        let raw = try await bench.rawBaseline(site: site)
        try site.writeConfig(machines: bench.machines)
        let startUp = try await bench.startUp(site: site, http: http)
        try site.startSimulator()
        try await bench.waitOnline(site, http, count: bench.machines)
        let (delivery, response) = try await bench.endToEnd(site: site, http: http)
        let throughput = try await bench.throughput(site: site)
        site.stop()

        let memorySite = try BenchSite()
        defer { memorySite.stop() }
        try memorySite.startBroker()
        let (rss, queued) = try await bench.memory(site: memorySite, http: http)

        func us(_ duration: Duration) -> String { String(format: "%8.0f µs", duration.seconds * 1e6) }
        func ratio(_ duration: Duration) -> String { String(format: "%5.2f×", duration.seconds / max(raw.percentile(0.5).seconds, 1e-9)) }
        print("")
        print("scenario                                     p50          p99          max   p50 / raw p50")
        print("(a) raw: publish → delivery (mosquitto) \(us(raw.percentile(0.5)))  \(us(raw.percentile(0.99)))  \(us(raw.max))")
        print("(b) callback POST → command at subscriber\(us(delivery.percentile(0.5)))  \(us(delivery.percentile(0.99)))  \(us(delivery.max))   \(ratio(delivery.percentile(0.5)))")
        print("(b) callback POST → HTTP response       \(us(response.percentile(0.5)))  \(us(response.percentile(0.99)))  \(us(response.max))   \(ratio(response.percentile(0.5)))")
        print("")
        print(String(
            format: "(c) throughput, %d connections, %d machines, %ds: %.0f requests/s, %.0f commands delivered/s, %d errors, %d forwarded, %d delivered, %d lost",
            bench.connections, bench.machines, bench.seconds, Double(throughput.requests) / throughput.seconds,
            Double(throughput.delivered) / throughput.seconds, throughput.errors, throughput.forwarded, throughput.delivered,
            max(0, throughput.forwarded - throughput.delivered)))
        print(String(format: "(d) peak RSS with %d machines and %d queued players: %.1f MiB", bench.memoryMachines, queued, Double(rss) / 1_048_576))
        print(String(format: "(e) start-up, process start → /readyz 200 (%d machines): %.0f ms", bench.machines, startUp.seconds * 1000))
    }
}
