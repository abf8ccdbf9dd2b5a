import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The chain's history page, served by `claw-gateway record` (SPEC §10):
/// `GET /history` and its files. Games per hour, the win rate of each
/// machine per day, the daily report, each machine's odds (SPEC §16) and the
/// latest games, read by the page itself from the recorder's
/// `/v1/report/hourly`, `/v1/report/daily`, `/v1/report/fairness` and
/// `/v1/games` every 30 s, with the read token when the recorder asks for one.
///
/// The charts are drawn by Chart.js, from Debian's `libjs-chart.js` (the
/// .deb depends on it): the file is read once, here, and served as
/// `/history/chart.js` from this origin, so the page's Content-Security-Policy
/// stays the chain dashboard's (script, style and requests to this origin
/// only) and nothing is fetched from the internet. Without the file the route
/// answers 503 saying what to install, and the page says the same in place
/// of its charts; its tables still work.
struct HistoryDashboardRoutes<Context: RequestContext>: Sendable {
    /// Chart.js's bytes, or nil when the file could not be read at start.
    private let chartJS: ByteBuffer?
    private let chartJSPath: String

    /// - Parameter chartJSPath: Chart.js's UMD build (it defines `window.Chart`),
    ///   where Debian's `libjs-chart.js` puts it.
    init(chartJSPath: String = "/usr/share/javascript/chart.js/chart.min.js") {
        self.chartJSPath = chartJSPath
        chartJS = FileManager.default.contents(atPath: chartJSPath).map { ByteBuffer(bytes: $0) }
    }

    /// Whether Chart.js was found: the charts can be drawn.
    var hasCharts: Bool { chartJS != nil }

    /// - Parameter page: where the page and its files go: the same bytes in
    ///   every installation, nothing of the chain (the data is behind the
    ///   read token), so a `Host` check is all it needs.
    func add(page: RouterGroup<Context>) {
        page.get("/history") { _, _ in
            PageAsset.html(HistoryDashboardAssets.html)
        }
        page.get("/history/read-token.js") { _, _ in
            PageAsset.readToken()
        }
        page.get("/history/history.js") { _, _ in
            PageAsset.script(HistoryDashboardAssets.script)
        }
        page.get("/history/app.css") { _, _ in
            PageAsset.style(DashboardAssets.style)
        }
        page.get("/history/history.css") { _, _ in
            PageAsset.style(HistoryDashboardAssets.style)
        }
        page.get("/history/chart.js") { [chartJS, chartJSPath] _, _ in
            guard let chartJS else {
                var response = JSONResponse.make(
                    .serviceUnavailable,
                    [
                        "code": "charts_unavailable",
                        "message": "The charts need Chart.js from Debian's libjs-chart.js, and \(chartJSPath) is missing: "
                            + "install it (apt-get install libjs-chart.js) and restart the recorder.",
                    ])
                response.headers[.cacheControl] = "no-store"
                return response
            }
            return PageAsset.response(chartJS, type: "text/javascript; charset=utf-8")
        }
    }
}

/// The history page's own files (Live/HistoryDashboard/), compiled into the
/// binary by SwiftPM (`.embedInCode`), like ``DashboardAssets``.
enum HistoryDashboardAssets {
    static let html = PageAsset.document(
        title: "claw-gateway chain history", folder: "/history", styles: ["history.css"],
        scripts: ["chart.js", "read-token.js", "history.js"], body: PackageResources.history_html)
    static let script = String(decoding: PackageResources.history_js, as: UTF8.self)
    static let style = String(decoding: PackageResources.history_css, as: UTF8.self)
}
