import AsyncHTTPClient
import Foundation
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// The operators' page (GET /dashboard) in a real browser: Debian's
    /// chromium, headless, driven through chromedriver (``WebDriver``), against
    /// a whole site (``E2ESite``: mosquitto, `claw-gateway run`, the simulated
    /// PCs). What the tests read is what the page shows: DOM text, and the
    /// retained snapshots on MQTT for what the admin buttons did.
    @Suite(.serialized) struct DashboardBrowserTests {
        /// Long turn timers: nothing moves on its own while a test looks.
        static let game = "accept_timeout: 120s\nplay_timeout: 120s"
        static let adminToken = "test-admin-token"

        @Test func showsEveryMachineAndThatItIsLive() async throws {
            try await E2ESite.with(game: Self.game) { site in
                try await WebDriver.with { page in
                    try await Self.open(page, site)
                    #expect(try await page.text(of: try await page.find("#link")) == "Live")
                    let machines = try await page.execute("return Array.from(document.querySelectorAll('section.machine'), (card) => card.dataset.machine)")
                    #expect(machines == .array([.string("m1"), .string("m2")]), "one card per machine, in the configured order")
                    for machine in ["m1", "m2"] {
                        let title = try await page.execute("return document.querySelector(arguments[0]).firstChild.textContent", [.string("\(Self.card(machine)) h2")])
                        #expect(title == .string("Machine \(machine)"))
                        #expect(try await page.texts("\(Self.card(machine)) .machine-id") == [machine])
                        try await page.waitFor("\(machine) to show Online and idle") {
                            let badges = try await Self.badges(page, machine), state = try await Self.texts(page, machine, ".state")
                            return badges == ["Online"] && state == ["idle"]
                        }
                        #expect(try await page.texts("\(Self.card(machine)) .player") == ["No player"])
                    }
                    try await page.waitFor("the gateway's status") {
                        let status = try await page.texts("#broker, #storage, #replies")
                        return status == ["Broker connected", "Storage OK", "Reply failures 0"]
                    }
                    #expect(try await page.texts("#gateway-id") == ["test"])
                    #expect(try await page.texts("#version") == ["v\(ClawGatewayCommand.version)"])
                    try await page.waitFor("the uptime") { try await page.texts("#uptime").first?.hasPrefix("up ") == true }
                }
            }
        }

        @Test func aJoinShowsInTheQueueWithinASecondWithoutReload() async throws {
            try await E2ESite.with(game: Self.game) { site in
                try await WebDriver.with { page in
                    try await Self.open(page, site)
                    try await page.execute("window.__sameDocument = 'yes'")
                    try await Self.play(site, "ann", nick: "Ann")
                    try await page.waitFor("Ann to show as m1's player") { try await page.texts("\(Self.card("m1")) .player .nick") == ["Ann"] }
                    #expect(try await Self.queue(page, "m1").isEmpty)

                    let clock = ContinuousClock()
                    let answer = try await site.generic(from: "zoe", try Self.join("Zoe"))
                    let answered = clock.now
                    #expect(answer.json["result"] as? String == "queued", "zoe waits: \(answer.body)")
                    try await page.waitFor("Zoe in m1's queue") { try await Self.queue(page, "m1") == ["Zoe"] }
                    let shown = clock.now - answered
                    #expect(shown < .seconds(1), "the join showed \(shown) after the HTTP answer")
                    #expect(try await page.texts("\(Self.card("m1")) h3 .count") == ["(1 waiting)"])
                    #expect(try await page.execute("return window.__sameDocument") == .string("yes"), "the page was not reloaded")
                }
            }
        }

        /// Nicks are the players' own text: markup in one shows as typed and runs nothing.
        /// With credits (SPEC §11), the player's balance shows beside their
        /// name: read from their wallet, then from the game's debit.
        @Test func thePlayersBalanceShowsBesideTheirName() async throws {
            let site = try await E2ESite(
                game: Self.game, readToken: CreditsEndToEndTests.readToken, extra: "credits: { price: 2, topup_secret: \(CreditsEndToEndTests.secret) }")
            do {
                let topUp = try await CreditsEndToEndTests.topUp(site, #"{"provider":"generic","account":"ann","credits":5,"order":"o-ann"}"#)
                #expect(topUp.status == 200, "\(topUp.body)")
                try await WebDriver.with { page in
                    try await Self.open(page, site)
                    try await Self.play(site, "ann", nick: "Ann")
                    try await page.waitFor("Ann's balance after her debit") {
                        try await page.texts("\(Self.card("m1")) .player .balance") == [" · 3 credits"]
                    }
                    // A fresh page reads it from her wallet.
                    try await Self.open(page, site)
                    try await page.waitFor("Ann's balance from her wallet") {
                        try await page.texts("\(Self.card("m1")) .player .balance") == [" · 3 credits"]
                    }
                    // The board faults: her game is paid back, and its result says so.
                    let board = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/events"])
                    try board.client.publish(
                        "claw/m1/fault", payload: Array(#"{"code":"claw_rise_timeout","text":"The claw did not rise"}"#.utf8), qos: .atLeastOnce)
                    _ = try await board.waitFor("claw/m1/events") { $0.contains(#""type":"credits""#) && $0.contains(#""data":"refund""#) }
                    await board.stop()
                    try await page.waitFor("Ann's faulted game marked refunded") {
                        try await page.texts("\(Self.card("m1")) .results .refunded") == ["refunded 2 credits"]
                    }
                    #expect(try await page.texts("\(Self.card("m1")) .results li .outcome") == ["machine fault"])
                }
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }

        @Test func markupInANickShowsLiterallyAndRunsNothing() async throws {
            let image = #"<img src=x onerror="window.__pwned=1">"#
            let script = "<script>window.__pwned=2</script>"
            let svg = #"<svg onload="window.__pwned=3">"#
            try await E2ESite.with(game: Self.game) { site in
                let dashboard = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(site.base)/dashboard"), timeout: .seconds(10))
                #expect(dashboard.status == .ok)
                let policy = dashboard.headers["Content-Security-Policy"].joined(separator: ", ")
                #expect(policy.contains("script-src 'self'"), "CSP: \(policy)")
                #expect(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"), "CSP: \(policy)")
                _ = try await dashboard.body.collect(upTo: 1 << 20)

                try await WebDriver.with { page in
                    try await Self.open(page, site)
                    try await Self.play(site, "ann", nick: svg)
                    for (player, nick) in [("mallory", image), ("trudy", script)] {
                        let answer = try await site.generic(from: player, try Self.join(nick))
                        #expect(answer.json["result"] as? String == "queued", "\(answer.body)")
                    }
                    try await page.waitFor("both nicks in m1's queue") { try await Self.queue(page, "m1") == [image, script] }
                    try await page.waitFor("the player's nick") { try await page.texts("\(Self.card("m1")) .player .nick") == [svg] }
                    #expect(try await page.text(of: try await page.find("\(Self.card("m1")) ol.queue li .nick")) == image, "rendered as text")
                    let elements = try await page.execute("return document.querySelectorAll('main img, main script, main svg').length")
                    #expect(elements == .number(0), "no element was made from a nick")
                    #expect(try await page.execute("return typeof window.__pwned") == .string("undefined"), "no nick's script ran")
                }
            }
        }

        @Test func adminButtonsPauseResumeSkipRemoveResetAndMaintenanceWithTheRightTokenOnly() async throws {
            try await E2ESite.with(game: Self.game, adminToken: Self.adminToken) { site in
                let queue = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/queue"])
                try await Self.play(site, "ann", nick: "Ann")
                for (player, nick) in [("bob", "Bob"), ("cat", "Cat"), ("dan", "Dan")] {
                    #expect(try await site.generic(from: player, try Self.join(nick)).json["result"] as? String == "queued")
                }
                try await WebDriver.with { page in
                    try await Self.open(page, site)
                    try await page.waitFor("the queue with its Remove buttons") {
                        let queue = try await Self.queue(page, "m1")
                        let buttons = try await page.findAll(#"button[data-action="remove"][data-machine="m1"]"#)
                        return queue == ["Bob", "Cat", "Dan"] && buttons.count == 3
                    }
                    // Before a token is typed the buttons are there but off, saying why on hover.
                    let locked = try await page.execute(
                        "return Array.from(document.querySelectorAll('button[data-action]'), (button) => button.disabled && button.title.includes('admin token'))")
                    #expect(
                        locked == .array([WebDriver.JSON](repeating: .bool(true), count: 15)),
                        "3 Remove, and Pause, Resume, Skip turn, Reset, Maintenance, Back in play on both machines, all off")
                    let input = try await page.find("#admin-token")

                    // A wrong token: said at once when entered (Enter), before any button; refused, and nothing changes.
                    try await page.sendKeys("not-the-token", to: input)
                    try await page.sendKeys("\u{E007}", to: input)
                    try await page.waitFor("the wrong token said at once") {
                        try await page.texts("#admin-status.error") == ["The admin token was refused (401): check http.admin_token."]
                    }
                    try await Self.press(page, #"button[data-action="pause"][data-machine="m1"]"#)
                    try await page.waitFor("the refusal") {
                        let status = try await page.execute("const s = document.getElementById('admin-status'); return [s.className, s.textContent]")
                        guard let parts = status.array, parts.count == 2, let text = parts[1].string else { return false }
                        return parts[0] == .string("error") && (text.contains("401") || text.contains("refused"))
                    }
                    #expect(try await HTTP.get("\(site.base)/v1/machines/m1").json["paused"] as? Bool == false)
                    #expect(Self.latest(queue)?["paused"] as? Bool == false)
                    #expect(!(try await Self.badges(page, "m1")).contains("Paused"))

                    // The right one.
                    try await page.clear(input)
                    try await page.sendKeys(Self.adminToken, to: input)
                    try await page.sendKeys("\u{E007}", to: input)
                    try await page.waitFor("the right token said so") {
                        try await page.texts("#admin-status.ok") == ["The admin token is right: the controls are on."]
                    }
                    try await page.waitFor("the token kept in sessionStorage") {
                        try await page.execute("return sessionStorage.getItem('claw-admin-token')") == .string(Self.adminToken)
                    }
                    // With the token, what the machine's state makes pointless stays off, saying why:
                    // m1 is played, not paused, in play.
                    try await page.waitFor("Resume, Reset and Back in play off for m1's state, the others on") {
                        let states = try await page.execute(
                            "return Array.from(document.querySelectorAll('button[data-machine=\"m1\"][data-action]:not([data-action=\"remove\"])'), (b) => b.dataset.action + ':' + (b.disabled ? b.title : 'on'))")
                        return states == .array([
                            "pause:on", "resume:Not paused.", "skip:on",
                            "reset:A player holds the machine: skip their turn or wait for the game's end.", "maintenance-on:on",
                            "maintenance-off:The machine is in play.",
                        ].map { WebDriver.JSON.string($0) })
                    }
                    try await Self.press(page, #"button[data-action="pause"][data-machine="m1"]"#)
                    try await eventually("the snapshot to say paused") { Self.latest(queue)?["paused"] as? Bool == true }
                    #expect(try await Self.retained(site)["paused"] as? Bool == true, "the retained snapshot says paused")
                    try await page.waitFor("the Paused label") { try await Self.badges(page, "m1").contains("Paused") }
                    try await page.waitFor("the action confirmed") { try await page.texts("#admin-status.ok") == ["Done: pause m1"] }

                    try await Self.press(page, #"button[data-action="resume"][data-machine="m1"]"#)
                    try await eventually("the snapshot to say resumed") { Self.latest(queue)?["paused"] as? Bool == false }
                    #expect(try await Self.retained(site)["paused"] as? Bool == false, "the retained snapshot says not paused")
                    try await page.waitFor("the Paused label to go") { try await Self.badges(page, "m1") == ["Online"] }

                    try await Self.press(page, #"button[data-action="remove"][data-machine="m1"][data-accid="bob"]"#)
                    try await eventually("bob out of the snapshot") { Self.waiting(Self.latest(queue)) == ["cat", "dan"] }
                    #expect(Self.waiting(try await Self.retained(site)) == ["cat", "dan"], "the retained snapshot no longer lists bob")
                    try await page.waitFor("Bob out of the page's queue") { try await Self.queue(page, "m1") == ["Cat", "Dan"] }
                    try await page.waitFor("the removal confirmed") { try await page.texts("#admin-status") == ["Done: removed bob from m1"] }

                    // Skip turn: ann's game ends `skipped`, the next waiting player is offered the turn.
                    try await Self.press(page, #"button[data-action="skip"][data-machine="m1"]"#)
                    try await eventually("cat to be offered the turn") {
                        (Self.latest(queue)?["player"] as? [String: Any])?["accid"] as? String == "cat"
                    }
                    try await page.waitFor("Cat as the player, Ann's game in the results") {
                        let player = try await Self.texts(page, "m1", ".player .nick"), queue = try await Self.queue(page, "m1")
                        let outcomes = try await Self.texts(page, "m1", "ol.results li .outcome")
                        return player == ["Cat"] && queue == ["Dan"] && outcomes.first == "skipped"
                    }

                    // Maintenance by hand: cat's offer stands and the card says it will be out after it.
                    try await Self.press(page, #"button[data-action="maintenance-on"][data-machine="m1"]"#)
                    try await eventually("the snapshot to give the reason") { Self.latest(queue)?["reason"] as? String == "taken out from the dashboard" }
                    try await page.waitFor("the reason on the card, the game still on") {
                        let fault = try await Self.texts(page, "m1", "p.fault"), badges = try await Self.badges(page, "m1")
                        return fault.first?.contains("after the game in progress") == true && badges.contains("Maintenance")
                    }
                    try await Self.press(page, #"button[data-action="skip"][data-machine="m1"]"#)
                    try await page.waitFor("m1 in maintenance, dan not offered") {
                        let state = try await page.execute("return document.querySelector('\(Self.card("m1"))').dataset.state")
                        let waiting = try await Self.queue(page, "m1")
                        return state == .string("maintenance") && waiting == ["Dan"]
                    }
                    #expect(Self.latest(queue)?["player"] is NSNull)
                    try await Self.press(page, #"button[data-action="maintenance-off"][data-machine="m1"]"#)
                    try await eventually("dan to be offered the turn") {
                        (Self.latest(queue)?["player"] as? [String: Any])?["accid"] as? String == "dan"
                    }

                    // The board faults: dan's offer is taken back; the card shows the fault; Reset brings m1 back.
                    try queue.client.publish(
                        "claw/m1/fault", payload: Array(#"{"code":"gantry_home_timeout","text":"The gantry did not come home"}"#.utf8),
                        qos: .atLeastOnce)
                    try await page.waitFor("the fault on the card") {
                        let code = try await Self.texts(page, "m1", "p.fault .fault-code")
                        let state = try await page.execute("return document.querySelector('\(Self.card("m1"))').dataset.state")
                        let waiting = try await Self.queue(page, "m1")
                        return code == ["gantry_home_timeout"] && state == .string("maintenance") && waiting == ["Dan"]
                    }
                    try await Self.press(page, #"button[data-action="reset"][data-machine="m1"]"#)
                    try await page.waitFor("m1 back in play, dan offered again, the fault gone") {
                        let player = try await Self.texts(page, "m1", ".player .nick")
                        let hidden = try await page.execute("return document.querySelector('\(Self.card("m1")) p.fault').hidden")
                        return player == ["Dan"] && hidden == .bool(true)
                    }
                    #expect(Self.latest(queue)?["fault"] == nil)
                }
                await queue.stop()
            }
        }

        @Test func withoutAnAdminTokenThePageIsReadOnly() async throws {
            try await E2ESite.with(game: Self.game) { site in
                try await Self.play(site, "ann", nick: "Ann")
                #expect(try await site.generic(from: "bob", try Self.join("Bob")).json["result"] as? String == "queued")
                try await WebDriver.with { page in
                    try await Self.open(page, site)
                    try await page.waitFor("Bob in m1's queue") { try await Self.queue(page, "m1") == ["Bob"] }
                    // Ann plays, and this gateway keeps no wallets: the page asks for none (no 404 per player).
                    try await page.waitFor("Ann as m1's player") { try await Self.texts(page, "m1", ".player .nick") == ["Ann"] }
                    #expect(
                        try await page.execute("return performance.getEntriesByType('resource').filter((e) => e.name.includes('/wallet')).length")
                            == .number(0))
                    try await page.waitFor("the read-only notice") {
                        try await page.texts("#admin-status").first?.hasPrefix("Read-only") == true
                    }
                    #expect(try await page.findAll("button[data-action]").isEmpty, "no admin button at all")
                    #expect(try await page.execute("return document.getElementById('admin-token').disabled") == .bool(true))
                }
            }
        }

        /// With `http.read_token` the page asks for it in a form of its own,
        /// refuses a wrong one, then shows the arcade live; a reload in the
        /// same tab does not ask again.
        @Test func withAReadTokenThePageAsksForItOnceThenShowsTheArcadeLive() async throws {
            let token = "read-token-0123456789"
            try await E2ESite.with(game: Self.game, simulate: false, http: "read_token: \(token)") { site in
                try site.restartSimulator()
                try await eventually("both simulated machines to be online") {
                    let list = try? await HTTP.request(.GET, "\(site.base)/v1/machines", headers: [("Authorization", "Bearer \(token)")])
                    return (list?.body.components(separatedBy: #""online":true"#).count ?? 0) == 3
                }
                try await Self.playAGame(site, "kai", nick: "Kai", on: "m2", readToken: token)
                try await Self.play(site, "ann", nick: "Ann")
                try await WebDriver.with { page in
                    try await page.navigate("\(site.base)/dashboard")
                    try await page.passReadTokenPrompt(
                        server: "gateway", setting: "http.read_token", token: token,
                        nothingShown: { try await page.findAll("section.machine").isEmpty },
                        live: { try await Self.waitLive(page) })
                    try await page.waitFor("m1 and m2 online, Ann playing on m1") {
                        let badges = [try await Self.badges(page, "m1"), try await Self.badges(page, "m2")]
                        let player = try await Self.texts(page, "m1", ".player .nick")
                        return badges == [["Online"], ["Online"]] && player == ["Ann"]
                    }
                    #expect(try await site.generic(from: "bob", try Self.join("Bob")).json["result"] as? String == "queued")
                    try await page.waitFor("Bob in m1's queue, live") { try await Self.queue(page, "m1") == ["Bob"] }
                    try await page.waitFor("Kai's game on m2, read from the games API with the token") {
                        try await Self.texts(page, "m2", "ol.results li .nick") == ["Kai"]
                    }

                    // Asked once: a reload in the same tab goes straight to the arcade.
                    try await page.navigate("\(site.base)/dashboard")
                    try await Self.waitLive(page)
                    #expect(try await page.execute("return document.getElementById('login').hidden") == .bool(true))
                    #expect(try await Self.queue(page, "m1") == ["Bob"])
                }
            }
        }

        static func waitLive(_ page: WebDriver) async throws {
            try await page.waitFor("the dashboard to be live with its machines") {
                let link = try await page.texts("#link"), cards = try await page.findAll("section.machine")
                return link == ["Live"] && cards.count == 2
            }
        }

        @Test func afterAGatewayRestartThePageReconnectsByItself() async throws {
            try await E2ESite.with(game: Self.game) { site in
                try await WebDriver.with { page in
                    try await Self.open(page, site)
                    try await page.execute("window.__sameDocument = 'yes'")
                    try await Self.play(site, "ann", nick: "Ann")
                    #expect(try await site.generic(from: "bob", try Self.join("Bob")).json["result"] as? String == "queued")
                    try await page.waitFor("Bob in m1's queue") { try await Self.queue(page, "m1") == ["Bob"] }

                    site.killGateway()
                    try await page.waitFor("the page to say it is disconnected") {
                        try await page.texts("#link") == ["Disconnected, reconnecting…"]
                    }
                    try site.startGateway()
                    try await page.waitFor("the page to be live again", timeout: .seconds(30)) { try await page.texts("#link") == ["Live"] }
                    try await site.waitReady()

                    // The turn in progress is not restored, the queue is: bob is next, whoever joins now waits behind him.
                    let answer = try await site.generic(from: "yan", try Self.join("Yan"))
                    #expect(answer.json["result"] as? String == "queued", "\(answer.body)")
                    try await page.waitFor("Yan on the page without a reload") { try await Self.queue(page, "m1").last == "Yan" }
                    #expect(try await page.execute("return window.__sameDocument") == .string("yes"), "the page was not reloaded")
                }
            }
        }

        /// A busy arcade: on m1 a game is on with three waiting and two
        /// finished; on m2 a turn is offered with two waiting. With
        /// CLAW_DASHBOARD_SCREENSHOT set, the page is saved there as a PNG
        /// (docs/dashboard.png is made this way).
        @Test func anArcadeMidGame() async throws {
            try await E2ESite.with(game: Self.game, adminToken: Self.adminToken, gateway: "stats_interval: 1s") { site in
                try await WebDriver.with { page in
                    try await Self.open(page, site)
                    try await page.sendKeys(Self.adminToken, to: try await page.find("#admin-token"))
                    for (player, nick, machine) in [("kai", "Kai", "m1"), ("lea", "Léa", "m1"), ("max", "Max", "m2")] {
                        try await Self.playAGame(site, player, nick: nick, on: machine)
                    }
                    try await Self.play(site, "ann", nick: "Ann")
                    try await site.generic(from: "ann", #"{"command":1,"data":"up","serial":1}"#)
                    for (player, nick) in [("bob", "Bob"), ("cleo", "Cleo"), ("dan", "Dan the Grabber")] {
                        #expect(try await site.generic(from: player, try Self.join(nick)).json["result"] as? String == "queued")
                    }
                    let offer = try await site.generic(from: "eve", to: "m2", try Self.join("Eve"))
                    #expect(offer.json["result"] as? String == "offered")
                    for (player, nick) in [("finn", "Finn"), ("gus", "Gus")] {
                        #expect(try await site.generic(from: player, to: "m2", try Self.join(nick)).json["result"] as? String == "queued")
                    }

                    try await page.waitFor("m1 mid-game") {
                        let player = try await Self.texts(page, "m1", ".player .nick"), state = try await Self.texts(page, "m1", ".state")
                        let queue = try await Self.queue(page, "m1"), results = try await Self.texts(page, "m1", "ol.results li .nick")
                        let countdown = try await Self.texts(page, "m1", ".countdown")
                        return player == ["Ann"] && state == ["playing"] && queue == ["Bob", "Cleo", "Dan the Grabber"]
                            && results == ["Léa", "Kai"] && countdown.first?.contains(":") == true
                    }
                    try await page.waitFor("m2 offering a turn") {
                        let player = try await Self.texts(page, "m2", ".player .nick"), state = try await Self.texts(page, "m2", ".state")
                        let queue = try await Self.queue(page, "m2"), results = try await Self.texts(page, "m2", "ol.results li .nick")
                        return player == ["Eve"] && state == ["offered"] && queue == ["Finn", "Gus"] && results == ["Max"]
                    }
                    // Ann keeps playing (a move every 300 ms or so) until a statistics interval shows her acks.
                    let clock = ContinuousClock()
                    var serial = 1, moved = clock.now
                    try await page.waitFor("today's figures and m1's ack latency from the statistics", timeout: .seconds(15)) {
                        if clock.now - moved > .milliseconds(300) {
                            serial += 1
                            moved = clock.now
                            try await site.generic(from: "ann", #"{"command":1,"data":"\#(serial % 2 == 0 ? "left" : "right")","serial":\#(serial)}"#)
                        }
                        let today = try await page.texts(".today"), latency = try await Self.texts(page, "m1", ".latency")
                        let drops = try await page.texts(".drops"), admin = try await page.texts("#admin-status")
                        // Games ended today; on m1 Ann's, in progress, is told apart (no result yet, so not a game lost).
                        return today == ["Today: 2 games, 2 won (100% won) · 1 playing", "Today: 1 game, 1 won (100% won)"]
                            && latency.first?.hasPrefix("Ack latency: p50 ") == true && drops == ["Dropped: none", "Dropped: none"]
                            && admin == ["Token kept for this tab."]
                    }

                    let png = try await page.screenshot()
                    #expect(png.prefix(8) == Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]), "a PNG")
                    #expect(Self.pngSize(png) == [1400, 1000])
                    if let path = ProcessInfo.processInfo.environment["CLAW_DASHBOARD_SCREENSHOT"], !path.isEmpty {
                        try png.write(to: URL(fileURLWithPath: path))
                    }
                }
            }
        }

        /// A page opened (or reloaded) after games were played shows each
        /// machine's last results from GET /v1/machines/<id>/games. Also
        /// proves that each machine's first game keeps its own record (their
        /// session ids once collided, and m2's overwrote m1's).
        @Test func everyMachinesLastResultsShowOnAFreshPage() async throws {
            try await E2ESite.with(game: Self.game) { site in
                try await Self.playAGame(site, "kai", nick: "Kai", on: "m1")
                try await Self.playAGame(site, "max", nick: "Max", on: "m2")
                try await WebDriver.with { page in
                    try await Self.open(page, site)
                    try await page.waitFor("m1's results") { try await Self.texts(page, "m1", "ol.results li .nick") == ["Kai"] }
                    let m2 = try await HTTP.get("\(site.base)/v1/machines/m2/games").json["games"] as? [[String: Any]] ?? []
                    #expect(m2.map { $0["player"] as? String } == ["max"], "m2's game is recorded as m2's")
                    // Loaded: the list has an item, a game or "none yet".
                    try await page.waitFor("m2's results to load") { try await !Self.texts(page, "m2", "ol.results li").isEmpty }
                    #expect(try await Self.texts(page, "m2", "ol.results li .nick") == ["Max"], "m2's last result")
                    #expect(try await Self.texts(page, "m2", "ol.results li .outcome") == ["won"])
                }
            }
        }

        // MARK: Helpers

        static func card(_ machine: String) -> String { #"section.machine[data-machine="\#(machine)"]"# }

        /// Loads the dashboard and waits until it is live with its machines;
        /// with the site's read token in the tab, as the page keeps it once asked.
        static func open(_ page: WebDriver, _ site: E2ESite) async throws {
            try await page.navigate("\(site.base)/dashboard")
            if let token = site.readToken {
                _ = try await page.execute("sessionStorage.setItem('claw-read-token', '\(token)')")
                try await page.navigate("\(site.base)/dashboard")
            }
            try await page.waitFor("the dashboard to be live with its machines") {
                let link = try await page.texts("#link"), cards = try await page.findAll("section.machine")
                return link == ["Live"] && cards.count == 2
            }
        }

        /// The nicks in a machine's queue, as the page shows them.
        static func queue(_ page: WebDriver, _ machine: String) async throws -> [String] {
            try await page.texts("\(card(machine)) ol.queue li .nick")
        }

        /// The `textContent` of what matches `css` inside a machine's card.
        static func texts(_ page: WebDriver, _ machine: String, _ css: String) async throws -> [String] {
            try await page.texts("\(card(machine)) \(css)")
        }

        static func badges(_ page: WebDriver, _ machine: String) async throws -> [String] {
            try await page.texts("\(card(machine)) .badges .pill")
        }

        /// Clicks the first element matching `css`, finding it again if the page re-rendered it meanwhile.
        static func press(_ page: WebDriver, _ css: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            try await page.waitFor("to click \(css)", sourceLocation: sourceLocation) {
                try await page.click(try await page.find(css))
                return true
            }
        }

        /// A join (command 6) with `nick`, as the JSON a client sends.
        static func join(_ nick: String) throws -> String {
            String(decoding: try JSONSerialization.data(withJSONObject: ["command": 6, "data": nick] as [String: Any]), as: UTF8.self)
        }

        /// `player` joins `machine` (idle: they are offered the turn) and accepts: they play, whoever joins next waits.
        static func play(_ site: E2ESite, _ player: String, nick: String, on machine: String = "m1") async throws {
            let offer = try await site.generic(from: player, to: machine, try join(nick))
            let session = try #require(offer.json["session"] as? String, "\(player) is offered \(machine): \(offer.body)")
            let accept = try await site.generic(from: player, to: machine, #"{"command":12,"data":"\#(session)"}"#)
            #expect(accept.json["result"] as? String == "accepted", "\(accept.body)")
        }

        /// `player` plays a whole game on `machine`: joins, accepts, moves and
        /// grabs; the simulated PC reports it won. Returns once the machine is free.
        static func playAGame(_ site: E2ESite, _ player: String, nick: String, on machine: String, readToken: String? = nil) async throws {
            try await play(site, player, nick: nick, on: machine)
            try await site.generic(from: player, to: machine, #"{"command":1,"data":"left","serial":1}"#)
            let grab = try await site.generic(from: player, to: machine, #"{"command":2,"serial":2}"#)
            #expect(grab.json["result"] as? String == "forwarded", "\(grab.body)")
            try await eventually("\(player)'s game on \(machine) to end") {
                let headers = readToken.map { [("Authorization", "Bearer \($0)")] } ?? []
                let state = try await HTTP.request(.GET, "\(site.base)/v1/machines/\(machine)", headers: headers).json
                return state["state"] as? String == "idle" && state["player"] is NSNull
            }
        }

        /// The last snapshot `subscriber` read.
        static func latest(_ subscriber: TestSubscriber, _ machine: String = "m1") -> [String: Any]? {
            subscriber.payloads(on: "claw/\(machine)/queue").last.flatMap {
                try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
            }
        }

        /// The snapshot the broker keeps for `machine`, as a new subscriber is given it.
        static func retained(_ site: E2ESite, _ machine: String = "m1") async throws -> [String: Any] {
            let reader = try await TestSubscriber(broker: site.broker, topics: ["claw/\(machine)/queue"])
            try await eventually("the retained snapshot of \(machine)") { reader.messages.contains { $0.retain } }
            let payload = reader.messages.first { $0.retain }?.payload ?? []
            await reader.stop()
            return try #require(try JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any])
        }

        static func waiting(_ snapshot: [String: Any]?) -> [String] {
            (snapshot?["waiting"] as? [[String: Any]] ?? []).compactMap { $0["accid"] as? String }
        }

        /// Width and height from a PNG's IHDR.
        static func pngSize(_ png: Data) -> [Int] {
            let bytes = [UInt8](png.prefix(24))
            guard bytes.count == 24 else { return [] }
            let number = { (at: Int) in bytes[at..<at + 4].reduce(0) { $0 << 8 | Int($1) } }
            return [number(16), number(20)]
        }
    }
}
