import Foundation

/// A plain TCP connection, for requests no well-behaved HTTP client would send.
final class RawSocket {
    private var fd: Int32

    /// Connects to 127.0.0.1:`port`, from `source` when given (any address
    /// of 127/8 is this host: a test can be several clients at once).
    init(port: Int, from source: String? = nil) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            local.sin_addr.s_addr = inet_addr(source)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else {
                close(fd)
                throw BrokerError("cannot bind to \(source)")
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw BrokerError("cannot connect to 127.0.0.1:\(port)")
        }
    }

    /// Closes with a reset (RST), as a crashed client or a middlebox does,
    /// instead of an orderly FIN.
    func reset() {
        guard fd >= 0 else { return }
        var linger = linger(l_onoff: 1, l_linger: 0)
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<linger>.size))
        close(fd)
        fd = -1
    }

    /// Reads until what came contains `marker`, the peer closes or `timeout`
    /// passes; returns what came (for responses with no length, a stream).
    func read(until marker: String, timeout: Duration) -> String {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while !String(decoding: data, as: UTF8.self).contains(marker), clock.now < deadline {
            setReceiveTimeout(min(deadline - clock.now, .milliseconds(100)))
            let count = recv(fd, &buffer, buffer.count, 0)
            if count == 0 { break }
            if count > 0 { data.append(contentsOf: buffer[0..<count]) }
        }
        return String(decoding: data, as: UTF8.self)
    }

    private func setReceiveTimeout(_ timeout: Duration) {
        let timeout = max(timeout, .milliseconds(1))
        var timeval = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeval, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Sends what it can; false once the peer has closed.
    @discardableResult
    func send(_ text: String) -> Bool {
        send(Array(text.utf8))
    }

    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { buffer in
            var offset = 0
            while offset < buffer.count {
                let sent = Glibc.send(fd, buffer.baseAddress! + offset, buffer.count - offset, Int32(MSG_NOSIGNAL))
                if sent <= 0 { return false }
                offset += sent
            }
            return true
        }
    }

    /// Sends `bytes` again and again for `duration` without ever blocking or
    /// reading, as a client that pipelines and never reads its answers;
    /// returns how many bytes the kernel took.
    func flood(_ bytes: [UInt8], for duration: Duration) -> Int {
        let clock = ContinuousClock()
        let deadline = clock.now + duration
        var total = 0, offset = 0
        while clock.now < deadline {
            let sent = bytes.withUnsafeBytes { buffer in
                Glibc.send(fd, buffer.baseAddress! + offset, buffer.count - offset, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
            }
            if sent > 0 {
                total += sent
                offset = (offset + sent) % bytes.count
            } else if sent < 0, errno == EAGAIN || errno == EWOULDBLOCK {
                usleep(1000)
            } else {
                break
            }
        }
        return total
    }

    /// Shuts the sending side (a FIN), as `nc -N` does after its input: the
    /// connection stays open for the answers.
    func shutdownWrite() {
        shutdown(fd, Int32(SHUT_WR))
    }

    /// Whether the connection is still established in the kernel's eyes,
    /// without reading: a peer's FIN or RST shows here even while answers
    /// sit unread in this socket's buffer.
    var isEstablished: Bool {
        var info = tcp_info()
        var length = socklen_t(MemoryLayout<tcp_info>.size)
        guard getsockopt(fd, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 else { return false }
        return info.tcpi_state == UInt8(TCP_ESTABLISHED)
    }

    /// Reads and throws away everything until the peer closes, for at most
    /// `timeout`; true when it closed.
    func drainUntilClosed(timeout: Duration) -> Bool {
        let clock = ContinuousClock()
        let deadline = clock.now + timeout
        var buffer = [UInt8](repeating: 0, count: 65536)
        while clock.now < deadline {
            setReceiveTimeout(min(deadline - clock.now, .milliseconds(200)))
            let count = recv(fd, &buffer, buffer.count, 0)
            if count == 0 || (count < 0 && errno == ECONNRESET) { return true }
        }
        return false
    }

    /// Reads until the peer closes or `timeout` passes; returns what came.
    func read(timeout: Duration) -> String {
        var timeval = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeval, socklen_t(MemoryLayout<timeval>.size))
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            data.append(contentsOf: buffer[0..<count])
            if let text = String(bytes: data, encoding: .utf8), Self.complete(text) { break }
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// Reads `count` responses (headers and Content-Length bodies), or what
    /// came before the peer closed or `timeout` passed; split into responses.
    func readResponses(_ count: Int, timeout: Duration) -> [String] {
        var timeval = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeval, socklen_t(MemoryLayout<timeval>.size))
        var data: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        while Self.split(String(decoding: data, as: UTF8.self)).count < count {
            let received = recv(fd, &buffer, buffer.count, 0)
            if received <= 0 { break }
            data.append(contentsOf: buffer[0..<received])
        }
        return Self.split(String(decoding: data, as: UTF8.self))
    }

    /// Whether the peer has closed the connection (reads nothing within `timeout`, then EOF).
    func isClosed(within timeout: Duration) -> Bool {
        var timeval = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: Int(timeout.components.attoseconds / 1_000_000_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeval, socklen_t(MemoryLayout<timeval>.size))
        var byte: UInt8 = 0
        let received = recv(fd, &byte, 1, 0)
        return received == 0 || (received < 0 && errno == ECONNRESET)
    }

    /// Complete responses in `text`, in order.
    private static func split(_ text: String) -> [String] {
        var responses: [String] = []
        var rest = Substring(text)
        while let end = rest.range(of: "\r\n\r\n") {
            let head = rest[..<end.lowerBound].lowercased()
            let length = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") })
                .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
            let body = rest[end.upperBound...]
            guard body.utf8.count >= length else { break }
            let bodyEnd = body.utf8.index(body.startIndex, offsetBy: length)
            responses.append(String(rest[..<bodyEnd]))
            rest = rest[bodyEnd...]
        }
        return responses
    }

    /// A response whose headers and Content-Length body have arrived.
    private static func complete(_ text: String) -> Bool {
        guard let end = text.range(of: "\r\n\r\n") else { return false }
        let head = text[..<end.lowerBound].lowercased()
        guard let line = head.split(separator: "\r\n").first(where: { $0.hasPrefix("content-length:") }),
            let length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces))
        else { return true }
        return text[end.upperBound...].utf8.count >= length
    }

    deinit {
        if fd >= 0 { close(fd) }
    }
}
