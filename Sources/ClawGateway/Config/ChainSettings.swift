/// `chain:` of `gateway.yaml`: this site is one arcade of a chain and keeps a
/// link of its own to the chain's cluster (SPEC §9).
struct ChainSettings: Sendable, Equatable {
    /// Unique in the chain; the topics under `<prefix>/<site>/` are its own.
    var site: String
    /// Every node of the cluster, tried in turn.
    var bus: [BrokerURL]
    var username: String?
    var password: String?
    /// A copy older than this when it reaches the site is dropped.
    var inboxMaxAge: Duration = .seconds(2)
    /// How often unacknowledged game records are sent again.
    var resendInterval: Duration = .seconds(10)
    /// With `credits:`: how long an accept waits for the chain's ledger to
    /// answer its debit before it is refused `gateway_unavailable` (SPEC §11).
    var walletTimeout: Duration = .seconds(2)
    /// TLS for `mqtts://` nodes, checked against the system's CAs: the
    /// cluster is on the internet, with a public certificate.
    var tls: TLSSettings?

    /// The link's MQTT client id: NATS refuses `.` in client ids, and site
    /// names have none.
    var clientID: String { "claw-site-\(site)" }

    /// The link as a client of the cluster, like the chain's other services.
    func busSettings(prefix: String) -> BusSettings {
        BusSettings(urls: bus, username: username, password: password, clientID: clientID, topicPrefix: prefix, tls: tls)
    }

    static let keys = ["site", "bus", "username", "password", "inbox_max_age", "resend_interval", "wallet_timeout"]

    /// Reads the section, reporting every problem under its key's path.
    /// - Parameter brokerURL: parses one `mqtt://` or `mqtts://` URL, or reports why not.
    static func read(
        _ section: ConfigReader.Section, brokerURL: (String, String) -> BrokerURL?
    ) -> ChainSettings? {
        let site = section.nonEmpty("site", required: true)
        if let site, let problem = siteProblem(site) { section.reader.report(section.path("site"), problem) }
        let urls = nodes(section, "bus", brokerURL: brokerURL)
        let username = section.string("username")
        let password = section.string("password")
        let inboxMaxAge = section.duration("inbox_max_age", default: .seconds(2))
        let resendInterval = section.duration("resend_interval", default: .seconds(10), atLeast: .seconds(1))
        let walletTimeout = section.duration("wallet_timeout", default: .seconds(2), atLeast: .milliseconds(100))
        guard let site, siteProblem(site) == nil, !urls.isEmpty else { return nil }
        let tls = urls[0].usesTLS ? TLSSettings() : nil
        return ChainSettings(
            site: site, bus: urls, username: username, password: password, inboxMaxAge: inboxMaxAge,
            resendInterval: resendInterval, walletTimeout: walletTimeout, tls: tls)
    }

    /// The cluster's nodes listed under `key` (required, at least one, all
    /// `mqtt://` or all `mqtts://`): a site's `chain.bus`, the router's `bus.urls`.
    static func nodes(
        _ section: ConfigReader.Section, _ key: String, brokerURL: (String, String) -> BrokerURL?
    ) -> [BrokerURL] {
        var urls: [BrokerURL] = []
        guard let items = section.list(key, required: true) else { return urls }
        if items.isEmpty { section.reader.report(section.path(key), "must list at least one node, e.g. [mqtts://chain-1.example.com:8883]") }
        for (path, node) in items {
            guard let text = section.reader.string(node, at: path) else { continue }
            if let url = brokerURL(text, path) { urls.append(url) }
        }
        if Set(urls.map(\.usesTLS)).count > 1 {
            section.reader.report(section.path(key), "mixes mqtt:// and mqtts://; every node of the cluster is reached the same way")
        }
        return urls
    }

    /// Why `site` cannot name a site, or nil. It is a topic level and part of
    /// a client id: lowercase letters, digits and '-', as a host name.
    static func siteProblem(_ site: String) -> String? {
        let allowed = site.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }
        guard allowed, site.first != "-", site.last != "-" else {
            return "\"\(site)\" is not a site name: use lowercase letters, digits and '-' (not first or last), e.g. arcade-7"
        }
        guard site.utf8.count <= 63 else { return "is longer than 63 characters" }
        return nil
    }
}
