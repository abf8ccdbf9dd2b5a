import Foundation
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// Prizes on the operators' pages (SPEC §15) in a real browser: each
    /// machine's card shows its prize and stock (low and out marked) with a
    /// restock form; the parcels page ships and delivers what players asked
    /// for. Against a whole site (mosquitto, `claw-gateway run`, the
    /// simulated PCs, every grab won).
    @Suite(.serialized) struct PrizesBrowserTests {
        static let token = "prizes-browser-token-0123"

        @Test func theCardsShowStockAndRestockAndTheParcelsPageShips() async throws {
            let site = try await E2ESite(
                game: DashboardBrowserTests.game, adminToken: Self.token, extra: "prizes: { low_at: 1 }",
                machineExtra: #"prize: { id: plush, name: "Plush 20 cm" }"#)
            do {
                try await run(site)
            } catch {
                await site.stop()
                throw error
            }
            await site.stop()
        }

        private func run(_ site: E2ESite) async throws {
            let admin = [("Authorization", "Bearer \(Self.token)"), ("Content-Type", "application/json")]
            let set = try await HTTP.request(
                .POST, "\(site.base)/v1/machines/m1/stock", headers: admin, body: Array(#"{"set":2,"reason":"opening"}"#.utf8))
            #expect(set.status == 200, "\(set.body)")
            let card = DashboardBrowserTests.card
            try await WebDriver.with { page in
                try await DashboardBrowserTests.open(page, site)
                try await page.waitFor("m1's prize and stock") {
                    try await page.texts("\(card("m1")) p.stock") == ["Prize Plush 20 cm · stock 2"]
                }
                #expect(try await page.texts("\(card("m2")) p.stock") == ["Prize Plush 20 cm · stock not counted"])

                // A win takes one: low at 1, marked.
                try await DashboardBrowserTests.playAGame(site, "ann", nick: "Ann", on: "m1")
                try await page.waitFor("m1's stock low") {
                    try await page.texts("\(card("m1")) .stock-level.stock-low") == ["stock 1 (low)"]
                }

                // The restock form: off until the admin token is typed, then set to 0: out of stock, marked.
                #expect(try await page.execute("return document.querySelector('button[data-restock=\"m1\"]').disabled") == .bool(true))
                try await page.sendKeys(Self.token, to: try await page.find("#admin-token"))
                try await page.waitFor("the restock button on") {
                    try await page.execute("return document.querySelector('button[data-restock=\"m1\"]').disabled") == .bool(false)
                }
                try await page.execute(
                    "const form = document.querySelector('form.restock[data-machine=\"m1\"]'); form.querySelector('.restock-how').value = 'set'")
                try await page.sendKeys("0", to: try await page.find(#"form.restock[data-machine="m1"] .restock-count"#))
                try await page.sendKeys("glass broken", to: try await page.find(#"form.restock[data-machine="m1"] .restock-reason"#))
                try await DashboardBrowserTests.press(page, #"button[data-restock="m1"]"#)
                try await page.waitFor("m1 out of stock") {
                    let level = try await page.texts("\(card("m1")) .stock-level.stock-out")
                    let badges = try await DashboardBrowserTests.badges(page, "m1")
                    let state = try await page.execute("return document.querySelector(arguments[0]).dataset.state", [.string(card("m1"))])
                    return level == ["stock 0 (out)"] && badges.contains("Out of stock") && state == .string("out_of_stock")
                }
                try await page.waitFor("the restock confirmed") { try await page.texts("#admin-status.ok") == ["Done: the stock of m1 is 0"] }
                let reason = try await HTTP.get("\(site.base)/v1/machines/m1")
                #expect(reason.json["state"] as? String == "out_of_stock")
                #expect(try await page.execute("return document.getElementById('parcels-link').hidden") == .bool(false))

                // Ann asks for her prize; the parcels page ships it and marks it delivered.
                let prize = try #require(
                    (try await HTTP.get("\(site.base)/v1/players/generic/ann/prizes").json["prizes"] as? [[String: Any]])?.first?["id"] as? String)
                let asked = try await HTTP.request(
                    .POST, "\(site.base)/v1/players/generic/ann/prizes/ship", headers: admin,
                    body: Array(#"{"prizes":["\#(prize)"],"address":{"name":"Ann <b>Lee</b>","phone":"555 0100","address":"3 Claw Street"}}"#.utf8))
                let parcel = try #require(asked.json["id"] as? String, "\(asked.body)")
                try await page.navigate("\(site.base)/parcels")
                let item = #"li.parcel[data-parcel="\#(parcel)"]"#
                try await page.waitFor("the parcel to ship, with its address") {
                    try await page.texts("#to-ship \(item) .parcel-address").first?.contains("3 Claw Street") == true
                }
                #expect(try await page.texts("#to-ship \(item) .parcel-address strong") == ["Ann <b>Lee</b>"], "shown as typed, not as markup")
                #expect(try await page.texts("#to-ship \(item) .parcel-prizes") == ["Prizes: \(prize)"])
                try await page.sendKeys("SF Express", to: try await page.find("#to-ship \(item) input.carrier"))
                try await page.sendKeys("SF1234567890", to: try await page.find("#to-ship \(item) input.tracking"))
                try await DashboardBrowserTests.press(page, "#to-ship \(item) button")
                try await page.waitFor("the parcel on its way") {
                    try await page.texts("#shipped \(item) p.meta") == ["Shipped with SF Express, tracking SF1234567890"]
                }
                #expect(try await page.findAll("#to-ship \(item)").isEmpty)
                try await DashboardBrowserTests.press(page, "#shipped \(item) button.delivered")
                try await page.waitFor("the parcel delivered") { try await page.findAll(item).isEmpty }
                let delivered = try await HTTP.request(.GET, "\(site.base)/v1/parcels?state=delivered", headers: admin)
                #expect((delivered.json["parcels"] as? [[String: Any]])?.first?["tracking"] as? String == "SF1234567890", "\(delivered.body)")
                #expect(try await page.execute("return document.querySelectorAll('main b').length") == .number(0))
            }
        }
    }
}
