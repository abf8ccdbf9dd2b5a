import Hummingbird
import Logging
import ServiceLifecycle
import Testing

/// A page served from the binary behind a stand-in of its API, on 127.0.0.1:`port`,
/// until `body` returns or throws; then the server is stopped and waited for.
func servingPage(
    _ router: Router<BasicRequestContext>, port: Int, label: String, _ what: String, _ body: () async throws -> Void
) async throws {
    let app = Application(
        router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: port)),
        logger: Logger(label: label))
    let group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [app], logger: Logger(label: label)))
    let server = Task { try await group.run() }
    do {
        try await eventually(what) { await HTTP.reachable(port: port) }
        try await body()
    } catch {
        await group.triggerGracefulShutdown()
        _ = try? await server.value
        throw error
    }
    await group.triggerGracefulShutdown()
    _ = try? await server.value
}

extension WebDriver {
    /// The read token's prompt (Live/Shared/read-token.js), the same on every page:
    /// it asks once, refuses and forgets a wrong token while `nothingShown` holds,
    /// then takes `token`, `live` waits for the page's data, and the prompt is
    /// gone with the token kept in the tab.
    func passReadTokenPrompt(
        server: String, setting: String, token: String,
        nothingShown: () async throws -> Bool, live: () async throws -> Void
    ) async throws {
        try await waitFor("the page to ask for the token") {
            try await execute("return document.getElementById('login').hidden") == .bool(false)
        }
        #expect(try await texts("#link") == ["Token needed"])
        #expect(try await texts("#login-status") == ["This \(server) needs its read token (\(setting)) or the admin token."])
        #expect(try await nothingShown(), "nothing without the token")

        // A wrong token: refused, forgotten, nothing shown.
        let input = try await find("#read-token")
        try await sendKeys("wrong-token-0123456789", to: input)
        try await click(try await find("#login-submit"))
        try await waitFor("the refusal") {
            try await texts("#login-status.error") == ["The token was refused (401): check \(setting)."]
        }
        #expect(try await nothingShown())
        #expect(try await execute("return sessionStorage.getItem('claw-read-token')") == .null)

        // The right one.
        try await clear(input)
        try await sendKeys(token, to: input)
        try await click(try await find("#login-submit"))
        try await live()
        #expect(try await execute("return document.getElementById('login').hidden") == .bool(true))
        #expect(try await execute("return sessionStorage.getItem('claw-read-token')") == .string(token))
    }
}
