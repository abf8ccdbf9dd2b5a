import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import Synchronization
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// The chain's page (``ChainDashboardRoutes``) in a real browser: Debian's
    /// chromium, headless, through chromedriver (``WebDriver``). The page is
    /// served by an HTTP server of the test's own beside a `GET /v1/sites`
    /// whose answer the test sets, the router's read API as SPEC §9 shapes it:
    /// what the tests read is what the page shows.
    @Suite(.serialized) struct ChainDashboardBrowserTests {
        @Test func showsEverySiteWithItsMachinesAndACutOffSiteAsSuch() async throws {
            try await FakeSitesAPI.with(sites: Self.twoSites(secondReachable: true)) { api in
                try await WebDriver.with { page in
                    try await Self.open(page, api, sites: 2)
                    #expect(try await page.execute("return Array.from(document.querySelectorAll('section.site'), (s) => s.dataset.site)")
                        == .array([.string("arcade-1"), .string("arcade-2")]), "one group per site, in the router's order")
                    #expect(try await page.texts("\(Self.site("arcade-1")) .site-name") == ["arcade-1"])
                    #expect(try await Self.badges(page, "arcade-1") == ["Reachable"])
                    #expect(try await Self.badges(page, "arcade-2") == ["Reachable"])
                    #expect(try await page.texts("\(Self.site("arcade-1")) .machine-name") == ["Pikachu", "Eevee", "Mew"])
                    #expect(try await page.texts("\(Self.site("arcade-1")) .machine-id") == ["m1", "m2", "m3"])
                    #expect(try await page.texts("\(Self.site("arcade-2")) .machine-name") == ["Snorlax"])

                    // Each machine: online, state, player, queue length.
                    let pikachu = Self.machine("arcade-1", "m1"), eevee = Self.machine("arcade-1", "m2"), snorlax = Self.machine("arcade-2", "m1")
                    #expect(try await page.texts("\(pikachu) .badges .pill") == ["Online"])
                    #expect(try await page.texts("\(pikachu) .state") == ["idle"])
                    #expect(try await page.texts("\(pikachu) .player") == ["No player"])
                    #expect(try await page.texts("\(pikachu) .queue-length") == ["Queue: 0 waiting"])
                    #expect(try await page.texts("\(eevee) .state") == ["awaiting result"])
                    #expect(try await page.texts("\(eevee) .player .nick") == ["Ann"])
                    #expect(try await page.texts("\(eevee) .queue-length") == ["Queue: 2 waiting"])
                    #expect(try await page.texts("\(snorlax) .badges .pill") == ["Offline"])
                    // Mew: in the directory, no snapshot yet: the router says null, the page says unknown.
                    let mew = Self.machine("arcade-1", "m3")
                    #expect(try await page.texts("\(mew) .badges .pill") == ["Unknown"])
                    #expect(try await page.texts("\(mew) .state") == ["no snapshot yet"])
                    #expect(try await page.texts("\(mew) .queue-length") == ["Queue: unknown"])
                    #expect(try await page.texts("\(mew) .player") == ["No player"])
                    #expect(try await page.execute("return document.querySelector(arguments[0]).hidden", [.string("\(Self.site("arcade-2")) .site-note")])
                        == .bool(true), "no cut-off note while the site is reachable")
                    #expect(try await page.texts("#summary") == ["2 sites · 4 machines"])
                    try await page.execute("window.__sameDocument = 'yes'")

                    // arcade-2's heartbeat stops: cut off, its machines as last known.
                    api.set(sites: Self.twoSites(secondReachable: false))
                    try await page.waitFor("arcade-2 to show as cut off", timeout: .seconds(5)) {
                        let cutOff = try await page.execute("return document.querySelector(arguments[0]).classList.contains('cut-off')", [.string(Self.site("arcade-2"))])
                        return try await Self.badges(page, "arcade-2") == ["Cut off"] && cutOff == .bool(true)
                    }
                    #expect(try await page.texts("\(snorlax) .badges .pill") == ["Last known", "Offline"])
                    #expect(try await page.texts("\(Self.site("arcade-2")) .site-note") == ["No heartbeat from this site: its machines as last known."])
                    #expect(try await page.execute("return document.querySelector(arguments[0]).hidden", [.string("\(Self.site("arcade-2")) .site-note")]) == .bool(false))
                    #expect(try await page.texts("\(Self.site("arcade-2")) .machine-name") == ["Snorlax"], "its machines stay on the page")
                    #expect(try await Self.badges(page, "arcade-1") == ["Reachable"], "the other site is not touched")
                    #expect(try await page.texts("\(pikachu) .badges .pill") == ["Online"])
                    #expect(try await page.texts("#summary") == ["2 sites, 1 cut off · 4 machines"])
                    // With CLAW_CHAIN_DASHBOARD_SCREENSHOT set, the page with a cut-off site is saved there as a PNG.
                    if let path = ProcessInfo.processInfo.environment["CLAW_CHAIN_DASHBOARD_SCREENSHOT"], !path.isEmpty {
                        try await page.screenshot().write(to: URL(fileURLWithPath: path))
                    }

                    // And back, with a change on the way: the page follows without a reload.
                    api.set(sites: Self.twoSites(secondReachable: true, pikachuQueue: 3))
                    try await page.waitFor("arcade-2 reachable again and Pikachu's queue", timeout: .seconds(5)) {
                        let badges = try await Self.badges(page, "arcade-2"), queue = try await page.texts("\(pikachu) .queue-length")
                        return badges == ["Reachable"] && queue == ["Queue: 3 waiting"]
                    }
                    #expect(try await page.texts("\(snorlax) .badges .pill") == ["Offline"])
                    #expect(try await page.execute("return window.__sameDocument") == .string("yes"), "the page was not reloaded")
                }
            }
        }

        /// A router that answers 5xx, or not at all, is said so; the sites
        /// stay on the page, faded, and it goes on by itself when the router is back.
        @Test func aRouterThatFailsIsSaidSoAndThePageGoesOnByItself() async throws {
            try await FakeSitesAPI.with(sites: Self.twoSites(secondReachable: true)) { api in
                try await WebDriver.with { page in
                    try await Self.open(page, api, sites: 2)
                    try await page.execute("window.__sameDocument = 'yes'")
                    api.fail(with: 503)
                    try await page.waitFor("the page to say the router failed", timeout: .seconds(5)) {
                        try await page.texts("#link") == ["The router answered 503; retrying…"]
                    }
                    #expect(try await page.execute("return document.body.classList.contains('stale')") == .bool(true), "faded")
                    #expect(try await page.findAll("section.site").count == 2, "the last sites stay on the page")

                    api.fail(with: nil)
                    api.set(sites: Self.twoSites(secondReachable: false))
                    try await page.waitFor("the page live again, with what changed meanwhile", timeout: .seconds(5)) {
                        let link = try await page.texts("#link"), badges = try await Self.badges(page, "arcade-2")
                        return link == ["Live"] && badges == ["Cut off"]
                    }
                    #expect(try await page.execute("return document.body.classList.contains('stale')") == .bool(false))
                    #expect(try await page.execute("return window.__sameDocument") == .string("yes"), "the page was not reloaded")
                }
            }
        }

        /// Names come from the sites' configs and nicks from players: markup in
        /// them shows as typed and runs nothing.
        @Test func markupInTheDataShowsLiterallyAndRunsNothing() async throws {
            let image = #"<img src=x onerror="window.__pwned=1">"#
            let script = "<script>window.__pwned=2</script>"
            let svg = #"<svg onload="window.__pwned=3">"#
            let sites: [[String: Any]] = [
                Self.site(svg, reachable: true, machines: [Self.machine("m1", name: image, state: "playing", queue: 1, player: script)])
            ]
            try await FakeSitesAPI.with(sites: sites) { api in
                // The page's files: this origin only, no inline script.
                let dashboard = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(api.base)/dashboard"), timeout: .seconds(10))
                #expect(dashboard.status == .ok)
                #expect(dashboard.headers["Content-Type"] == ["text/html; charset=utf-8"])
                let policy = dashboard.headers["Content-Security-Policy"].joined(separator: ", ")
                #expect(policy.contains("script-src 'self'") && policy.contains("connect-src 'self'"), "CSP: \(policy)")
                #expect(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"), "CSP: \(policy)")
                _ = try await dashboard.body.collect(upTo: 1 << 20)
                for (path, type) in [("chain.js", "text/javascript"), ("chain.css", "text/css"), ("app.css", "text/css")] {
                    let answer = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(api.base)/dashboard/\(path)"), timeout: .seconds(10))
                    #expect(answer.status == .ok, "\(path)")
                    #expect(answer.headers["Content-Type"].first?.hasPrefix(type) == true, "\(path)")
                    _ = try await answer.body.collect(upTo: 1 << 20)
                }

                try await WebDriver.with { page in
                    try await Self.open(page, api, sites: 1)
                    let card = Self.machine(svg, "m1")
                    #expect(try await page.texts("section.site .site-name") == [svg])
                    #expect(try await page.texts("\(card) .machine-name") == [image])
                    #expect(try await page.text(of: try await page.find("\(card) .machine-name")) == image, "rendered as text")
                    #expect(try await page.texts("\(card) .player .nick") == [script])
                    let elements = try await page.execute("return document.querySelectorAll('main img, main script, main svg').length")
                    #expect(elements == .number(0), "no element was made from the data")
                    #expect(try await page.execute("return typeof window.__pwned") == .string("undefined"), "nothing in the data ran")
                }
            }
        }

        /// With a read token on the router, the page asks for it in a form of
        /// its own, refuses a wrong one, then shows the sites; a reload in the
        /// same tab does not ask again.
        @Test func withAReadTokenThePageAsksForItOnceThenShowsTheSites() async throws {
            let token = "chain-read-token-0123456789"
            try await FakeSitesAPI.with(sites: Self.twoSites(secondReachable: true), readToken: token) { api in
                try await WebDriver.with { page in
                    try await page.navigate("\(api.base)/dashboard")
                    try await page.passReadTokenPrompt(
                        server: "router", setting: "router.read_token", token: token,
                        nothingShown: { try await page.findAll("section.site").isEmpty },
                        live: { try await Self.waitLive(page, sites: 2) })
                    api.set(sites: Self.twoSites(secondReachable: false))
                    try await page.waitFor("arcade-2 cut off, read with the token", timeout: .seconds(5)) {
                        try await Self.badges(page, "arcade-2") == ["Cut off"]
                    }

                    // Asked once: a reload in the same tab goes straight to the sites.
                    try await page.navigate("\(api.base)/dashboard")
                    try await Self.waitLive(page, sites: 2)
                    #expect(try await page.execute("return document.getElementById('login').hidden") == .bool(true))
                    #expect(try await Self.badges(page, "arcade-2") == ["Cut off"])
                }
            }
        }

        // MARK: Helpers

        static func site(_ name: String) -> String { #"section.site[data-site="\#(css(name))"]"# }
        static func machine(_ site: String, _ id: String) -> String { #"\#(self.site(site)) .machine[data-machine="\#(css(id))"]"# }

        /// A value for a CSS attribute selector in double quotes.
        static func css(_ value: String) -> String {
            value.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
        }

        static func badges(_ page: WebDriver, _ site: String) async throws -> [String] {
            try await page.texts("\(self.site(site)) .site-head .badges .pill")
        }

        static func open(_ page: WebDriver, _ api: FakeSitesAPI, sites: Int) async throws {
            try await page.navigate("\(api.base)/dashboard")
            try await waitLive(page, sites: sites)
        }

        static func waitLive(_ page: WebDriver, sites: Int) async throws {
            try await page.waitFor("the page to be live with its sites") {
                let link = try await page.texts("#link"), groups = try await page.findAll("section.site")
                return link == ["Live"] && groups.count == sites
            }
        }

        /// arcade-1 (three machines: one idle, one mid-game, one the router has no
        /// snapshot of yet) and arcade-2 (one machine, offline).
        static func twoSites(secondReachable: Bool, pikachuQueue: Int = 0) -> [[String: Any]] {
            [
                site("arcade-1", reachable: true, machines: [
                    machine("m1", name: "Pikachu", state: "idle", queue: pikachuQueue, player: nil),
                    machine("m2", name: "Eevee", state: "awaiting_result", queue: 2, player: "Ann"),
                    unheardOf("m3", name: "Mew"),
                ]),
                site("arcade-2", reachable: secondReachable, machines: [
                    machine("m1", name: "Snorlax", online: false, state: "offline", queue: 0, player: nil)
                ]),
            ]
        }

        static func site(_ name: String, reachable: Bool, machines: [[String: Any]]) -> [String: Any] {
            ["site": name, "reachable": reachable, "machines": machines]
        }

        /// A machine as `GET /v1/machines` shows it (SPEC §5); `player` is a nick.
        static func machine(_ id: String, name: String, online: Bool = true, state: String, queue: Int, player: String?) -> [String: Any] {
            let current: Any = player.map { nick -> Any in
                ["accid": nick.lowercased(), "provider": "generic", "nick": nick, "session": "s-\(id)", "deadline": NSNull()]
            } ?? NSNull()
            return [
                "id": id, "name": name, "online": online, "state": state, "paused": false, "suspect": false, "queue_length": queue,
                "player": current, "cameras": [["id": "front", "stream": "rtsp://camera/\(id)"]],
            ]
        }

        /// A machine of a site's directory whose snapshot the router has not had: `null` for all it does not know.
        static func unheardOf(_ id: String, name: String) -> [String: Any] {
            [
                "id": id, "name": name, "im_account": "claw_\(id)", "online": NSNull(), "state": NSNull(), "paused": NSNull(),
                "suspect": NSNull(), "queue_length": NSNull(), "player": NSNull(), "cameras": NSNull(),
            ]
        }
    }
}

/// The router's `GET /v1/sites` as the test sets it, beside the chain's page,
/// on a free loopback port: 401 without `Authorization: Bearer <readToken>`
/// when a token is set, as the router's read API answers.
final class FakeSitesAPI: Sendable {
    let port: Int
    var base: String { "http://127.0.0.1:\(port)" }
    private let sites: Mutex<[UInt8]>
    private let failure = Mutex<HTTPResponse.Status?>(nil)

    private init(port: Int, sites: [[String: Any]]) throws {
        self.port = port
        self.sites = Mutex(try Self.encode(sites))
    }

    /// What `GET /v1/sites` answers from now on.
    func set(sites: [[String: Any]]) {
        guard let body = try? Self.encode(sites) else {
            Issue.record("sites that are not JSON")
            return
        }
        self.sites.withLock { $0 = body }
    }

    /// From now on `GET /v1/sites` answers `status` with a JSON error (nil: the sites again).
    func fail(with status: Int?) {
        failure.withLock { $0 = status.map { HTTPResponse.Status(code: $0) } }
    }

    private static func encode(_ sites: [[String: Any]]) throws -> [UInt8] {
        Array(try JSONSerialization.data(withJSONObject: ["sites": sites]))
    }

    /// Serves the page and the sites until `body` returns or throws.
    static func with(sites: [[String: Any]], readToken: String? = nil, _ body: (FakeSitesAPI) async throws -> Void) async throws {
        let api = try FakeSitesAPI(port: try FreePort.next(), sites: sites)
        let router = Router()
        ChainDashboardRoutes<BasicRequestContext>().add(page: router.group())
        router.get("/v1/sites") { request, _ -> Response in
            if let readToken, request.headers[.authorization] != "Bearer \(readToken)" {
                return Response(
                    status: .unauthorized, headers: [.contentType: "application/json"],
                    body: ResponseBody(byteBuffer: ByteBuffer(string: #"{"error":"unauthorized","message":"This route needs the read token."}"#)))
            }
            if let status = api.failure.withLock({ $0 }) {
                return Response(
                    status: status, headers: [.contentType: "application/json"],
                    body: ResponseBody(byteBuffer: ByteBuffer(string: #"{"error":"unavailable","message":"Not now."}"#)))
            }
            let bytes = api.sites.withLock { $0 }
            return Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
        }
        try await servingPage(router, port: api.port, label: "chain-page", "the chain's page to be served") { try await body(api) }
    }
}
