import AsyncHTTPClient
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import Synchronization
import Testing

@testable import ClawGateway

extension DatabaseSuites {
    /// The chain's history page (``HistoryDashboardRoutes``) in a real
    /// browser: Debian's chromium, headless, through chromedriver
    /// (``WebDriver``), drawing with Chart.js from Debian's `libjs-chart.js`
    /// (installed by the test command, scripts/deps.sh). The page is served by
    /// an HTTP server of the test's own beside the recorder's four read
    /// routes answering what the test sets, in the shapes docs/RECORDER.md
    /// gives: what the charts and tables show is what the API said.
    @Suite(.serialized) struct HistoryDashboardBrowserTests {
        static let debianChartJS = "/usr/share/javascript/chart.js/chart.min.js"
        static let image = #"<img src=x onerror="window.__pwned=1">"#
        static let script = "<script>window.__pwned=2</script>"
        static let tokenNote = "The recorder needs its read token (recorder.read_token) or the admin token: enter it above."

        @Test func chartsAndTablesShowTheRecordersFigures() async throws {
            try Self.requireChartJS()
            try await FakeRecorderAPI.with(Self.figures()) { api in
                try await WebDriver.with { page in
                    try await Self.open(page, api)
                    // The charts are Chart.js's, with the API's figures.
                    #expect(try await page.execute("return typeof Chart") == .string("function"))
                    #expect(try await Self.chartType(page, "hourly-chart") == .string("bar"))
                    #expect(try await Self.chartType(page, "win-rate-chart") == .string("line"))
                    // Games per hour: 7 days asked, so 168 hours from the answer's first; an hour not listed had no game.
                    #expect(try await Self.labels(page, "hourly-chart").count == 168)
                    #expect(try await Self.labels(page, "hourly-chart").first == "11-24 08:00")
                    #expect(try await Self.datasets(page, "hourly-chart") == [
                        Self.Series(label: "arcade-1", data: Self.hours(168, [0: 12, 2: 7])),
                        Self.Series(label: "arcade-2", data: Self.hours(168, [0: 4, 23: 9])),
                    ])
                    // Win rate: a line per site and machine, a point per day; no game played, no point.
                    #expect(try await Self.labels(page, "win-rate-chart") == (19...25).map { "2026-11-\($0)" })
                    #expect(try await Self.datasets(page, "win-rate-chart") == [
                        Self.Series(label: "arcade-1 · \(Self.image)", data: [nil, nil, nil, nil, nil, 0.25, nil]),
                        Self.Series(label: "arcade-1 · m1", data: [nil, nil, nil, nil, nil, 0.225, 0.5]),
                        Self.Series(label: "arcade-2 · m1", data: [nil, nil, nil, nil, nil, nil, 0]),
                    ])
                    // Lines with the same rate stay apart: a point style of its own for each.
                    let styles = try await page.execute(
                        "return Chart.getChart(document.getElementById('win-rate-chart')).data.datasets.map((set) => set.pointStyle)")
                    #expect(Set((styles.array ?? []).compactMap(\.string)).count == 3, "\(styles)")
                    #expect(try await page.execute("return document.getElementById('charts-missing').hidden") == .bool(true))
                    #expect(try await page.texts("#updated").first?.hasSuffix(" UTC.") == true, "the time in UTC, as everything on the page")

                    // The daily report: newest day first.
                    #expect(try await Self.rows(page, "#daily") == [
                        ["2026-11-25", "arcade-1", "m1", "10", "5", "50.0%", "0"],
                        ["2026-11-25", "arcade-2", "m1", "3", "0", "0.0%", "0"],
                        ["2026-11-24", "arcade-1", Self.image, "8", "2", "25.0%", "0"],
                        ["2026-11-24", "arcade-1", "m1", "40", "9", "22.5%", "1"],
                        ["2026-11-23", "arcade-2", "m1", "0", "0", "–", "0"],
                    ])
                    #expect(try await page.findAll("#daily td.col-no-result.attention").count == 1, "a machine with games never reported stands out")
                    #expect(try await page.texts("#summary") == ["61 games, 16 won (26.2%) in the last 7 days"])
                    // Per machine (SPEC §16): the odds /v1/report/fairness gave; "–" for what the recorder does not have
                    // (no game to take a rate of, no wallets, no strong grab).
                    #expect(try await Self.rows(page, "#fairness") == [
                        ["arcade-1", Self.image, "40", "6", "15.0%", "3 of 3 won", "80", "24", "30.0%"],
                        ["arcade-2", "m1", "0", "0", "–", "–", "–", "0", "–"],
                    ])
                    #expect(try await page.execute("return document.getElementById('fairness-empty').hidden") == .bool(true))
                    // The latest games, as /v1/games listed them.
                    #expect(try await Self.rows(page, "#games") == [
                        ["2026-11-25 07:10:00", "arcade-2", "m1", "Bo", "lost", "4"],
                        ["2026-11-25 07:05:00", "arcade-1", Self.image, Self.script, "won", "9"],
                        ["2026-11-25 07:00:00", "arcade-1", "m1", "alice", "no result", "0"],
                    ])

                    // Markup in a machine's name or a nick is text: nothing made from it, nothing ran.
                    let made = try await page.execute("return document.querySelectorAll('main img, main script, main svg, header img').length")
                    #expect(made == .number(0), "no element was made from the data")
                    #expect(try await page.execute("return typeof window.__pwned") == .string("undefined"), "nothing in the data ran")
                    let cell = try await page.find(#"#daily tr[data-day="2026-11-24"] td.col-machine"#)
                    #expect(try await page.text(of: cell) == Self.image, "rendered as text")
                    let fairnessCell = try await page.find(#"#fairness tr[data-site="arcade-1"] td.col-machine"#)
                    #expect(try await page.text(of: fairnessCell) == Self.image, "rendered as text")

                    // The filters: every site and machine seen; a choice asks the API for it.
                    #expect(try await Self.options(page, "site") == ["", "arcade-1", "arcade-2"])
                    #expect(try await Self.options(page, "machine") == ["", Self.image, "m1"])
                    #expect(api.query("/v1/report/hourly") == ["hours": "168"])
                    #expect(api.query("/v1/report/daily") == ["days": "7"])
                    #expect(api.query("/v1/games") == ["limit": "25"])
                    #expect(api.query("/v1/report/fairness") == ["days": "7"])
                    try await page.execute("window.__sameDocument = 'yes'")
                    api.set(Self.figures(dailyM1Today: (games: 20, wins: 2)))
                    try await page.click(try await page.find(#"#site option[value="arcade-1"]"#))
                    try await page.waitFor("the page to ask for arcade-1") {
                        api.query("/v1/report/daily") == ["days": "7", "site": "arcade-1"]
                    }
                    #expect(try await Self.options(page, "machine") == ["", Self.image, "m1"], "arcade-1's machines")
                    try await page.click(try await page.find(#"#machine option[value="m1"]"#))
                    try await page.click(try await page.find(#"#days option[value="1"]"#))
                    try await page.waitFor("the page to ask for a day of arcade-1's m1") {
                        api.query("/v1/report/hourly") == ["hours": "24", "site": "arcade-1", "machine": "m1"]
                            && api.query("/v1/report/daily") == ["days": "1", "site": "arcade-1", "machine": "m1"]
                            && api.query("/v1/games") == ["limit": "25", "site": "arcade-1", "machine": "m1"]
                            && api.query("/v1/report/fairness") == ["days": "1", "site": "arcade-1", "machine": "m1"]
                    }
                    // What the API answered then is what the same charts show.
                    try await page.waitFor("the hourly chart over one day") {
                        try await Self.labels(page, "hourly-chart").count == 24
                    }
                    #expect(try await Self.datasets(page, "hourly-chart") == [
                        Self.Series(label: "arcade-1", data: Self.hours(24, [0: 12, 2: 7])),
                        Self.Series(label: "arcade-2", data: Self.hours(24, [0: 4, 23: 9])),
                    ])
                    #expect(try await Self.labels(page, "win-rate-chart") == ["2026-11-19"], "one day from the answer's since")
                    #expect(try await page.texts(#"#daily tr[data-day="2026-11-25"][data-machine="m1"][data-site="arcade-1"] td.col-win-rate"#) == ["10.0%"])
                    #expect(try await page.execute("return window.__sameDocument") == .string("yes"), "the page was not reloaded")
                    // With CLAW_HISTORY_SCREENSHOT set, the page is saved there as a PNG.
                    if let path = ProcessInfo.processInfo.environment["CLAW_HISTORY_SCREENSHOT"], !path.isEmpty {
                        try await page.click(try await page.find(#"#site option[value=""]"#))
                        try await page.click(try await page.find(#"#days option[value="7"]"#))
                        try await page.waitFor("a week again") { try await Self.labels(page, "hourly-chart").count == 168 }
                        try await page.screenshot().write(to: URL(fileURLWithPath: path))
                    }
                }
            }
        }

        /// Games per hour follows the data: a first hour of games is a day of
        /// bars ending with the current hour, not a week with a hairline at its
        /// edge; a month is drawn in 6-hour bars (UTC-aligned), never more than
        /// a week's worth of bars.
        @Test func theHourlyAxisFollowsTheData() async throws {
            try Self.requireChartJS()
            var first = Self.figures()
            first.hourly = [
                "since": "2026-11-18T08:00:00.000Z",
                "hours": [["hour": "2026-11-25T07:00:00.000Z", "site": "arcade-1", "games": 5, "wins": 1]],
            ]
            try await FakeRecorderAPI.with(first) { api in
                try await WebDriver.with { page in
                    try await Self.open(page, api)
                    let day = try await Self.labels(page, "hourly-chart")
                    #expect(day.count == 24 && day.first == "11-24 08:00" && day.last == "11-25 07:00", "\(day)")
                    #expect(try await Self.datasets(page, "hourly-chart") == [Self.Series(label: "arcade-1", data: Self.hours(24, [23: 5]))])

                    var month = Self.figures()
                    month.hourly = [
                        "since": "2026-10-27T08:00:00.000Z",
                        "hours": [
                            ["hour": "2026-10-27T08:00:00.000Z", "site": "arcade-1", "games": 2, "wins": 0],
                            ["hour": "2026-10-27T13:00:00.000Z", "site": "arcade-1", "games": 3, "wins": 1],
                            ["hour": "2026-11-26T07:00:00.000Z", "site": "arcade-1", "games": 4, "wins": 1],
                        ],
                    ]
                    api.set(month)
                    try await page.click(try await page.find(#"#days option[value="30"]"#))
                    try await page.waitFor("the page to ask for 30 days") { api.query("/v1/report/hourly") == ["hours": "720"] }
                    try await page.waitFor("a month in 6-hour bars") { try await Self.labels(page, "hourly-chart").count == 121 }
                    let bars = try await Self.labels(page, "hourly-chart")
                    #expect(bars.first == "10-27 08:00" && bars[1] == "10-27 12:00" && bars.last == "11-26 06:00", "the first bar starts with the window")
                    #expect(try await Self.datasets(page, "hourly-chart") == [Self.Series(label: "arcade-1", data: Self.hours(121, [0: 2, 1: 3, 120: 4]))])
                    let axis = try await page.execute("return Chart.getChart(document.getElementById('hourly-chart')).options.scales.y.title.text")
                    #expect(axis == .string("games per 6 hours"))
                }
            }
        }

        /// Every 30 seconds the page reads the API again and redraws the same
        /// charts: no reload, no click.
        /// Every 30 s by default; `?reload=2` paces it for a wall display, and for this test.
        @Test func thePageReadsTheRecorderAgainAtItsPace() async throws {
            try Self.requireChartJS()
            try await FakeRecorderAPI.with(Self.figures()) { api in
                try await WebDriver.with { page in
                    try await page.navigate("\(api.base)/history?reload=2")
                    try await Self.waitLive(page)
                    try await page.execute("window.__chart = Chart.getChart(document.getElementById('win-rate-chart'))")
                    let loads = api.loads("/v1/report/daily")
                    api.set(Self.figures(dailyM1Today: (games: 20, wins: 2)))
                    try await page.waitFor("the win rate read again", timeout: .seconds(10)) {
                        try await page.texts(#"#daily tr[data-day="2026-11-25"][data-machine="m1"][data-site="arcade-1"] td.col-win-rate"#) == ["10.0%"]
                    }
                    #expect(api.loads("/v1/report/daily") == loads + 1, "read once more, not in a loop")
                    #expect(try await Self.datasets(page, "win-rate-chart")[1] == Self.Series(label: "arcade-1 · m1", data: [nil, nil, nil, nil, nil, 0.225, 0.1]))
                    #expect(try await page.execute("return window.__chart === Chart.getChart(document.getElementById('win-rate-chart'))") == .bool(true),
                            "the same chart, redrawn")
                }
            }
        }

        /// With a read token on the recorder, the page asks for it in a form of
        /// its own, refuses a wrong one, then shows the charts; a reload in the
        /// same tab does not ask again.
        @Test func withAReadTokenThePageAsksForItOnceThenShowsTheCharts() async throws {
            try Self.requireChartJS()
            let token = "recorder-read-token-0123456789"
            try await FakeRecorderAPI.with(Self.figures(), readToken: token) { api in
                try await WebDriver.with { page in
                    try await page.navigate("\(api.base)/history")
                    try await page.passReadTokenPrompt(
                        server: "recorder", setting: "recorder.read_token", token: token,
                        nothingShown: {
                            let rows = try await page.findAll("#daily tbody tr")
                            let datasets = try await Self.datasets(page, "hourly-chart")
                            // The empty tables say what they wait for.
                            let notes = try await page.texts("#daily-empty, #fairness-empty, #games-empty")
                            return rows.isEmpty && datasets.isEmpty && notes == Array(repeating: Self.tokenNote, count: 3)
                        },
                        live: { try await Self.waitLive(page) })
                    #expect(try await Self.datasets(page, "hourly-chart").map(\.label) == ["arcade-1", "arcade-2"])
                    #expect(api.refused > 0, "the wrong token reached the API and was refused there")

                    // Asked once: a reload in the same tab goes straight to the charts.
                    try await page.navigate("\(api.base)/history")
                    try await Self.waitLive(page)
                    #expect(try await page.execute("return document.getElementById('login').hidden") == .bool(true))
                    #expect(try await Self.datasets(page, "win-rate-chart").count == 3)
                }
            }
        }

        /// Without Debian's Chart.js where the recorder looks for it:
        /// `/history/chart.js` answers 503 saying what to install, the page says
        /// it in place of the charts and still shows its tables.
        @Test func withoutChartJSThePageSaysWhatToInstallAndKeepsItsTables() async throws {
            let missing = "/nonexistent/claw-history/chart.min.js"
            let routes = HistoryDashboardRoutes<BasicRequestContext>(chartJSPath: missing)
            #expect(!routes.hasCharts)
            let message = "The charts need Chart.js from Debian's libjs-chart.js, and \(missing) is missing: "
                + "install it (apt-get install libjs-chart.js) and restart the recorder."
            try await FakeRecorderAPI.with(Self.figures(), chartJSPath: missing) { api in
                let answer = try await HTTP.get("\(api.base)/history/chart.js")
                #expect(answer.status == 503)
                #expect(answer.json["code"] as? String == "charts_unavailable")
                #expect(answer.json["message"] as? String == message)

                try await WebDriver.with { page in
                    try await Self.open(page, api)
                    try await page.waitFor("the page to say what to install") {
                        try await page.texts("#charts-missing") == [message]
                    }
                    #expect(try await page.execute("return document.getElementById('charts-missing').hidden") == .bool(false))
                    #expect(try await page.execute("return typeof window.Chart") == .string("undefined"))
                    #expect(try await page.execute("return Array.from(document.querySelectorAll('.chart-panel'), (p) => p.hidden)")
                        == .array([.bool(true), .bool(true)]), "no empty charts")
                    #expect(try await Self.rows(page, "#daily").count == 5, "the daily report without the charts")
                    #expect(try await Self.rows(page, "#fairness").count == 2)
                    #expect(try await Self.rows(page, "#games").count == 3)
                }
            }
        }

        /// The page's files: from this origin, no inline script, and Chart.js
        /// byte for byte Debian's.
        @Test func thePagesFilesAndDebiansChartJS() async throws {
            try Self.requireChartJS()
            #expect(HistoryDashboardRoutes<BasicRequestContext>().hasCharts, "the default path is where libjs-chart.js puts Chart.js")
            try await FakeRecorderAPI.with(Self.figures()) { api in
                for (path, type) in [
                    ("history", "text/html"), ("history/history.js", "text/javascript"), ("history/history.css", "text/css"),
                    ("history/app.css", "text/css"), ("history/chart.js", "text/javascript"),
                ] {
                    let answer = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(api.base)/\(path)"), timeout: .seconds(10))
                    #expect(answer.status == .ok, "\(path)")
                    #expect(answer.headers["Content-Type"].first?.hasPrefix(type) == true, "\(path)")
                    let policy = answer.headers["Content-Security-Policy"].joined(separator: ", ")
                    #expect(policy.contains("script-src 'self'") && policy.contains("connect-src 'self'"), "\(path) CSP: \(policy)")
                    #expect(!policy.contains("unsafe-inline") && !policy.contains("unsafe-eval"), "\(path) CSP: \(policy)")
                    let body = try await answer.body.collect(upTo: 1 << 22)
                    if path == "history/chart.js" {
                        let debian = try Data(contentsOf: URL(fileURLWithPath: Self.debianChartJS))
                        #expect(Data(body.readableBytesView) == debian, "Debian's Chart.js, as installed")
                    }
                }
            }
        }

        // MARK: Helpers

        static func requireChartJS() throws {
            try #require(
                FileManager.default.fileExists(atPath: debianChartJS),
                "\(debianChartJS) is missing: the charts are drawn by Debian's libjs-chart.js; run ./scripts/test, which installs it")
        }

        static func open(_ page: WebDriver, _ api: FakeRecorderAPI) async throws {
            try await page.navigate("\(api.base)/history")
            try await waitLive(page)
        }

        static func waitLive(_ page: WebDriver) async throws {
            try await page.waitFor("the page to be live with the recorder's figures") {
                let link = try await page.texts("#link"), rows = try await page.findAll("#daily tbody tr")
                return link == ["Live"] && !rows.isEmpty
            }
        }

        struct Series: Equatable, CustomStringConvertible {
            var label: String
            var data: [Double?]
            var description: String { "\(label): \(data.map { $0.map { "\($0)" } ?? "null" })" }
        }

        static func chartType(_ page: WebDriver, _ canvas: String) async throws -> WebDriver.JSON {
            try await page.execute("const chart = Chart.getChart(document.getElementById(arguments[0])); return chart ? chart.config.type : null", [.string(canvas)])
        }

        /// The chart's datasets as Chart.js holds them: `Chart.getChart(canvas).data.datasets`.
        static func datasets(_ page: WebDriver, _ canvas: String) async throws -> [Series] {
            let found = try await page.execute(
                """
                const chart = typeof Chart === 'function' ? Chart.getChart(document.getElementById(arguments[0])) : null;
                return chart ? chart.data.datasets.map((set) => [set.label, Array.from(set.data)]) : [];
                """, [.string(canvas)])
            return (found.array ?? []).map { pair in
                let parts = pair.array ?? []
                return Series(label: parts.first?.string ?? "?", data: (parts.last?.array ?? []).map(\.number))
            }
        }

        static func labels(_ page: WebDriver, _ canvas: String) async throws -> [String] {
            let found = try await page.execute(
                "const chart = Chart.getChart(document.getElementById(arguments[0])); return chart ? chart.data.labels.map(String) : []", [.string(canvas)])
            return (found.array ?? []).compactMap(\.string)
        }

        /// `count` hours of zero but for `games`, by the hour's index.
        static func hours(_ count: Int, _ games: [Int: Double]) -> [Double?] {
            (0..<count).map { games[$0] ?? 0 }
        }

        static func rows(_ page: WebDriver, _ table: String) async throws -> [[String]] {
            let found = try await page.execute(
                "return Array.from(document.querySelectorAll(arguments[0] + ' tbody tr'), (row) => Array.from(row.cells, (cell) => cell.textContent))",
                [.string(table)])
            return (found.array ?? []).map { ($0.array ?? []).compactMap(\.string) }
        }

        static func options(_ page: WebDriver, _ select: String) async throws -> [String] {
            let found = try await page.execute(
                "return Array.from(document.getElementById(arguments[0]).options, (option) => option.value)", [.string(select)])
            return (found.array ?? []).compactMap(\.string)
        }

        /// The recorder's four answers, as docs/RECORDER.md shapes them: two
        /// sites, arcade-1's second machine named with markup.
        static func figures(dailyM1Today: (games: Int, wins: Int) = (10, 5)) -> FakeRecorderAPI.Figures {
            let today = dailyM1Today
            let hourly: [String: Any] = [
                "since": "2026-11-24T08:00:00.000Z",
                "hours": [
                    ["hour": "2026-11-24T08:00:00.000Z", "site": "arcade-1", "games": 12, "wins": 3],
                    ["hour": "2026-11-24T08:00:00.000Z", "site": "arcade-2", "games": 4, "wins": 1],
                    ["hour": "2026-11-24T10:00:00.000Z", "site": "arcade-1", "games": 7, "wins": 2],
                    ["hour": "2026-11-25T07:00:00.000Z", "site": "arcade-2", "games": 9, "wins": 0],
                ],
            ]
            let daily: [String: Any] = [
                "since": "2026-11-19T00:00:00.000Z",
                "days": [
                    day("2026-11-23", "arcade-2", "m1", games: 0, wins: 0, noResult: 0),
                    day("2026-11-24", "arcade-1", image, games: 8, wins: 2, noResult: 0),
                    day("2026-11-24", "arcade-1", "m1", games: 40, wins: 9, noResult: 1),
                    day("2026-11-25", "arcade-1", "m1", games: today.games, wins: today.wins, noResult: 0),
                    day("2026-11-25", "arcade-2", "m1", games: 3, wins: 0, noResult: 0),
                ],
            ]
            let games: [String: Any] = [
                "games": [
                    game("arcade-2", "g-3", "m1", player: "bo", nick: "Bo", outcome: "lost", at: "07:10", commands: 4),
                    game("arcade-1", "g-2", image, player: "eve", nick: script, outcome: "won", at: "07:05", commands: 9),
                    game("arcade-1", "g-1", "m1", player: "alice", nick: "alice", outcome: "no_result", at: "07:00", commands: 0),
                ]
            ]
            // Sorted by site, then machine, as the recorder sorts them; arcade-2's m1 ended games but none won or lost,
            // and its recorder keeps no wallets.
            let machines: [[String: Any]] = [
                [
                    "site": "arcade-1", "machine": image, "games": 40, "wins": 6, "strong_games": 3, "strong_wins": 3, "win_rate": 0.15,
                    "credits_taken": 80, "prize_cost": 24, "payout": 0.3,
                ],
                [
                    "site": "arcade-2", "machine": "m1", "games": 0, "wins": 0, "strong_games": 0, "strong_wins": 0, "win_rate": NSNull(),
                    "credits_taken": NSNull(), "prize_cost": 0, "payout": NSNull(),
                ],
            ]
            let fairness: [String: Any] = ["since": "2026-11-19T00:00:00.000Z", "machines": machines]
            return FakeRecorderAPI.Figures(hourly: hourly, daily: daily, games: games, fairness: fairness)
        }

        static func day(_ day: String, _ site: String, _ machine: String, games: Int, wins: Int, noResult: Int) -> [String: Any] {
            [
                "day": day, "site": site, "machine": machine, "games": games, "wins": wins,
                "win_rate": games == 0 ? NSNull() as Any : Double(wins) / Double(games) as Any, "no_result": noResult,
            ]
        }

        static func game(
            _ site: String, _ id: String, _ machine: String, player: String, nick: String, outcome: String, at time: String, commands: Int
        ) -> [String: Any] {
            [
                "site": site, "id": id, "machine": machine, "player": player, "provider": "generic", "nick": nick, "outcome": outcome,
                "offered_at": "2026-11-25T\(time):00.000Z", "started_at": "2026-11-25T\(time):02.000Z", "ended_at": "2026-11-25T\(time):30.000Z",
                "commands": commands,
            ]
        }
    }
}

/// The recorder's `GET /v1/report/hourly`, `/v1/report/daily`,
/// `/v1/report/fairness` and `/v1/games` answering what the test sets, beside
/// the history page, on a free loopback port: 401 without
/// `Authorization: Bearer <readToken>` when a token is set, as the recorder
/// answers. It keeps the last query of each route and counts
/// the reads, for the test to see what the page asked.
final class FakeRecorderAPI: Sendable {
    /// JSON objects as JSONSerialization takes them.
    struct Figures {
        var hourly: [String: Any]
        var daily: [String: Any]
        var games: [String: Any]
        var fairness: [String: Any]
    }

    let port: Int
    var base: String { "http://127.0.0.1:\(port)" }
    private let bodies: Mutex<[String: [UInt8]]>
    private let queries = Mutex<[String: [String: String]]>([:])
    private let counts = Mutex<[String: Int]>([:])
    private let refusals = Mutex(0)

    private init(port: Int, figures: Figures) throws {
        self.port = port
        bodies = Mutex(try Self.encode(figures))
    }

    /// What the four routes answer from now on.
    func set(_ figures: Figures) {
        guard let encoded = try? Self.encode(figures) else {
            Issue.record("figures that are not JSON")
            return
        }
        bodies.withLock { $0 = encoded }
    }

    /// The last query the page sent to `path`, parameter by parameter.
    func query(_ path: String) -> [String: String]? { queries.withLock { $0[path] } }

    /// How often `path` was read with the token.
    func loads(_ path: String) -> Int { counts.withLock { $0[path] ?? 0 } }

    /// Requests refused for a missing or wrong token.
    var refused: Int { refusals.withLock { $0 } }

    private static func encode(_ figures: Figures) throws -> [String: [UInt8]] {
        [
            "/v1/report/hourly": Array(try JSONSerialization.data(withJSONObject: figures.hourly)),
            "/v1/report/daily": Array(try JSONSerialization.data(withJSONObject: figures.daily)),
            "/v1/games": Array(try JSONSerialization.data(withJSONObject: figures.games)),
            "/v1/report/fairness": Array(try JSONSerialization.data(withJSONObject: figures.fairness)),
        ]
    }

    /// Serves the page and the figures until `body` returns or throws.
    static func with(
        _ figures: Figures, readToken: String? = nil, chartJSPath: String = "/usr/share/javascript/chart.js/chart.min.js",
        _ body: (FakeRecorderAPI) async throws -> Void
    ) async throws {
        let api = try FakeRecorderAPI(port: try FreePort.next(), figures: figures)
        let router = Router()
        HistoryDashboardRoutes<BasicRequestContext>(chartJSPath: chartJSPath).add(page: router.group())
        for path in ["/v1/report/hourly", "/v1/report/daily", "/v1/report/fairness", "/v1/games"] {
            router.get(RouterPath(path)) { request, _ -> Response in
                if let readToken, request.headers[.authorization] != "Bearer \(readToken)" {
                    api.refusals.withLock { $0 += 1 }
                    return Response(
                        status: .unauthorized, headers: [.contentType: "application/json"],
                        body: ResponseBody(byteBuffer: ByteBuffer(string: #"{"code":"unauthorized","message":"This route needs the read token."}"#)))
                }
                var query: [String: String] = [:]
                for (key, value) in request.uri.queryParameters { query[String(key)] = String(value) }
                api.queries.withLock { $0[path] = query }
                api.counts.withLock { $0[path, default: 0] += 1 }
                let bytes = api.bodies.withLock { $0[path] ?? [] }
                return Response(status: .ok, headers: [.contentType: "application/json"], body: ResponseBody(byteBuffer: ByteBuffer(bytes: bytes)))
            }
        }
        try await servingPage(router, port: api.port, label: "history-page", "the history page to be served") { try await body(api) }
    }
}
