import HTTPTypes
import NIOCore
import Testing

@testable import ClawGateway

/// Which client a request counts as (SPEC §5, `http.trusted_proxies`), as a
/// table: the peer, the proxies trusted, the headers, and the key every
/// per-client share and budget then uses. End to end: `ForwardedClientTests`.
@Suite struct TrustedProxiesTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var peer: String
        var trusted: [String] = []
        var headers: [(String, String)] = []
        /// The client key's text: an IPv4 address, or an IPv6 /64.
        var client: String

        var testDescription: String { name }
    }

    static func proxies(_ entries: [String]) throws -> TrustedProxies {
        TrustedProxies(networks: try entries.map { try #require(IPNetwork($0), "\($0)") })
    }

    static func fields(_ headers: [(String, String)]) -> HTTPFields {
        var fields = HTTPFields()
        for (name, value) in headers { fields.append(HTTPField(name: HTTPField.Name(name)!, value: value)) }
        return fields
    }

    static func client(_ peer: String, trusted: [String] = [], _ headers: [(String, String)] = []) throws -> String? {
        try proxies(trusted).client(peer: try SocketAddress(ipAddress: peer, port: 40000), headers: fields(headers))?.description
    }

    static let xff = "X-Forwarded-For"
    static let proxy = ["127.0.0.1"]
    /// 41 addresses of trusted 10/8 behind the client: more hops than are read.
    static let longChain = (1...40).map { "10.0.0.\($0)" }.joined(separator: ", ")

    static let cases: [Case] = [
        // From anyone but a trusted proxy, the headers are anybody's words.
        Case(name: "an untrusted peer's X-Forwarded-For is ignored", peer: "203.0.113.9", headers: [(xff, "198.51.100.1")], client: "203.0.113.9"),
        Case(name: "an untrusted peer's Forwarded is ignored", peer: "203.0.113.9", headers: [("Forwarded", "for=198.51.100.1")], client: "203.0.113.9"),
        Case(name: "a peer outside the trusted block", peer: "127.0.0.2", trusted: proxy, headers: [(xff, "198.51.100.1")], client: "127.0.0.2"),
        // From a trusted proxy, read from the right.
        Case(name: "the address the proxy appended", peer: "127.0.0.1", trusted: proxy, headers: [(xff, "198.51.100.1")], client: "198.51.100.1"),
        Case(name: "what the client wrote to the left is not believed", peer: "127.0.0.1", trusted: proxy,
             headers: [(xff, "6.6.6.6, 127.0.0.1, 198.51.100.1")], client: "198.51.100.1"),
        Case(name: "a chain of trusted proxies", peer: "127.0.0.1", trusted: ["127.0.0.1", "10.0.0.0/8"],
             headers: [(xff, "6.6.6.6, 198.51.100.1, 10.1.2.3, 10.200.0.1")], client: "198.51.100.1"),
        Case(name: "every hop a trusted proxy: the farthest", peer: "127.0.0.1", trusted: ["127.0.0.1", "10.0.0.0/8"],
             headers: [(xff, "10.0.0.5, 10.0.0.6")], client: "10.0.0.5"),
        Case(name: "no header: the proxy itself", peer: "127.0.0.1", trusted: proxy, client: "127.0.0.1"),
        Case(name: "X-Forwarded-For fields are one list", peer: "127.0.0.1", trusted: proxy,
             headers: [(xff, "6.6.6.6"), (xff, "198.51.100.2")], client: "198.51.100.2"),
        Case(name: "an empty list item is skipped", peer: "127.0.0.1", trusted: proxy, headers: [(xff, "198.51.100.7, ,")], client: "198.51.100.7"),
        Case(name: "an address with its port", peer: "127.0.0.1", trusted: proxy, headers: [(xff, "198.51.100.4:5555")], client: "198.51.100.4"),
        Case(name: "a bare IPv6 address counts as its /64", peer: "127.0.0.1", trusted: proxy,
             headers: [(xff, "2001:db8:1:2:3:4:5:6")], client: "2001:db8:1:2::/64"),
        Case(name: "a bracketed IPv6 address with its port", peer: "127.0.0.1", trusted: proxy,
             headers: [(xff, "[2001:db8:1:2::9]:443")], client: "2001:db8:1:2::/64"),
        Case(name: "an IPv4 address mapped into IPv6 is the IPv4 address", peer: "127.0.0.1", trusted: proxy,
             headers: [(xff, "::ffff:198.51.100.5")], client: "198.51.100.5"),
        // Garbage where the proxy's word is expected ends the reading at the proxy.
        Case(name: "garbage", peer: "127.0.0.1", trusted: proxy, headers: [(xff, "not-an-address")], client: "127.0.0.1"),
        Case(name: "garbage behind a trusted hop", peer: "127.0.0.1", trusted: ["127.0.0.1", "10.0.0.0/8"],
             headers: [(xff, "198.51.100.1, <script>, 10.0.0.7")], client: "10.0.0.7"),
        Case(name: "an IPv6 zone", peer: "127.0.0.1", trusted: proxy, headers: [(xff, "fe80::1%eth0")], client: "127.0.0.1"),
        Case(name: "an IPv4 address with a fifth part", peer: "127.0.0.1", trusted: proxy, headers: [(xff, "198.51.100.1.5")], client: "127.0.0.1"),
        Case(name: "a port that is no port", peer: "127.0.0.1", trusted: proxy, headers: [(xff, "198.51.100.1:http")], client: "127.0.0.1"),
        Case(name: "an overlong value", peer: "127.0.0.1", trusted: proxy,
             headers: [(xff, String(repeating: "9", count: 8000))], client: "127.0.0.1"),
        Case(name: "a long list: the rightmost counts", peer: "127.0.0.1", trusted: proxy,
             headers: [(xff, String(repeating: "6.6.6.6, ", count: 900) + "198.51.100.3")], client: "198.51.100.3"),
        Case(name: "a chain longer than is read stops after 16 trusted hops", peer: "127.0.0.1", trusted: ["127.0.0.1", "10.0.0.0/8"],
             headers: [(xff, "198.51.100.1, " + longChain)], client: "10.0.0.25"),
        // RFC 7239.
        Case(name: "Forwarded for a quoted IPv6 address with a port", peer: "127.0.0.1", trusted: proxy,
             headers: [("Forwarded", #"for="[2001:db8:cafe::17]:4711""#)], client: "2001:db8:cafe:0::/64"),
        Case(name: "Forwarded with other parameters, several elements", peer: "127.0.0.1", trusted: proxy,
             headers: [("Forwarded", #"for=192.0.2.43;proto=https;by=203.0.113.43, For="198.51.100.17:8080";host=arcade.example"#)],
             client: "198.51.100.17"),
        Case(name: "Forwarded before X-Forwarded-For", peer: "127.0.0.1", trusted: proxy,
             headers: [(xff, "198.51.100.99"), ("Forwarded", "for=198.51.100.17")], client: "198.51.100.17"),
        Case(name: "Forwarded fields are one list", peer: "127.0.0.1", trusted: proxy,
             headers: [("Forwarded", "for=6.6.6.6"), ("forwarded", "for=198.51.100.3")], client: "198.51.100.3"),
        Case(name: "a comma inside a quoted value does not split the element", peer: "127.0.0.1", trusted: proxy,
             headers: [("Forwarded", #"for=198.51.100.2;ext="a,b""#)], client: "198.51.100.2"),
        Case(name: "Forwarded for=unknown", peer: "127.0.0.1", trusted: proxy, headers: [("Forwarded", "for=6.6.6.6, for=unknown")], client: "127.0.0.1"),
        Case(name: "Forwarded for an obfuscated name", peer: "127.0.0.1", trusted: proxy, headers: [("Forwarded", "for=_hidden")], client: "127.0.0.1"),
        Case(name: "Forwarded without for", peer: "127.0.0.1", trusted: proxy, headers: [("Forwarded", "for=6.6.6.6, proto=https")], client: "127.0.0.1"),
        Case(name: "Forwarded with two fors in one element", peer: "127.0.0.1", trusted: proxy,
             headers: [("Forwarded", "for=6.6.6.6;for=198.51.100.1")], client: "127.0.0.1"),
        Case(name: "Forwarded with an unclosed quote", peer: "127.0.0.1", trusted: proxy,
             headers: [("Forwarded", #"for=6.6.6.6, for="[2001:db8::1]:80"#)], client: "127.0.0.1"),
        Case(name: "Forwarded with an unquoted IPv6 address", peer: "127.0.0.1", trusted: proxy,
             headers: [("Forwarded", "for=2001:db8:7::1")], client: "2001:db8:7:0::/64"),
        Case(name: "Forwarded with an IPv4 address in brackets", peer: "127.0.0.1", trusted: proxy,
             headers: [("Forwarded", #"for="[198.51.100.1]""#)], client: "127.0.0.1"),
        // IPv6 peers and proxies.
        Case(name: "an IPv6 proxy", peer: "::1", trusted: ["::1"], headers: [(xff, "198.51.100.8")], client: "198.51.100.8"),
        Case(name: "an IPv6 peer counts as its /64", peer: "2001:db8:5:6::1", client: "2001:db8:5:6::/64"),
        Case(name: "a proxy in an IPv6 block", peer: "2001:db8:ff::5", trusted: ["2001:db8:ff::/48"],
             headers: [(xff, "198.51.100.9")], client: "198.51.100.9"),
    ]

    @Test(arguments: cases)
    func theClientOfARequest(_ test: Case) throws {
        #expect(try Self.client(test.peer, trusted: test.trusted, test.headers) == test.client)
    }

    @Test func manyAddressesOfOne64AreOneClientAndTwo64sAreTwo() throws {
        let behind = { (address: String) in try Self.client("127.0.0.1", trusted: Self.proxy, [(Self.xff, address)]) }
        let one = try ["2001:db8:1:2::1", "2001:db8:1:2::ffff", "2001:db8:1:2:aaaa:bbbb:cccc:dddd", "[2001:db8:1:2::7]:80"].map(behind)
        #expect(Set(one).count == 1, "\(one)")
        #expect(try behind("2001:db8:1:3::1") != one.first, "another /64, another client")
        let peers = try ["2001:db8:1:2::1", "2001:db8:1:2::2"].map { try Self.client($0) }
        #expect(Set(peers).count == 1, "peers of one /64 too")
    }

    @Test func aUnixSocketsClientIsNoAddress() throws {
        let proxies = try Self.proxies(Self.proxy)
        #expect(proxies.client(peer: nil, headers: Self.fields([(Self.xff, "198.51.100.1")])) == nil)
    }

    @Test func aTrustedProxyHasNoConnectionShareOfItsOwnAndEveryOtherPeerHasItsOwn() throws {
        let proxies = try Self.proxies(["127.0.0.1", "2001:db8:ff::/48"])
        #expect(proxies.connectionShare(peer: try SocketAddress(ipAddress: "127.0.0.1", port: 1)) == nil)
        #expect(proxies.connectionShare(peer: try SocketAddress(ipAddress: "2001:db8:ff::9", port: 1)) == nil)
        #expect(proxies.connectionShare(peer: try SocketAddress(ipAddress: "127.0.0.2", port: 1))?.description == "127.0.0.2")
        #expect(proxies.connectionShare(peer: try SocketAddress(ipAddress: "2001:db8:1:2::3", port: 1))?.description == "2001:db8:1:2::/64")
    }

    @Test(arguments: [
        ("10.0.0.0/8", "10.0.0.0/8"), ("127.0.0.1", "127.0.0.1"), ("::1", "::1"), ("2001:db8::/32", "2001:db8::/32"),
        ("0.0.0.0/0", "0.0.0.0/0"), ("::ffff:10.0.0.1", "10.0.0.1"), ("192.168.1.128/25", "192.168.1.128/25"),
    ])
    func addressesAndBlocks(_ text: String, _ written: String) throws {
        #expect(IPNetwork(text)?.description == written)
    }

    @Test(arguments: [
        "10.0.0.1/8", "10.0.0.0/33", "::/129", "300.1.1.1", "10.0.0.0/", "/8", "10.0.0.0/8/8", "10.0.0.0/-1", "proxy.example",
        "fe80::1%eth0", "", " 10.0.0.1", "10.0.0.0 /8", "1.2.3", "01.2.3.4",
    ])
    func notAddressesNorBlocks(_ text: String) {
        #expect(IPNetwork(text) == nil, "\(text)")
    }

    @Test func aBlockHoldsItsAddressesAndNoOthers() throws {
        let block = try #require(IPNetwork("192.168.1.128/25"))
        for inside in ["192.168.1.128", "192.168.1.200", "192.168.1.255"] { #expect(block.contains(try #require(IPAddress(Substring(inside))))) }
        for outside in ["192.168.1.127", "192.168.2.128", "::ffff:192.168.0.1", "2001:db8::1"] {
            #expect(!block.contains(try #require(IPAddress(Substring(outside)))), "\(outside)")
        }
        let v6 = try #require(IPNetwork("2001:db8:ff::/48"))
        #expect(v6.contains(try #require(IPAddress(Substring("2001:db8:ff:1234::1")))))
        #expect(!v6.contains(try #require(IPAddress(Substring("2001:db8:fe::1")))))
        #expect(!v6.contains(try #require(IPAddress(Substring("10.0.0.1")))))
    }
}
