import Foundation
import NIOCore

/// Where an HTTP server takes its connections from.
enum HTTPListener: Sendable, Equatable {
    /// A socket the server binds itself when it starts (the chain's router
    /// and recorder, gateways built inside a test).
    case address(host: String, port: Int)
    /// A listening socket it was handed, already bound: systemd's socket
    /// activation (`claw-gateway.socket`), which holds the port while the
    /// service restarts, so that connections wait in the kernel's queue
    /// instead of being refused (SPEC §13).
    case inherited(descriptor: CInt)
    /// A listening socket `run` bound on `http.listen` (`address`, as
    /// written there) before anything else started (``take(_:environment:pid:)``).
    case bound(descriptor: CInt, address: String)

    /// The first descriptor systemd passes (`sd_listen_fds(3)`).
    static let firstPassedDescriptor: CInt = 3

    /// The socket systemd passed this process, if it passed one:
    /// `LISTEN_PID` is this process and `LISTEN_FDS` at least 1. Anything
    /// else (no activation, or variables inherited from a parent they were
    /// meant for) is nil: the server binds its own socket.
    static func activated(environment: [String: String], pid: pid_t) -> HTTPListener? {
        guard let listenPID = environment["LISTEN_PID"].flatMap({ pid_t($0) }), listenPID == pid,
            let count = environment["LISTEN_FDS"].flatMap({ Int($0) }), count >= 1
        else { return nil }
        return .inherited(descriptor: firstPassedDescriptor)
    }

    /// Unsets the activation variables, as `sd_listen_fds(1)` does, so that
    /// no child process takes the socket for its own; and marks the socket
    /// close-on-exec.
    static func forgetActivation(_ listener: HTTPListener) {
        guard case .inherited(let descriptor) = listener else { return }
        unsetenv("LISTEN_PID")
        unsetenv("LISTEN_FDS")
        unsetenv("LISTEN_FDNAMES")
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
    }

    /// The gateway's port, taken before anything else of it starts: the
    /// socket systemd passed, which must be `http.listen`'s address (else
    /// ``StartupError/listenMismatch(passed:configured:)``), or `http.listen`
    /// bound and listening here (else ``StartupError/portTaken(address:holder:)``).
    /// Taken this early, a second gateway on the same port fails before it
    /// has touched the broker or the storage of the first (SPEC §13).
    static func take(_ http: HTTPSettings, environment: [String: String], pid: pid_t) throws(StartupError) -> HTTPListener {
        let configured = SocketName(host: http.host, port: http.port)
        if let passed = activated(environment: environment, pid: pid) {
            guard case .inherited(let descriptor) = passed else { return passed }
            let actual = SocketName.local(of: descriptor)
            guard let actual, actual.matches(configured) else {
                throw .listenMismatch(passed: actual?.description ?? "not a TCP socket", configured: configured.description)
            }
            return passed
        }
        let address: SocketAddress
        do {
            address = try SocketAddress.makeAddressResolvingHost(http.host, port: http.port)
        } catch {
            throw .listenFailed(address: configured.description, cause: "\(http.host) does not resolve: \(error)")
        }
        let descriptor = socket(CInt(address.protocol.rawValue), CInt(SOCK_STREAM.rawValue) | CInt(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw .listenFailed(address: configured.description, cause: String(cString: strerror(errno))) }
        var on: CInt = 1
        // As NIO's own bind: a restart does not wait out the last run's TIME_WAIT.
        _ = setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<CInt>.size))
        let bound = address.withSockAddr { bind(descriptor, $0, socklen_t($1)) }
        guard bound == 0, listen(descriptor, 256) == 0 else {
            let code = errno
            close(descriptor)
            if code == EADDRINUSE { throw .portTaken(address: configured.description, holder: .listening(on: http.port)) }
            throw .listenFailed(address: configured.description, cause: String(cString: strerror(code)))
        }
        return .bound(descriptor: descriptor, address: configured.description)
    }
}

/// A TCP socket's address as `http.listen` names it, and as a socket has it.
struct SocketName: Sendable, CustomStringConvertible {
    var host: String
    var port: Int

    var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }

    /// Where the listening socket `descriptor` is bound; nil when it is not TCP over IP.
    static func local(of descriptor: CInt) -> SocketName? {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let got = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard got == 0 else { return nil }
        let address: SocketAddress
        switch CInt(storage.ss_family) {
        case AF_INET:
            address = withUnsafeBytes(of: storage) { SocketAddress($0.load(as: sockaddr_in.self), host: "") }
        case AF_INET6:
            address = withUnsafeBytes(of: storage) { SocketAddress($0.load(as: sockaddr_in6.self), host: "") }
        default:
            return nil
        }
        guard let ip = IPAddress(address), let port = address.port else { return nil }
        return SocketName(host: ip.description, port: port)
    }

    /// Whether a socket bound here is one `configured` names: the same port,
    /// and an address its host resolves to (both "every address" alike).
    func matches(_ configured: SocketName) -> Bool {
        guard port == configured.port, let mine = IPAddress(Substring(host)) else { return false }
        let theirs = Self.addresses(of: configured.host)
        return theirs.contains(mine) || (mine.isUnspecified && theirs.contains(where: \.isUnspecified))
    }

    /// Every address `host` resolves to (an address names itself).
    private static func addresses(of host: String) -> [IPAddress] {
        if let literal = IPAddress(Substring(host)) { return [literal] }
        var hints = addrinfo()
        hints.ai_socktype = CInt(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0 else { return [] }
        defer { freeaddrinfo(list) }
        var found: [IPAddress] = []
        var next = list
        while let entry = next?.pointee {
            switch entry.ai_family {
            case AF_INET:
                found += [IPAddress(SocketAddress(entry.ai_addr.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee }, host: host))]
                    .compactMap { $0 }
            case AF_INET6:
                found += [IPAddress(SocketAddress(entry.ai_addr.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee }, host: host))]
                    .compactMap { $0 }
            default:
                break
            }
            next = entry.ai_next
        }
        return found
    }
}
