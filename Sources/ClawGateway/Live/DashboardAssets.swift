/// The dashboard's three files (Live/Dashboard/), compiled into the binary
/// by SwiftPM (`.embedInCode`): the page works on an arcade network with no
/// internet and nothing to install beside the gateway.
enum DashboardAssets {
    static let html = PageAsset.document(
        title: "claw-gateway", folder: "/dashboard", scripts: ["read-token.js", "app.js"], body: PackageResources.dashboard_html)
    static let script = String(decoding: PackageResources.dashboard_js, as: UTF8.self)
    static let style = String(decoding: PackageResources.dashboard_css, as: UTF8.self)
}
