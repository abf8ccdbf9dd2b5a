/// Who a client counts as for the per-client shares and budgets (SPEC §5:
/// connections, streams, new tourists, failed logins and sids): an IPv4
/// address, or an IPv6 address's /64 (one host usually has a whole /64, so
/// counting single IPv6 addresses would give it billions of shares). An IPv4
/// address mapped into IPv6 (a dual-stack listener) counts as the IPv4
/// address. Which address a request's client has is
/// ``TrustedProxies/client(peer:headers:)``'s to say, and no one else's.
struct ClientAddress: Hashable, Sendable, CustomStringConvertible {
    private let bytes: [UInt8]

    init(_ address: IPAddress) {
        bytes = address.isIPv4 ? address.bytes : Array(address.bytes[0..<8])
    }

    var description: String {
        if bytes.count == 4 { return bytes.map(String.init).joined(separator: ".") }
        let groups = stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
        return groups.joined(separator: ":") + "::/64"
    }
}
