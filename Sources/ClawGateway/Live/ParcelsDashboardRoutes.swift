import Hummingbird

/// The parcels page (SPEC §15): `GET /parcels` and its files, the parcels
/// to ship with their address and a form for the carrier and tracking
/// number, read and changed by the page itself through `/v1/parcels` with
/// the admin token. Served by a site that keeps its prizes, and in a chain by
/// the recorder, which ships centrally. The page's bytes are the same in
/// every installation and hold nothing of the arcade: a `Host` check is all
/// its route needs (the data is behind the admin token).
struct ParcelsDashboardRoutes<Context: RequestContext>: Sendable {
    func add(page: RouterGroup<Context>) {
        page.get("/parcels") { _, _ in
            PageAsset.html(String(decoding: PackageResources.parcels_html, as: UTF8.self))
        }
        page.get("/parcels/read-token.js") { _, _ in
            PageAsset.readToken()
        }
        page.get("/parcels/parcels.js") { _, _ in
            PageAsset.script(String(decoding: PackageResources.parcels_js, as: UTF8.self))
        }
        page.get("/parcels/app.css") { _, _ in
            PageAsset.style(DashboardAssets.style)
        }
        page.get("/parcels/parcels.css") { _, _ in
            PageAsset.style(String(decoding: PackageResources.parcels_css, as: UTF8.self))
        }
    }
}
