import Hummingbird

/// An operator's page of its own, at `/<name>` with its files under it:
/// the page, its script and style, the dashboards' shared style and the
/// read-token helper. Its bytes are the same in every installation and hold
/// nothing of the arcade: a `Host` check is all its routes need (what the page
/// reads is behind the admin token).
///
/// - The parcels page (SPEC §15): the parcels to ship with their address
///   and a form for the carrier and tracking number, through `/v1/parcels`.
///   Served by a site that keeps its prizes, and in a chain by the recorder,
///   which ships centrally.
/// - The audit page (SPEC §16): the audit trail as a table (time, operator,
///   action, target, reason, address, before → after) with filters and
///   pages, through `/v1/audit`. Served wherever the admin routes are.
struct OperatorPageRoutes<Context: RequestContext>: Sendable {
    let name: String
    let title: String
    let body: [UInt8]
    let script: [UInt8]
    let style: [UInt8]

    static var parcels: Self {
        Self(
            name: "parcels", title: "claw-gateway · parcels", body: PackageResources.parcels_html, script: PackageResources.parcels_js,
            style: PackageResources.parcels_css)
    }

    static var audit: Self {
        Self(
            name: "audit", title: "claw-gateway · audit trail", body: PackageResources.audit_html, script: PackageResources.audit_js,
            style: PackageResources.audit_css)
    }

    func add(page: RouterGroup<Context>) {
        let html = PageAsset.document(title: title, folder: "/\(name)", styles: ["\(name).css"], scripts: ["read-token.js", "\(name).js"], body: body)
        let (script, style) = (String(decoding: script, as: UTF8.self), String(decoding: style, as: UTF8.self))
        page.get(RouterPath("/\(name)")) { _, _ in PageAsset.html(html) }
        page.get(RouterPath("/\(name)/read-token.js")) { _, _ in PageAsset.readToken() }
        page.get(RouterPath("/\(name)/\(name).js")) { _, _ in PageAsset.script(script) }
        page.get(RouterPath("/\(name)/app.css")) { _, _ in PageAsset.style(DashboardAssets.style) }
        page.get(RouterPath("/\(name)/\(name).css")) { _, _ in PageAsset.style(style) }
    }
}
