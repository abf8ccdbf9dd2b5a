import Foundation
import Logging
import Yams

/// `recorder.yaml`, the config of the chain's recorder (`claw-gateway record`,
/// SPEC §10): where it listens, the PostgreSQL database it writes the
/// chain's games into, and the chain's cluster (`bus:`, read by the router's
/// own code). Refused as a whole, every problem named by its key, exit
/// status 78, like `gateway.yaml` and `chain.yaml`.
struct RecorderConfig: Sendable {
    var recorder: RecorderSettings
    var bus: BusSettings
    /// `credits:` (`topup_secret`, `max_topup`): the recorder keeps the
    /// chain's wallets and takes the payment service's top-ups (SPEC §11).
    var credits: CreditsSettings? = nil
    /// `prizes:` (`forget_address`): the recorder serves the players'
    /// prizes and ships them, chain-wide (SPEC §15).
    var prizes: PrizeSettings? = nil
}

/// `recorder:`: the HTTP side, read with the keys and rules of
/// `gateway.yaml`'s `http:`, and the database.
struct RecorderSettings: Sendable {
    var http: HTTPSettings
    var database: DatabaseURL
    var logLevel: Logger.Level = .info
    /// `recorder.ledger_key`: the routers' key for the vouchers of accepts
    /// (SPEC §9); with `credits:` required: no debit is taken without a
    /// valid voucher.
    var ledgerKey: String? = nil
    /// `recorder.voucher_max_age`: a voucher older than this debits nothing.
    var voucherMaxAge: Duration = .seconds(30)
}

/// `recorder.database`: `postgres://user:password@host:port/database`, with
/// an optional `?sslmode=disable|prefer|require` (default `prefer`).
struct DatabaseURL: Sendable, Equatable, CustomStringConvertible {
    enum TLSMode: String, Sendable, CaseIterable {
        case disable, prefer, require
    }

    var host: String
    var port: Int
    var username: String
    var password: String?
    var database: String
    var tls: TLSMode = .prefer

    /// The URL without its password, for logs and `/readyz`.
    var description: String {
        "postgres://\(username)@\(host.contains(":") ? "[\(host)]" : host):\(port)/\(database)"
    }

    /// The URL read from `text`, or why it cannot be one.
    static func parse(_ text: String) -> Result<DatabaseURL, DatabaseURLProblem> {
        guard let components = URLComponents(string: text), let scheme = components.scheme?.lowercased() else {
            return .failure(DatabaseURLProblem("\"\(redacted(text))\" is not a URL; write postgres://user:password@host:5432/database"))
        }
        guard scheme == "postgres" || scheme == "postgresql" else {
            return .failure(DatabaseURLProblem("scheme \"\(scheme)\" is not supported; use postgres://"))
        }
        guard let host = components.host, !host.isEmpty else {
            return .failure(DatabaseURLProblem("has no host; write postgres://user:password@host:5432/database"))
        }
        guard let user = components.percentEncodedUser.flatMap({ $0.removingPercentEncoding }), !user.isEmpty else {
            return .failure(DatabaseURLProblem("has no user name; write postgres://user:password@host:5432/database"))
        }
        let port = components.port ?? 5432
        guard (1...65535).contains(port) else { return .failure(DatabaseURLProblem("port \(port) is out of range")) }
        let database = String(components.path.drop { $0 == "/" })
        guard !database.isEmpty, !database.contains("/") else {
            return .failure(DatabaseURLProblem("names no database; write postgres://user:password@host:5432/database"))
        }
        var tls = TLSMode.prefer
        for item in components.queryItems ?? [] {
            guard item.name == "sslmode" else {
                return .failure(DatabaseURLProblem("parameter \"\(item.name)\" is not supported; only sslmode is"))
            }
            guard let mode = item.value.flatMap(TLSMode.init(rawValue:)) else {
                return .failure(DatabaseURLProblem("sslmode must be one of \(TLSMode.allCases.map(\.rawValue).joined(separator: ", "))"))
            }
            tls = mode
        }
        let bareHost = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        return .success(
            DatabaseURL(
                host: bareHost, port: port, username: user,
                password: components.percentEncodedPassword.flatMap { $0.removingPercentEncoding },
                database: database.removingPercentEncoding ?? database, tls: tls))
    }

    /// `text` with the password (between `:` and `@` after the scheme) left out.
    private static func redacted(_ text: String) -> String {
        guard let at = text.lastIndex(of: "@"), let scheme = text.range(of: "://"), scheme.upperBound < at,
            let colon = text[scheme.upperBound..<at].firstIndex(of: ":")
        else { return text }
        return String(text[..<colon]) + ":…" + String(text[at...])
    }
}

struct DatabaseURLProblem: Error, Equatable {
    var message: String
    init(_ message: String) { self.message = message }
}

extension RecorderConfig {
    static let keys = ["recorder", "bus", "credits", "prizes"]
    /// What of `gateway.yaml`'s `prizes:` the recorder takes: the stock is each site's.
    static let prizesKeys = ["forget_address"]
    /// What of `gateway.yaml`'s `credits:` the recorder takes: prices are each site's.
    static let creditsKeys = ["topup_secret", "max_topup"]
    static let recorderKeys = [
        "listen", "database", "read_token", "admin_token", "log_level", "allowed_hosts", "read_timeout", "max_connections",
        "max_connections_per_client", "idle_timeout", "trusted_proxies", "ledger_key", "voucher_max_age",
    ]

    /// Where the recorder listens when `recorder.listen` is not given: this
    /// host only; the chain's page and the operators reach it through a proxy.
    static let defaultListen = (host: "127.0.0.1", port: 8090)

    /// Loads and validates `recorder.yaml`, or throws every problem in it.
    static func load(file: String, environment: [String: String] = ProcessInfo.processInfo.environment) throws(ConfigError)
        -> RecorderConfig
    {
        try ConfigLoader.load(file: file, environment: environment) { $0.readRecorder($1) }
    }

    /// Validates YAML text; `file` only names it in messages.
    static func parse(_ text: String, file: String = "recorder.yaml", environment: [String: String] = [:]) throws(ConfigError)
        -> RecorderConfig
    {
        try ConfigLoader.parse(text, file: file, baseDirectory: FileManager.default.currentDirectoryPath, environment: environment) {
            $0.readRecorder($1)
        }
    }

    /// `claw-recorder-<host>`: the same after a restart, so that the cluster
    /// keeps the recorder's session (and the records published meanwhile)
    /// for it; two recorders on one host need a `bus.client_id` each.
    static func defaultClientID(host: String = ProcessInfo.processInfo.hostName) -> String {
        let name = String(
            host.lowercased().unicodeScalars.map { scalar -> Character in
                ("a"..."z").contains(scalar) || ("0"..."9").contains(scalar) ? Character(scalar) : "-"
            }.prefix(40))
        return "claw-recorder-\(name.isEmpty ? "host" : name)"
    }
}

extension Schema {
    /// The keys of `recorder.yaml` and their rules.
    func readRecorder(_ root: Node) -> RecorderConfig? {
        guard let top = reader.section(root, at: "", keys: RecorderConfig.keys) else { return nil }
        let section = top.section("recorder", keys: RecorderConfig.recorderKeys, required: true)
        var http = readHTTP(section)
        if section?.has("listen") != true {
            http?.host = RecorderConfig.defaultListen.host
            http?.port = RecorderConfig.defaultListen.port
        }
        var database: DatabaseURL?
        if let section, let text = section.nonEmpty("database", required: true) {
            switch DatabaseURL.parse(text) {
            case .success(let url): database = url
            case .failure(let problem): reader.report(section.path("database"), problem.message)
            }
        }
        let level = section?.choice("log_level", default: Logger.Level.info, from: Logger.Level.allCases.map { ($0.rawValue, $0) }) ?? .info
        let busSection = top.section("bus", keys: RouterConfig.busKeys, required: true)
        var bus = readBus(busSection)
        // The router's default id is unique per process; the recorder's must
        // survive a restart, or its session (clean session false) is lost.
        if busSection?.has("client_id") == false { bus?.clientID = RecorderConfig.defaultClientID() }
        let credits = top.section("credits", keys: RecorderConfig.creditsKeys).flatMap { CreditsSettings.read($0) }
        let prizes = top.section("prizes", keys: RecorderConfig.prizesKeys).map(PrizeSettings.readRecorder)
        let ledgerKey = section.flatMap { token($0, "ledger_key") }
        let voucherMaxAge =
            section?.duration("voucher_max_age", default: .seconds(30), atLeast: .seconds(1)) ?? .seconds(30)
        requireReadToken(in: section, at: "recorder", top: top, needing: [("credits", "the chain's wallets")])
        if let section, top.has("credits"), !section.has("ledger_key") {
            reader.report(
                section.path("ledger_key"),
                "is required with credits: the chain's ledger debits a game only with a router's voucher made with this key "
                    + "(the routers' router.ledger_key; e.g. the output of openssl rand -hex 32)")
        }
        guard let http, let database, let bus else { return nil }
        guard credits != nil || !top.has("credits") else { return nil }
        return RecorderConfig(
            recorder: RecorderSettings(
                http: http, database: database, logLevel: level, ledgerKey: ledgerKey, voucherMaxAge: voucherMaxAge),
            bus: bus, credits: credits, prizes: prizes)
    }
}
