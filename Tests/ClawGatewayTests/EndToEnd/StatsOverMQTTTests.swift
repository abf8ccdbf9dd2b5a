import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// `claw/<m>/stats` and `claw/gateway/stats` as an operator sees them with
    /// `mosquitto_sub -V 5`: every machine every interval, idle ones too,
    /// never retained, each message expiring after one interval.
    @Suite(.serialized) struct StatsOverMQTTTests {
        /// One line per message: topic, retain flag, message expiry, payload.
        static let format = "%t|%r|%E|%p"

        @Test func everyMachineReportsEveryIntervalNotRetainedAndExpiring() async throws {
            try await E2ESite.with(gateway: "stats_interval: 1s") { site in
                let lines = site.site.directory.appendingPathComponent("stats.txt")
                let sub = try ChildProcess(
                    "/usr/bin/mosquitto_sub",
                    ["-h", "127.0.0.1", "-p", String(site.broker.port), "-V", "5", "-t", "claw/+/stats", "-F", Self.format],
                    output: lines)
                defer {
                    sub.signal(SIGTERM)
                    sub.wait()
                }
                // A game on m1 while the subscriber listens; m2 stays idle.
                try await eventually("the subscriber to receive stats") { Self.read(lines).count >= 3 }
                try await site.generic(from: "ann", #"{"command":6}"#)
                try await site.generic(from: "ann", #"{"command":12,"data":"\#(try await site.currentSession())"}"#)
                try await site.generic(from: "ann", #"{"command":1,"data":"left","serial":1}"#)
                try await site.generic(from: "bob", #"{"command":1,"data":"left","serial":1}"#)
                try await eventually("m1's stats to count the game", timeout: .seconds(15)) {
                    Self.reports(Self.read(lines), "m1").reduce(0) { $0 + $1.commands } >= 2
                }
                try await eventually("three more rounds", timeout: .seconds(15)) {
                    Self.reports(Self.read(lines), "m2").count >= 4
                }
                let all = Self.read(lines)
                #expect(all.allSatisfy { $0.retained == "0" }, "never retained")
                #expect(all.allSatisfy { $0.expiry == "1" }, "each expires after one interval: \(all.map(\.expiry))")
                #expect(Set(all.map(\.topic)).isSuperset(of: ["claw/m1/stats", "claw/m2/stats", "claw/gateway/stats"]))

                let m1 = Self.reports(all, "m1")
                #expect(m1.reduce(0) { $0 + $1.acks } >= 2, "the simulated PC's acks")
                #expect(m1.reduce(0) { $0 + ($1.dropped["not_your_turn"] ?? 0) } == 1)
                #expect(m1.last?.gamesToday == 1)
                #expect(m1.contains { $0.ackLatencyMs.max > 0 })

                let m2 = Self.reports(all, "m2")
                #expect(m2.allSatisfy { $0.commands == 0 && $0.acks == 0 && $0.online && $0.state == .idle }, "idle: zeros, not silence")
                #expect(m2.allSatisfy { $0.intervalSeconds == 1 })
                // Cadence: one a second, give or take a loaded machine (a late
                // tick is not made up for, so a gap may be up to two).
                let parser = ISO8601DateFormatter()
                parser.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
                let times = m2.compactMap { parser.date(from: $0.ts) }
                #expect(times.count == m2.count)
                for (earlier, later) in zip(times, times.dropFirst()) {
                    #expect((0.5...2.5).contains(later.timeIntervalSince(earlier)), "\(earlier) → \(later)")
                }
                if let first = times.first, let last = times.last, times.count > 2 {
                    let mean = last.timeIntervalSince(first) / Double(times.count - 1)
                    #expect((0.8...1.5).contains(mean), "one report a second on average: \(mean)")
                }

                let gateway = all.filter { $0.topic == "claw/gateway/stats" }.compactMap {
                    try? JSONDecoder().decode(GatewayStatsReport.self, from: Data($0.payload.utf8))
                }
                func notifications(_ result: String) -> Int {
                    gateway.reduce(0) { $0 + ($1.notifications["generic"]?[result] ?? 0) }
                }
                #expect(notifications("forwarded") == 1 && notifications("accepted") == 1 && notifications("not_your_turn") == 1)
                #expect(gateway.allSatisfy { $0.gateway == "test" && $0.mqttReconnects == 0 })
                #expect(gateway.last.map { $0.uptimeSeconds >= 3 } == true)
            }
        }

        struct Line {
            var topic, retained, expiry, payload: String
        }

        static func read(_ file: URL) -> [Line] {
            let text = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { line in
                let parts = line.split(separator: "|", maxSplits: 3, omittingEmptySubsequences: false).map(String.init)
                guard parts.count == 4, parts[3].hasSuffix("}") else { return nil }
                return Line(topic: parts[0], retained: parts[1], expiry: parts[2], payload: parts[3])
            }
        }

        static func reports(_ lines: [Line], _ machine: String) -> [MachineStatsReport] {
            lines.filter { $0.topic == "claw/\(machine)/stats" }.compactMap {
                try? JSONDecoder().decode(MachineStatsReport.self, from: Data($0.payload.utf8))
            }
        }
    }
}
