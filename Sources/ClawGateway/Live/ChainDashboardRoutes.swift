import HTTPTypes
import Hummingbird
import NIOCore

/// The chain's page, served by `claw-gateway route` (SPEC §9): `GET /dashboard`
/// and its files. Every site of the chain and its machines, read by the page
/// itself from the router's `GET /v1/sites` once a second, with the read token
/// when the router asks for one.
///
/// The page is compiled into the binary like the site's own (``DashboardAssets``)
/// and takes its base look from the site page's style: the chain's style only
/// adds what a page of several sites needs. The same Content-Security-Policy
/// as the site's page: script, style and requests to this origin only.
struct ChainDashboardRoutes<Context: RequestContext>: Sendable {
    init() {}

    /// - Parameter page: where the page and its files go: the same bytes in
    ///   every installation, nothing of the chain (the data is `/v1/sites`,
    ///   behind the read token), so a `Host` check is all it needs.
    func add(page: RouterGroup<Context>) {
        page.get("/dashboard") { _, _ in
            PageAsset.html(ChainDashboardAssets.html)
        }
        page.get("/dashboard/read-token.js") { _, _ in
            PageAsset.readToken()
        }
        page.get("/dashboard/chain.js") { _, _ in
            PageAsset.script(ChainDashboardAssets.script)
        }
        page.get("/dashboard/app.css") { _, _ in
            PageAsset.style(DashboardAssets.style)
        }
        page.get("/dashboard/chain.css") { _, _ in
            PageAsset.style(ChainDashboardAssets.style)
        }
    }
}

/// The chain page's own files (Live/ChainDashboard/), compiled into the binary
/// by SwiftPM (`.embedInCode`), like ``DashboardAssets``.
enum ChainDashboardAssets {
    static let html = PageAsset.document(
        title: "claw-gateway chain", folder: "/dashboard", styles: ["chain.css"], scripts: ["read-token.js", "chain.js"],
        body: PackageResources.chain_html)
    static let script = String(decoding: PackageResources.chain_js, as: UTF8.self)
    static let style = String(decoding: PackageResources.chain_css, as: UTF8.self)
}
