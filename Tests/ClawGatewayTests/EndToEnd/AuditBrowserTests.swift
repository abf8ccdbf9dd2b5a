import Foundation
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// Accountability on the operators' pages (SPEC §16) in a real browser:
    /// the dashboard corrects an ended game's result, with a reason, and shows
    /// the machine's word beside the operator's; the audit page asks for the
    /// admin token and lists the trail, filtered, with the gateway's refusals
    /// in its status line. Against a whole site (mosquitto, `claw-gateway run`,
    /// the simulated PCs, every grab won).
    @Suite(.serialized) struct AuditBrowserTests {
        static let adminToken = "audit-browser-admin-0123"
        static let readToken = "audit-browser-read-01234"
        /// Markup in a reason shows as typed and makes no element.
        static let reason = "replay: <b>dropped</b> before the chute"

        @Test func theDashboardCorrectsAResultAndTheAuditPageListsIt() async throws {
            let site = try await E2ESite(
                game: DashboardBrowserTests.game, adminToken: Self.adminToken, readToken: Self.readToken,
                extra: "prizes: { low_at: 0 }", machineExtra: #"prize: { id: plush, name: "Plush 20 cm" }"#)
            do {
                try await run(site)
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }

        private func run(_ site: E2ESite) async throws {
            // Alice wins a game on m1: the one the page will correct.
            _ = try await PrizesEndToEndTests.win(site, "alice")
            let recorded = try await HTTP.get("\(site.base)/v1/machines/m1/games", bearer: Self.readToken).json["games"] as? [[String: Any]] ?? []
            let game = try #require(recorded.first?["id"] as? String, "\(recorded)")
            #expect(recorded.first?["outcome"] as? String == "won")

            let item = #"\#(DashboardBrowserTests.card("m1")) ol.results li[data-game="\#(game)"]"#
            let toggle = "\(item) button.correct-toggle"
            let form = "\(item) form.correct-form"
            let disabled = "return document.querySelector(arguments[0]).disabled"
            // The chosen outcome while the form is open, else null.
            let chosen = "const form = document.querySelector(arguments[0]); return form && !form.hidden ? form.querySelector('.correct-to').value : null"
            try await WebDriver.with { page in
                try await DashboardBrowserTests.open(page, site)
                #expect(try await page.execute("return document.getElementById('audit-link').hidden") == .bool(false))

                // The won game, with its Correct button: off until the admin token is typed.
                try await page.waitFor("alice's game with its Correct button") {
                    let outcome = try await page.texts("\(item) .outcome"), buttons = try await page.findAll(toggle)
                    return outcome == ["won"] && buttons.count == 1
                }
                #expect(try await page.execute(disabled, [.string(toggle)]) == .bool(true))
                try await page.sendKeys(Self.adminToken, to: try await page.find("#admin-token"))
                try await page.waitFor("the Correct button on") { try await page.execute(disabled, [.string(toggle)]) == .bool(false) }

                // The form offers the opposite of what the game counts as; a reason is required before anything is sent.
                try await DashboardBrowserTests.press(page, toggle)
                try await page.waitFor("the form open, lost chosen") { try await page.execute(chosen, [.string(form)]) == .string("lost") }
                try await DashboardBrowserTests.press(page, "\(item) button.correct-submit")
                try await page.waitFor("the reason asked for beside the form") {
                    try await page.texts("\(item) .correct-error") == ["A reason is needed: the audit trail keeps it."]
                }
                try await page.sendKeys(Self.reason, to: try await page.find("\(item) input.correct-reason"))
                try await DashboardBrowserTests.press(page, "\(item) button.correct-submit")
                try await page.waitFor("the correction beside the machine's word") {
                    let outcome = try await page.texts("\(item) .outcome"), mark = try await page.texts("\(item) .correction")
                    return outcome == ["won"] && mark == ["→ corrected: lost by admin (\(Self.reason))"]
                }
                #expect(try await page.execute("return document.querySelectorAll('main b').length") == .number(0), "the reason shown as typed")
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games", bearer: Self.readToken).json["games"] as? [[String: Any]] ?? []
                let corrected = games.first(where: { $0["id"] as? String == game })?["corrected"] as? [String: Any]
                #expect(corrected?["outcome"] as? String == "lost" && corrected?["by"] as? String == "admin", "\(games)")
                #expect(corrected?["reason"] as? String == Self.reason)

                // Corrected again to what it counts as now: the gateway's refusal (409) beside the form.
                try await DashboardBrowserTests.press(page, toggle)
                try await page.waitFor("the form open again, won chosen now") { try await page.execute(chosen, [.string(form)]) == .string("won") }
                try await page.execute("document.querySelector(arguments[0]).querySelector('.correct-to').value = 'lost'", [.string(form)])
                try await page.sendKeys("again", to: try await page.find("\(item) input.correct-reason"))
                try await DashboardBrowserTests.press(page, "\(item) button.correct-submit")
                try await page.waitFor("the refusal beside the form") {
                    try await page.texts("\(item) .correct-error") == ["Game \(game) already counts as lost; nothing was changed."]
                }
                try await DashboardBrowserTests.press(page, "\(item) button.correct-cancel")
                try await page.waitFor("the form closed") { try await page.execute(chosen, [.string(form)]) == .null }

                // The audit page, in a tab without the admin token: it asks for it, then lists the trail.
                try await page.execute("sessionStorage.removeItem('claw-admin-token')")
                try await page.navigate("\(site.base)/audit")
                try await page.waitFor("the audit page to ask for the admin token") { try await page.texts("#link") == ["Admin token needed"] }
                #expect(try await page.findAll("#entries tbody tr").isEmpty)
                let input = try await page.find("#admin-token")
                try await page.sendKeys(Self.adminToken, to: input)
                try await page.sendKeys("\u{E007}", to: input)
                let correction = #"#entries tbody tr[data-action="correct"]"#
                try await page.waitFor("the correction in the trail, with its reason") {
                    try await page.texts("\(correction) td.reason") == [Self.reason]
                }
                #expect(try await page.texts("#link") == ["Live"])
                #expect(try await page.texts("\(correction) td.operator") == ["admin"])
                #expect(try await page.texts("\(correction) td.target") == ["game/m1/\(game)"])
                #expect(try await page.texts("\(correction) td.address") == ["127.0.0.1"])
                #expect(try await page.texts("\(correction) code.before").first?.contains(#""outcome":"won""#) == true)
                #expect(try await page.texts("\(correction) code.after").first?.contains(#""outcome":"lost""#) == true)
                #expect(try await page.execute("return document.querySelectorAll('main b').length") == .number(0), "the reason shown as typed")

                // A pause over HTTP, then the trail filtered to pauses: only it.
                let pause = try await HTTP.request(
                    .POST, "\(site.base)/v1/machines/m1/pause", headers: [("Authorization", "Bearer \(Self.adminToken)")])
                #expect(pause.status == 200, "\(pause.body)")
                try await page.execute(
                    "const action = document.getElementById('filter-action'); action.value = 'pause'; action.dispatchEvent(new Event('change', { bubbles: true }))")
                try await page.waitFor("only the pause in the trail") {
                    try await page.execute("return Array.from(document.querySelectorAll('#entries tbody tr'), (row) => row.dataset.action)")
                        == .array([.string("pause")])
                }
                #expect(try await page.texts("#entries tbody tr td.target") == ["machine/m1"])
                #expect(try await page.texts("#entries tbody tr code.after").first?.contains(#""paused":true"#) == true)

                // A filter the gateway refuses: its message in the status line, no entries shown.
                let operatorField = try await page.find("#filter-operator")
                try await page.sendKeys(String(repeating: "x", count: 300), to: operatorField)
                try await page.sendKeys("\u{E007}", to: operatorField)
                try await page.waitFor("the refusal in the status line") {
                    let status = try await page.texts("#status.error"), rows = try await page.findAll("#entries tbody tr")
                    return status == ["The trail was not read: operator is longer than 256 bytes."] && rows.isEmpty
                }
            }
        }
    }
}
