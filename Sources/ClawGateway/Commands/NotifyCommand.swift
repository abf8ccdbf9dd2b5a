import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix
import Protocol

/// `claw-gateway notify`: plays a player for one notification.
struct NotifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "notify",
        abstract: "Send one signed player notification to a running gateway and print its answer.",
        discussion: """
            The notification is what a player's app would send. Examples:
              claw-gateway notify --from alice --to m1 join Alice
              claw-gateway notify --from alice --to m1 accept        (takes the session from the gateway)
              claw-gateway notify --url http://router:8080 --from alice --to claw_m3 accept   (through a chain's router)
              claw-gateway notify --from alice --to m1 move left
              claw-gateway notify --from alice --to m1 camera 2
              claw-gateway notify --from alice --to m1 grab
              claw-gateway notify --from alice --to m1 leave
              claw-gateway notify --from alice --to m1 '{"command":1,"data":"up","serial":9}'
            It is signed with the generic webhook's secret (or, with --via netease, as a
            NetEase message copy) from the config.
            """
    )

    @OptionGroup var options: ConfigOptions

    @Option(help: "The player's account.")
    var from: String

    @Option(help: "The machine's id or IM account.")
    var to: String

    @Option(help: "generic or netease; default: generic when configured.")
    var via: String?

    @Option(help: "The serial of a move, grab or camera command; default: from the clock.")
    var serial: Int64?

    @Option(help: "The gateway's base URL, or a chain router's; default: from http.listen.")
    var url: String?

    @Option(name: .customLong("read-token"), help: "The token to read the turn with (accept and decline without a session); default: the config's http.read_token or admin token. A router's is its router.read_token.")
    var readToken: String?

    @Argument(help: "join [nick] | leave | accept [session] | decline [session] | move DIRECTION | grab | camera ID | '<raw json>'")
    var words: [String]

    func run() async throws {
        let config = try options.load()
        let base = url ?? "http://\(["0.0.0.0", "::", ""].contains(config.http.host) ? "127.0.0.1" : config.http.host):\(config.http.port)"
        // A refused connection is an answer here (no gateway runs there), not
        // something to try again until the timeout, as the shared client does.
        var configuration = HTTPClient.Configuration()
        configuration.connectionPool.retryConnectionEstablishment = false
        let client = HTTPClient(eventLoopGroup: MultiThreadedEventLoopGroup.singleton, configuration: configuration)
        let response: HTTPClientResponse
        let body: ByteBuffer
        do {
            let attach = try await attachment(base: base, http: config.http, client: client)
            response = try await client.execute(try signedRequest(attach: attach, base: base, im: config.im), timeout: .seconds(10))
            body = try await response.body.collect(upTo: 1 << 20)
            try await client.shutdown()
        } catch let problem as NotifyProblem {
            try? await client.shutdown()
            printError(problem.message)
            throw ExitCode.validationFailure
        } catch {
            try? await client.shutdown()
            printError(Self.unanswered(base, configured: url == nil, config: options.config, error: error))
            throw ExitCode(ExitStatus.unavailable)
        }
        print("HTTP \(response.status.code) \(String(buffer: body))")
        guard (200..<300).contains(response.status.code) else { throw ExitCode.failure }
    }

    /// Why nothing came back from `base`, and what to do: the common case
    /// (no gateway running) in words, anything else with the error.
    static func unanswered(_ base: String, configured: Bool, config: String, error: any Error) -> String {
        guard isRefused(error) else { return "No answer from the gateway at \(base): \(error)" }
        let whose = configured ? " (http.listen of \(config))" : ""
        return "Nothing listens at \(base)\(whose): no gateway is running there. Start it first, e.g. ./scripts/run in the "
            + "repository, or claw-gateway run --config \(config)\(configured ? "" : "; or check --url")."
    }

    /// Whether a connection was refused: nothing listens at the address.
    private static func isRefused(_ error: any Error) -> Bool {
        if let error = error as? IOError { return error.errnoCode == ECONNREFUSED }
        if let error = error as? NIOConnectionError { return error.connectionErrors.contains { isRefused($0.error) } }
        return false
    }

    /// The wire JSON for the words given.
    private func attachment(base: String, http: HTTPSettings, client: HTTPClient) async throws -> String {
        guard let verb = words.first else { throw NotifyProblem("Say what to send, e.g. join, move left, grab.") }
        let argument = words.dropFirst().first
        let serial = serial ?? Int64(Date().timeIntervalSince1970 * 1000)
        switch verb {
        case _ where verb.hasPrefix("{"):
            return words.joined(separator: " ")
        case "join":
            return WireMessage(.join, data: words.count > 1 ? words.dropFirst().joined(separator: " ") : nil).encodedString()
        case "leave":
            return WireMessage(.leave).encodedString()
        case "accept", "decline":
            var session = argument
            if session == nil {
                session = try await offeredSession(base: base, token: readToken ?? http.readToken ?? http.adminToken, client: client)
            }
            return WireMessage(verb == "accept" ? .acceptTurn : .declineTurn, data: session).encodedString()
        case "move":
            guard let argument else { throw NotifyProblem("move needs a direction: up, down, left, right or stop.") }
            return WireMessage(.move, data: argument, serial: serial).encodedString()
        case "grab":
            return WireMessage(.grab, serial: serial).encodedString()
        case "camera":
            guard let argument else { throw NotifyProblem("camera needs a camera id, e.g. camera 2.") }
            return WireMessage(.camera, data: argument, serial: serial).encodedString()
        default:
            throw NotifyProblem("Unknown notification \"\(verb)\"; use join, leave, accept, decline, move, grab, camera or raw JSON.")
        }
    }

    /// The session offered to this player, waiting up to 5 s for it to show:
    /// at a router the join's answer (the site's) can come back before the
    /// machine's snapshot has crossed the cluster to the router, and an
    /// accept sent right after the join would otherwise find no turn.
    private func offeredSession(base: String, token: String?, client: HTTPClient) async throws -> String {
        let deadline = ContinuousClock.now + .seconds(5)
        while true {
            do {
                return try await currentSession(base: base, token: token, client: client)
            } catch let problem as NotifyProblem where problem.noTurnYet && ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(100))
            }
        }
    }

    /// The session the gateway offered this player, read from the machine's
    /// API with the read token when there is one. At a chain's router (which
    /// has no `/v1/machines`), from its `/v1/sites`, where every site's
    /// machines are, by id or IM account.
    private func currentSession(base: String, token: String?, client: HTTPClient) async throws -> String {
        let (status, machine) = try await read(base + "/v1/machines/\(to)", token: token, client: client)
        var player = (machine as? [String: Any])?["player"] as? [String: Any]
        if status == 404 {
            let (sitesStatus, list) = try await read(base + "/v1/sites", token: token, client: client)
            if sitesStatus == 401 {
                throw NotifyProblem("The router refused to show \(to)'s turn (401): give the session id, or its router.read_token with --read-token.")
            }
            let machines = ((list as? [String: Any])?["sites"] as? [[String: Any]] ?? []).flatMap { $0["machines"] as? [[String: Any]] ?? [] }
            player = machines.first { $0["im_account"] as? String == to || $0["id"] as? String == to }?["player"] as? [String: Any]
        } else if status == 401 {
            throw NotifyProblem("The gateway refused to show \(to)'s turn (401): give the session id, or set http.read_token in the config (or --read-token).")
        }
        guard let player, player["accid"] as? String == from, let session = player["session"] as? String else {
            throw NotifyProblem("\(from) holds no turn on \(to) right now; join first, or give the session id.", noTurnYet: true)
        }
        return session
    }

    /// A GET's status and JSON body.
    private func read(_ url: String, token: String?, client: HTTPClient) async throws -> (Int, Any?) {
        var request = HTTPClientRequest(url: url)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        let response = try await client.execute(request, timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 1 << 20)
        return (Int(response.status.code), try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)))
    }

    private func signedRequest(attach: String, base: String, im: IMSettings) throws -> HTTPClientRequest {
        let provider = via ?? (im.generic != nil ? "generic" : "netease")
        switch provider {
        case "generic":
            guard let generic = im.generic else { throw NotifyProblem("The config has no im.generic section.") }
            return GenericEnvelope.signedRequest(
                url: base + "/v1/notifications", secret: generic.secret, from: from, to: to, attach: attach, id: UUID().uuidString)
        case "netease":
            guard let netease = im.netease else { throw NotifyProblem("The config has no im.netease section.") }
            return NetEaseCopyBody.signedRequest(
                url: base + netease.callbackPath, settings: netease, from: from, to: to, attach: attach)
        default:
            throw NotifyProblem("--via must be generic or netease.")
        }
    }
}

/// What `notify` could not make sense of; printed without the usage text.
struct NotifyProblem: Error {
    var message: String
    /// The player holds no turn yet: worth reading again for a moment.
    var noTurnYet = false
    init(_ message: String, noTurnYet: Bool = false) {
        self.message = message
        self.noTurnYet = noTurnYet
    }
}

/// A NetEase message copy as NetEase sends it: for `notify`, the tests and the benchmark.
enum NetEaseCopyBody {
    static func encode(from: String, to: String, attach: String, messageID: String = UUID().uuidString) -> [UInt8] {
        JSONObjectWriter.object([
            "attach": attach, "convType": "CUSTOM_PERSON", "eventType": "1", "fromAccount": from,
            "msgTimestamp": String(Int64(Date().timeIntervalSince1970 * 1000)), "msgType": "CUSTOM_P2P_MSG",
            "msgidServer": messageID, "to": to,
        ])
    }

    /// A POST of a copy to `url`, signed as NetEase signs it.
    static func signedRequest(url: String, settings: NetEaseSettings, from: String, to: String, attach: String) -> HTTPClientRequest {
        let body = encode(from: from, to: to, attach: attach)
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers(body: body, settings: settings, now: Date()) {
            request.headers.add(name: name, value: value)
        }
        request.body = .bytes(ByteBuffer(bytes: body))
        return request
    }

    /// `AppKey`, `CurTime` (milliseconds, as on the copy), `MD5`, `CheckSum`.
    static func headers(body: [UInt8], settings: NetEaseSettings, now: Date) -> [(String, String)] {
        let md5 = Signatures.md5Hex(body)
        let curTime = String(Int64(now.timeIntervalSince1970 * 1000))
        return [
            ("Content-Type", "application/json"), ("AppKey", settings.appKey), ("CurTime", curTime), ("MD5", md5),
            ("CheckSum", Signatures.netEaseCopyChecksum(secret: settings.appSecret, md5: md5, curTime: curTime)),
        ]
    }
}
