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
        /// A listening TCP socket on 127.0.0.1, as systemd makes one for `ListenStream=`.
        private static func listeningSocket() throws -> (descriptor: CInt, port: Int) {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            address.sin_port = 0
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

        /// One signed NetEase copy on a connection of its own: the status
        /// line's code, or nil when the connection was refused or closed
        /// without an answer.
        private static func copy(port: Int, from player: String, _ attach: String) -> Int? {
            let body = NetEaseCopyBody.encode(from: player, to: "claw_m1", attach: attach)
            let headers = E2ESite.signedCopyHeaders(body).map { "\($0.0): \($0.1)\r\n" }.joined()
            guard let connection = try? RawSocket(port: port) else { return nil }
            connection.send(
                "POST /im/netease HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\n"
                    + "Content-Length: \(body.count)\r\n\(headers)\r\n")
            connection.send(body)
            let answer = connection.read(until: "\r\n\r\n", timeout: .seconds(30))
            guard answer.hasPrefix("HTTP/1.1 "), let code = Int(answer.dropFirst(9).prefix(3)) else { return nil }
            return code
        }

        @Test func copiesSentWhileTheGatewayRestartsOnItsSocketAreAllAnswered() async throws {
            try await E2ESite.with { site in
                try await site.waitReady()
                site.killGateway()
                let (socket, port) = try Self.listeningSocket()
                defer { close(socket) }
                try site.startGateway(passing: socket)
                try await eventually("the gateway to answer on the socket it was passed") {
                    (try? await HTTP.get("http://127.0.0.1:\(port)/readyz"))?.status == 200
                }
                let configured = try? await HTTP.get("\(site.base)/readyz")
                #expect(configured == nil, "http.listen is not bound: the passed socket is the gateway's")
                #expect(try String(contentsOf: site.site.log, encoding: .utf8).contains("listening on the socket systemd passed"))

                // Copies one after the other, each on a connection of its own, while
                // the gateway is stopped (SIGTERM) and started again on the same socket.
                let answers = Recorder<Int?>()
                let sent = Recorder<Int>()
                let sending = Task.detached {
                    var serial = 0
                    while !Task.isCancelled {
                        serial += 1
                        let player = "p\(serial % 5)"
                        let attach = serial % 2 == 0 ? #"{"command":6}"# : #"{"command":7}"#
                        sent.append(serial)
                        answers.append(Self.copy(port: port, from: player, attach))
                    }
                }
                try await eventually("copies answered before the restart") { answers.items.count >= 20 }
                await site.stopGateway()
                // No gateway runs: the copy on its way waits in the socket's queue, unanswered.
                try await eventually("a copy waiting while no gateway runs") { sent.items.count > answers.items.count }
                let waiting = sent.items.count
                let whileDown = answers.items.count
                try site.startGateway(passing: socket)
                try await eventually("copies answered after the restart", timeout: .seconds(30)) { answers.items.count >= whileDown + 20 }
                sending.cancel()
                _ = await sending.value
                let all = answers.items
                #expect(all.allSatisfy { $0 == 200 }, "every copy answered 200; not: \(all.enumerated().filter { $0.element != 200 }.map { "#\($0.offset + 1) \($0.element.map(String.init) ?? "none")" }), the one waiting #\(waiting)")
                #expect(all.count >= waiting && all[waiting - 1] == 200, "the copy that waited while no gateway ran was answered once one did")
            }
        }
    }
}
