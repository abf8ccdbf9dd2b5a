import Foundation
import NIOCore

/// One IP address, whole: 4 bytes for IPv4 (also an IPv4 address mapped
/// into IPv6, as a dual-stack listener sees IPv4 peers), 16 for IPv6. What
/// ``TrustedProxies`` compares peers and forwarded addresses with; the
/// shares count ``ClientAddress``, which an IPv6 address shortens to its /64.
struct IPAddress: Hashable, Sendable, CustomStringConvertible {
    let bytes: [UInt8]

    fileprivate init(normalizing bytes: [UInt8]) {
        let mappedV4 = bytes.count == 16 && bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xff && bytes[11] == 0xff
        self.bytes = mappedV4 ? Array(bytes[12..<16]) : bytes
    }

    /// A connection's peer; nil for a Unix socket's.
    init?(_ address: SocketAddress?) {
        switch address {
        case .v4(let v4):
            self.init(normalizing: withUnsafeBytes(of: v4.address.sin_addr) { Array($0) })
        case .v6(let v6):
            self.init(normalizing: withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) })
        case .unixDomainSocket, nil:
            return nil
        }
    }

    /// An address as text, exactly: `203.0.113.7`, `2001:db8::1`,
    /// `::ffff:203.0.113.7`. Nothing else: no port, brackets, zone or spaces.
    init?(_ text: Substring) {
        // The longest IPv6 text (with an IPv4 tail) is 45 characters.
        guard !text.isEmpty, text.utf8.count <= 45 else { return nil }
        if text.contains(":") {
            var address = in6_addr()
            guard inet_pton(AF_INET6, String(text), &address) == 1 else { return nil }
            self.init(normalizing: withUnsafeBytes(of: address) { Array($0) })
        } else {
            var address = in_addr()
            guard inet_pton(AF_INET, String(text), &address) == 1 else { return nil }
            self.init(normalizing: withUnsafeBytes(of: address) { Array($0) })
        }
    }

    var isIPv4: Bool { bytes.count == 4 }

    /// `0.0.0.0` or `::`: "every address" to a listening socket.
    var isUnspecified: Bool { bytes.allSatisfy { $0 == 0 } }

    var description: String {
        if isIPv4 { return bytes.map(String.init).joined(separator: ".") }
        var address = in6_addr()
        withUnsafeMutableBytes(of: &address) { $0.copyBytes(from: bytes) }
        var text = [UInt8](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let written = text.withUnsafeMutableBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { inet_ntop(AF_INET6, &address, $0.baseAddress, socklen_t($0.count)) }
        }
        guard written != nil else { return "?" }
        return String(decoding: text.prefix { $0 != 0 }, as: UTF8.self)
    }
}

/// An address block, `10.0.0.0/8` or `2001:db8::/32`; a single address is
/// its own block (/32, /128).
struct IPNetwork: Hashable, Sendable, CustomStringConvertible {
    let base: IPAddress
    let prefix: Int

    /// `address` or `address/prefix`; nil when it is neither, or when the
    /// address has bits set past the prefix (`10.0.0.1/8` is most likely a
    /// typing mistake, not the block it names: ``parts(_:)`` tells them apart).
    init?(_ text: String) {
        guard let parts = Self.parts(text) else { return nil }
        self.init(covering: parts.address, prefix: parts.prefix)
        guard base == parts.address else { return nil }
    }

    /// The block of `prefix` bits that holds `address`.
    init(covering address: IPAddress, prefix: Int) {
        var bits = prefix
        base = IPAddress(
            normalizing: address.bytes.map { byte in
                defer { bits -= 8 }
                return byte & (bits >= 8 ? 0xff : bits <= 0 ? 0 : ~(0xff >> UInt8(bits)))
            })
        self.prefix = prefix
    }

    /// The address and prefix length `text` writes, whatever bits are set.
    static func parts(_ text: String) -> (address: IPAddress, prefix: Int)? {
        let parts = text.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard let address = IPAddress(parts[0]) else { return nil }
        let width = address.bytes.count * 8
        guard parts.count == 2 else { return (address, width) }
        guard !parts[1].isEmpty, parts[1].count <= 3, parts[1].allSatisfy(\.isASCIIDigit), let bits = Int(parts[1]), bits <= width else {
            return nil
        }
        return (address, bits)
    }

    func contains(_ address: IPAddress) -> Bool {
        address.bytes.count == base.bytes.count && IPNetwork(covering: address, prefix: prefix).base == base
    }

    var description: String { prefix == base.bytes.count * 8 ? "\(base)" : "\(base)/\(prefix)" }
}

extension Character {
    var isASCIIDigit: Bool { isASCII && isNumber }
}
