import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Protocol

/// The operators' page and its feed (SPEC §5): `GET /dashboard` (and `/`,
/// which redirects to it), its script and style, and `GET /v1/stream`.
///
/// The page is three files compiled into the binary (``DashboardAssets``),
/// served with a Content-Security-Policy that allows script and style from
/// this origin only: no inline script, no other host, no framing; video
/// (the games' clips) from this origin, or fetched with the read token.
struct DashboardRoutes<Context: ConnectionRequestContext>: Sendable {
    let feed: ArcadeFeed
    let arcade: Arcade
    let gatewayID: String
    let statsInterval: Duration
    /// Whether `http.admin_token` is configured: the page shows its controls.
    let admin: Bool
    /// Whether the parcels page is served (prizes kept at this site, SPEC §15).
    var parcels = false
    /// Whether this gateway keeps the players' wallets (`credits:` at a
    /// site of its own): the page reads balances only then.
    var credits = false
    let uptime: @Sendable () -> Duration
    let now: @Sendable () -> Date

    static var contentSecurityPolicy: String {
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; media-src 'self' blob:; "
            + "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    }

    /// - Parameters:
    ///   - router: where the page and its files go: the same bytes in every
    ///     installation, nothing of the arcade, so only `Host` is checked.
    ///   - reads: where the stream goes (behind the read token when set).
    func add(page router: some RouterMethods<Context>, reads: some RouterMethods<Context>) {
        router.get("/") { _, _ in
            Response(status: .found, headers: [.location: "/dashboard"])
        }
        router.get("/dashboard") { _, _ in
            PageAsset.html(DashboardAssets.html)
        }
        router.get("/dashboard/read-token.js") { _, _ in
            PageAsset.readToken()
        }
        router.get("/dashboard/app.js") { _, _ in
            PageAsset.script(DashboardAssets.script)
        }
        router.get("/dashboard/app.css") { _, _ in
            PageAsset.style(DashboardAssets.style)
        }
        reads.get("/v1/stream") { _, context in
            stream(from: context.client, closed: context.connectionClosed)
        }
    }

    /// Server-Sent Events: the whole arcade, then what happens, until the
    /// client goes, falls behind for too long, or the gateway stops.
    private func stream(from address: ClientAddress?, closed: EventLoopFuture<Void>) -> Response {
        let client: ArcadeFeed.Client
        do {
            client = try feed.connect(from: address)
        } catch {
            return Self.refused(error)
        }
        // A reset or vanished reader gives its slot back now, not at the next write that fails.
        closed.whenComplete { [feed] _ in feed.disconnect(client) }
        let welcome = feed.welcome(hello: hello(), snapshots: arcade.machines.map { ($0.index, $0.currentSnapshot().encoded()) })
        let feed = feed
        return Response(
            status: .ok,
            headers: [
                .contentType: "text/event-stream", .cacheControl: "no-cache",
                // nginx and its kind: pass each event on as it comes.
                HTTPField.Name("X-Accel-Buffering")!: "no",
            ],
            body: ResponseBody { writer in
                defer { feed.disconnect(client) }
                // The browser's EventSource waits this long before it reconnects.
                try await writer.write(ByteBuffer(bytes: Array("retry: 2000\n\n".utf8) + welcome))
                for await chunk in client.chunks {
                    try await writer.write(ByteBuffer(bytes: chunk))
                    client.written(chunk)
                }
                try await writer.finish(nil)
            })
    }

    private static func refused(_ refusal: ArcadeFeed.Refusal) -> Response {
        switch refusal {
        case .overShare:
            JSONResponse.error(Refusal(
                .tooManyRequests, code: "too_many_streams",
                "This address already reads \(ArcadeFeed.maxClientsPerAddress) streams; close one before opening another."))
        case .full:
            JSONResponse.error(Refusal(
                .serviceUnavailable, code: "streams_full", "At most \(ArcadeFeed.maxClients) streams are served at once; try again later."))
        case .stopped:
            JSONResponse.error(Refusal(.serviceUnavailable, code: "stopping", "The gateway is stopping; connect again once it is back."))
        }
    }

    private func hello() -> [UInt8] {
        let hello = StreamHello(
            gateway: gatewayID, version: ClawGatewayCommand.version, now: Timestamp.string(now()), uptimeSeconds: Int(uptime().seconds),
            admin: admin, parcels: parcels, credits: credits, statsIntervalSeconds: statsInterval.seconds,
            machines: arcade.machines.map { machine in
                let config = machine.config
                return StreamHello.Machine(
                    id: machine.id, name: config.name,
                    prize: config.prize.map { StreamHello.Prize(id: $0.id, name: $0.name, lowAt: $0.lowAt) })
            })
        return JSONCoding.encode(hello)
    }
}

/// How the pages served from the binary (the site's dashboard, the chain's,
/// the recorder's history) answer with one of their files: the
/// Content-Security-Policy of ``DashboardRoutes`` (script, style and requests
/// to this origin only), revalidated on every load, never sniffed, no referrer.
enum PageAsset {
    /// The read token's prompt and header, shared by the three pages
    /// (Live/Shared/read-token.js): each serves it beside its own script.
    static let readTokenScript = ByteBuffer(bytes: PackageResources.read_token_js)

    static func html(_ text: String) -> Response {
        response(ByteBuffer(string: text), type: "text/html; charset=utf-8")
    }

    /// A page whole: the `<head>` every page has (its title, the shared
    /// style and its own under `folder`, its scripts deferred, in order),
    /// then `body`, the page's file from its `<body>` on.
    static func document(title: String, folder: String, styles: [String] = [], scripts: [String], body: [UInt8]) -> String {
        var head = """
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <meta name="color-scheme" content="dark light">
            <title>\(title)</title>
            <link rel="icon" href="data:,">
            <link rel="stylesheet" href="\(folder)/app.css">

            """
        for style in styles { head += "<link rel=\"stylesheet\" href=\"\(folder)/\(style)\">\n" }
        for script in scripts { head += "<script src=\"\(folder)/\(script)\" defer></script>\n" }
        return head + "</head>\n" + String(decoding: body, as: UTF8.self)
    }

    static func script(_ text: String) -> Response {
        response(ByteBuffer(string: text), type: "text/javascript; charset=utf-8")
    }

    static func style(_ text: String) -> Response {
        response(ByteBuffer(string: text), type: "text/css; charset=utf-8")
    }

    static func readToken() -> Response {
        response(readTokenScript, type: "text/javascript; charset=utf-8")
    }

    static func response(_ body: ByteBuffer, type: String) -> Response {
        Response(
            status: .ok,
            headers: [
                .contentType: type, .contentSecurityPolicy: DashboardRoutes<GatewayRequestContext>.contentSecurityPolicy,
                .cacheControl: "no-cache", .xContentTypeOptions: "nosniff", HTTPField.Name("Referrer-Policy")!: "no-referrer",
            ],
            body: ResponseBody(byteBuffer: body))
    }
}

/// The first message of `GET /v1/stream`: what the gateway is, and its machines in order.
struct StreamHello: Codable, Equatable {
    struct Machine: Codable, Equatable {
        var id: String
        var name: String
        /// What a win makes here (SPEC §15); its stock is in the snapshots.
        var prize: Prize? = nil
    }

    struct Prize: Codable, Equatable {
        var id: String
        var name: String
        /// A stock at or under this shows as low.
        var lowAt: Int64

        enum CodingKeys: String, CodingKey {
            case id, name
            case lowAt = "low_at"
        }
    }

    var gateway: String
    var version: String
    /// The gateway's clock, ISO 8601 UTC: the page counts deadlines down against it.
    var now: String
    var uptimeSeconds: Int
    /// Whether admin actions are configured (`http.admin_token`).
    var admin: Bool
    /// Whether the parcels page (`/parcels`) is served here (SPEC §15).
    var parcels: Bool = false
    /// Whether the players' wallets are served here (SPEC §11): the page
    /// asks for balances only then, never 404 after 404.
    var credits: Bool = false
    /// 0 when statistics are off.
    var statsIntervalSeconds: Double
    var machines: [Machine]

    enum CodingKeys: String, CodingKey {
        case gateway, version, now, admin, machines, parcels, credits
        case uptimeSeconds = "uptime_s"
        case statsIntervalSeconds = "stats_interval_s"
    }
}
