import HTTPTypes
import NIOCore

/// `http.trusted_proxies` (SPEC §5), and the one place that decides which
/// client a request counts as.
///
/// Behind a reverse proxy (the TLS front SECURITY.md asks for) every
/// connection comes from the proxy: keyed on the peer, one client's bad
/// sids or wrong tokens would lock out everyone, and streams and new
/// tourists would be shared by all. A proxy listed here is believed about
/// the client it forwards for: its `Forwarded` header (RFC 7239) when the
/// request has one, else its `X-Forwarded-For`, read from the right, since
/// each proxy appends the address it took the request from and a client
/// can only write to the left of what the first proxy appends. The client
/// is the first address from the right that is not itself a trusted proxy.
/// From any other peer the headers are ignored: anyone can send them.
///
/// Every per-client share and budget (streams, new tourists, returning
/// logins, failed tokens and sids) takes its key from ``client(peer:headers:)``,
/// and the connection share from ``connectionShare(peer:)``, which calls it.
struct TrustedProxies: Sendable, Equatable {
    let networks: [IPNetwork]

    static let none = TrustedProxies(networks: [])

    /// Trusted proxies passed at most, reading from the right: a chain of
    /// one's own proxies is a few long, and a header that claims more is not
    /// read further than this.
    static let maxHops = 16

    func trusts(_ address: IPAddress) -> Bool {
        networks.contains { $0.contains(address) }
    }

    /// The client a request counts as, from the connection's `peer` and the
    /// request's `headers`; nil for a Unix socket's client.
    ///
    /// A value that is not an address (`unknown`, an obfuscated `_name`,
    /// garbage) where a trusted proxy's is expected ends the reading: nothing
    /// to its left can be believed, and the client is the trusted proxy that
    /// wrote it. So is a request with neither header (a health check of the
    /// proxy's own).
    func client(peer: SocketAddress?, headers: HTTPFields) -> ClientAddress? {
        guard let peer = IPAddress(peer) else { return nil }
        var client = peer
        if trusts(peer) {
            for hop in Self.forwardedFor(headers).reversed().prefix(Self.maxHops) {
                guard let address = hop else { break }
                client = address
                guard trusts(address) else { break }
            }
        }
        return ClientAddress(client)
    }

    /// Who a new connection counts against for `http.max_connections_per_client`:
    /// its peer, or no one for a trusted proxy (every client behind it comes
    /// through its connections; they still count in `http.max_connections`).
    func connectionShare(peer: SocketAddress?) -> ClientAddress? {
        guard let address = IPAddress(peer), !trusts(address) else { return nil }
        return client(peer: peer, headers: [:])
    }

    // MARK: The headers

    /// The addresses the request's proxies say they forwarded for, left to
    /// right: `Forwarded`'s `for=` when the request has that header, else
    /// `X-Forwarded-For`'s entries; nil where an entry is not an address.
    /// Several fields of one name are one list, in order (RFC 9110 §5.3).
    static func forwardedFor(_ headers: HTTPFields) -> [IPAddress?] {
        var forwarded: [String] = []
        var xForwardedFor: [String] = []
        for field in headers {
            switch field.name.canonicalName {
            case "forwarded": forwarded.append(field.value)
            case "x-forwarded-for": xForwardedFor.append(field.value)
            default: break
            }
        }
        if !forwarded.isEmpty {
            return forwarded.flatMap { elements(ofForwarded: $0) }
        }
        return xForwardedFor.flatMap { value in
            value.split(separator: ",").compactMap { entry -> IPAddress?? in
                let text = entry.trimmingOWS
                guard !text.isEmpty else { return nil }
                return .some(node(text.unquoted))
            }
        }
    }

    /// The `for=` of each element of one `Forwarded` value
    /// (`for=192.0.2.60;proto=https, for="[2001:db8::17]:4711"`): an address,
    /// or nil for `unknown`, an obfuscated name, a missing `for`, or an
    /// element that does not parse (an unclosed quote spoils the rest).
    private static func elements(ofForwarded value: String) -> [IPAddress?] {
        // Elements split at `,`, their pairs at `;`, neither inside a quoted-string.
        var elements: [[Substring]] = [[]]
        var start = value.startIndex
        var index = value.startIndex
        var quoted = false
        while index < value.endIndex {
            let character = value[index]
            if quoted {
                if character == "\\" {
                    index = value.index(after: index)
                    if index == value.endIndex { break }
                } else if character == "\"" {
                    quoted = false
                }
            } else if character == "\"" {
                quoted = true
            } else if character == ";" || character == "," {
                elements[elements.count - 1].append(value[start..<index])
                if character == "," { elements.append([]) }
                start = value.index(after: index)
            }
            index = value.index(after: index)
        }
        elements[elements.count - 1].append(value[start...])
        var found = elements.dropLast().compactMap(forValue)
        // An unclosed quote: the last element is no address, whatever it says.
        found += quoted ? [nil] : [elements[elements.count - 1]].compactMap(forValue)
        return found
    }

    /// The address of one element's `for=`; nil inside when it has none,
    /// more than one, or one that is no address; nil outside for an empty
    /// element (`a, , b`: HTTP lists may have them).
    private static func forValue(_ pairs: [Substring]) -> IPAddress?? {
        let pairs = pairs.map(\.trimmingOWS).filter { !$0.isEmpty }
        guard !pairs.isEmpty else { return nil }
        let values = pairs.compactMap { pair -> Substring? in
            guard let equals = pair.firstIndex(of: "="), pair[..<equals].trimmingOWS.lowercased() == "for" else { return nil }
            return pair[pair.index(after: equals)...].trimmingOWS
        }
        guard values.count == 1, let text = values.first else { return .some(nil) }
        return .some(text.first == "\"" ? unquote(text).flatMap(node) : node(text))
    }

    /// A quoted-string's content, its escapes undone; nil when it is not one.
    private static func unquote(_ text: Substring) -> Substring? {
        guard text.count >= 2, text.first == "\"", text.last == "\"" else { return nil }
        var content = ""
        var escaped = false
        for character in text.dropFirst().dropLast() {
            if escaped {
                content.append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == "\"" {
                return nil
            } else {
                content.append(character)
            }
        }
        return escaped ? nil : Substring(content)
    }

    /// A node as proxies write it: `192.0.2.60`, `192.0.2.60:47011`,
    /// `[2001:db8::17]`, `[2001:db8::17]:4711`, or a bare `2001:db8::17`
    /// (as `X-Forwarded-For` has it). The port, a number or an obfuscated
    /// `_name`, is not kept. Anything else is nil.
    static func node(_ text: Substring) -> IPAddress? {
        if text.first == "[" {
            guard let close = text.firstIndex(of: "]") else { return nil }
            let rest = text[text.index(after: close)...]
            guard rest.isEmpty || (rest.first == ":" && isPort(rest.dropFirst())) else { return nil }
            guard let address = IPAddress(text[text.index(after: text.startIndex)..<close]), !address.isIPv4 else { return nil }
            return address
        }
        let colons = text.filter { $0 == ":" }.count
        if colons == 1, let colon = text.firstIndex(of: ":") {
            guard isPort(text[text.index(after: colon)...]), let address = IPAddress(text[..<colon]), address.isIPv4 else { return nil }
            return address
        }
        return IPAddress(text)
    }

    /// RFC 7239's node-port: 1 to 5 digits, or an obfuscated `_name`.
    private static func isPort(_ text: Substring) -> Bool {
        if text.first == "_" {
            return text.count > 1 && text.count <= 64 && text.dropFirst().allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "._-".contains($0)) }
        }
        return !text.isEmpty && text.count <= 5 && text.allSatisfy(\.isASCIIDigit)
    }
}

extension Substring {
    /// Without the spaces and tabs HTTP allows around list items and values.
    fileprivate var trimmingOWS: Substring {
        var text = self
        while let first = text.first, first == " " || first == "\t" { text = text.dropFirst() }
        while let last = text.last, last == " " || last == "\t" { text = text.dropLast() }
        return text
    }

    /// Without one pair of surrounding double quotes, if it has them.
    fileprivate var unquoted: Substring {
        count >= 2 && first == "\"" && last == "\"" ? dropFirst().dropLast() : self
    }
}
