import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// SPEC §13, "No copy refused during a restart": started through
    /// `claw-gateway.socket`, the gateway takes the HTTP socket systemd holds
    /// (here the test holds it), so the IM service's copies wait in the
    /// kernel's queue while it restarts and every one is answered.
    @Suite(.serialized) struct SocketActivationTests {
        /// A listening TCP socket on 127.0.0.1:`port` (0: any free port), as
        /// systemd makes one for `ListenStream=` (with `ReuseAddress=yes`).
        private static func listeningSocket(on host: String = "127.0.0.1", port: Int = 0) throws -> (descriptor: CInt, port: Int) {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var on: CInt = 1
            setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<CInt>.size))
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr(host)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0, listen(descriptor, 1024) == 0 else { throw BrokerError("cannot listen: \(errno)") }
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
            }
            return (descriptor, Int(UInt16(bigEndian: address.sin_port)))
        }

        /// What became of one copy.
        enum Outcome: Sendable, Equatable {
            /// The connection was refused: what socket activation prevents.
            case refused
            /// Connected, then closed without an answer.
            case closed
            case answered(Int)
        }

        /// One copy: when its connection was made, when it ended, and how.
        struct Attempt: Sendable {
            var connected: ContinuousClock.Instant
            var ended: ContinuousClock.Instant
            var outcome: Outcome
        }

        /// One signed NetEase copy on a connection of its own, as the IM
        /// service sends it (HTTP/1.1, keep-alive; the test drops the
        /// connection after the answer).
        private static func copy(port: Int, from player: String, _ attach: String) -> Attempt {
            let body = NetEaseCopyBody.encode(from: player, to: "claw_m1", attach: attach)
            let headers = E2ESite.signedCopyHeaders(body).map { "\($0.0): \($0.1)\r\n" }.joined()
            let connected = ContinuousClock.now
            guard let connection = try? RawSocket(port: port) else { return Attempt(connected: connected, ended: .now, outcome: .refused) }
            connection.send(
                "POST /im/netease HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    + "Content-Length: \(body.count)\r\n\(headers)\r\n")
            connection.send(body)
            let answer = connection.read(until: "\r\n\r\n", timeout: .seconds(30))
            guard answer.hasPrefix("HTTP/1.1 "), let code = Int(answer.dropFirst(9).prefix(3)) else {
                return Attempt(connected: connected, ended: .now, outcome: .closed)
            }
            return Attempt(connected: connected, ended: .now, outcome: .answered(code))
        }

        /// Whether a copy went out after `stopped`, or the last one ended before it (the next one then goes out after it).
        private static func sentWhileDown(_ list: [Attempt], after stopped: ContinuousClock.Instant) -> Bool {
            list.contains { $0.connected > stopped } || (list.last.map { $0.ended < stopped } ?? false)
        }

        private static func sent(_ list: [Attempt], after instant: ContinuousClock.Instant) -> Int {
            list.filter { $0.connected > instant }.count
        }

        private static func describe(_ list: [Attempt]) -> String {
            list.map { "\($0.outcome)" }.joined(separator: ", ")
        }

        /// A socket unit whose `ListenStream=` is not `http.listen` (another
        /// port, another address) is a start-up error naming both, exit 78
        /// like a config error; the gateway touches nothing first.
        @Test(arguments: ["port", "address"])
        func aPassedSocketOnAnotherAddressThanHTTPListenIsRefusedNamingBoth(_ differs: String) async throws {
            try await E2ESite.with(simulate: false) { site in
                try await site.waitReady()
                await site.stopGateway()
                let state = try await TestSubscriber(broker: site.broker, topics: ["claw/gateway/state"])
                try await state.waitFor("claw/gateway/state") { $0 == "offline" }
                let (socket, port) = differs == "port" ? try Self.listeningSocket() : try Self.listeningSocket(on: "127.0.0.2", port: site.site.httpPort)
                defer { close(socket) }
                let logged = site.site.logText.count
                try site.startGateway(passing: socket)
                let status = await site.gateway?.wait(timeout: 15)
                #expect(status == ExitStatus.configError)
                let said = String(site.site.logText.dropFirst(logged))
                let passed = differs == "port" ? "127.0.0.1:\(port)" : "127.0.0.2:\(site.site.httpPort)"
                for text in ["listen_mismatch", passed, "http.listen is 127.0.0.1:\(site.site.httpPort)", "ListenStream="] {
                    #expect(said.contains(text), "\(text) in: \(said)")
                }
                #expect(!said.contains("MQTT") && !said.contains("Storage"), "nothing started: \(said)")
                #expect(state.payloads(on: "claw/gateway/state") == ["offline"], "the gateway never came online")
                await state.stop()
            }
        }

        @Test func copiesSentWhileTheGatewayRestartsOnItsSocketAreNeverRefusedAndWaitForTheNextStart() async throws {
            try await E2ESite.with { site in
                try await site.waitReady()
                site.killGateway()
                // On http.listen's address, as claw-gateway.socket's ListenStream= must be.
                let (socket, port) = try Self.listeningSocket(port: site.site.httpPort)
                defer { close(socket) }
                try site.startGateway(passing: socket)
                try await eventually("the gateway to answer on the socket it was passed") {
                    (try? await HTTP.get("http://127.0.0.1:\(port)/readyz"))?.status == 200
                }
                #expect(try String(contentsOf: site.site.log, encoding: .utf8).contains("listening on the socket systemd passed"))

                // Copies one after the other, each on a connection of its own, while
                // the gateway is stopped (SIGTERM) and started again on the same socket.
                let attempts = Recorder<Attempt>()
                let sending = Task.detached {
                    var serial = 0
                    while !Task.isCancelled {
                        serial += 1
                        let attach = serial % 2 == 0 ? #"{"command":6}"# : #"{"command":7}"#
                        attempts.append(Self.copy(port: port, from: "p\(serial % 5)", attach))
                    }
                }
                try await eventually("copies answered before the restart") { attempts.items.count >= 20 }
                await site.stopGateway()
                let stopped = ContinuousClock.now
                // No gateway runs: the copy on its way waits in the socket's queue.
                try await eventually("a copy sent while no gateway runs") { Self.sentWhileDown(attempts.items, after: stopped) }
                let started = ContinuousClock.now
                try site.startGateway(passing: socket)
                try await eventually("copies answered after the restart", timeout: .seconds(30)) { Self.sent(attempts.items, after: started) >= 20 }
                sending.cancel()
                _ = await sending.value
                let all = attempts.items
                let refused = all.filter { $0.outcome == .refused }
                #expect(refused.isEmpty, "no copy refused: \(Self.describe(refused))")
                let whileDown = all.filter { $0.connected > stopped && $0.connected < started }
                let whileDownAnswered = whileDown.allSatisfy { $0.outcome == .answered(200) }
                #expect(whileDownAnswered, "copies sent while no gateway ran: \(Self.describe(whileDown))")
                let waited = all.filter { $0.connected < started && $0.ended > started && $0.outcome == .answered(200) }
                #expect(!waited.isEmpty, "a copy sent before the start waited in the socket's queue and was answered after it")
                // Not one copy lost: a connection the stopping gateway had just taken is
                // answered too (HTTPService waits for it before it closes the socket).
                let lost = all.filter { $0.outcome != .answered(200) }
                #expect(lost.isEmpty, "\(Self.describe(lost))")
            }
        }
    }
}
