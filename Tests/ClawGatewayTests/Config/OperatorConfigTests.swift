import Foundation
import Testing

@testable import ClawGateway

/// `operators:` (SPEC §16): named operators beside the two tokens.
@Suite("gateway.yaml: operators")
struct OperatorConfigTests {
    static let base = ConfigLoaderTests.minimal + "\nhttp: { admin_token: admin-token-0123456, read_token: read-token-01234567 }\n"

    private func problems(_ yaml: String) -> [String] {
        do {
            _ = try ConfigLoader.parse(yaml, file: "test.yaml", baseDirectory: "/tmp", environment: ["CAROL": "carol-token-0123456789"])
            return []
        } catch {
            return error.problems.map(\.description)
        }
    }

    @Test func operatorsAreReadWithTheTwoTokensAsAdminAndRead() throws {
        let config = try ConfigLoader.parse(
            Self.base + """
                operators:
                  - { name: carol, token: "${CAROL}", role: admin }
                  - { name: dan.night-shift, token: dan-token-0123456789, role: read }
                """, file: "test.yaml", baseDirectory: "/tmp", environment: ["CAROL": "carol-token-0123456789"])
        let credentials = config.http.credentials.map { "\($0.name):\($0.role.rawValue)" }
        #expect(credentials == ["carol:admin", "dan.night-shift:read", "admin:admin", "read:read"])
        #expect(config.http.hasAdmin && config.http.readsClosed)
    }

    @Test func aReadOperatorAloneClosesTheReadsAndAnAdminOperatorAloneOpensTheAdminRoutes() throws {
        let config = try ConfigLoader.parse(
            ConfigLoaderTests.minimal + """

                operators:
                  - { name: carol, token: carol-token-0123456789, role: admin }
                  - { name: dan, token: dan-token-0123456789, role: read }
                credits: { topup_secret: top-up-secret-0123456789 }
                """, file: "test.yaml", baseDirectory: "/tmp", environment: [:])
        #expect(config.http.adminToken == nil && config.http.readToken == nil)
        #expect(config.http.hasAdmin && config.http.readsClosed, "credits take a read operator for the read token")
    }

    @Test(arguments: [
        ("  - { name: admin, token: other-token-0123456789, role: admin }", "operators[0].name: \"admin\" is taken by http.admin_token"),
        ("  - { name: carol, token: admin-token-0123456, role: read }", "operators[0].token: is the same token as http.admin_token"),
        ("  - { name: carol, token: short, role: admin }", "operators[0].token: is 5 bytes long"),
        ("  - { name: carol, role: admin }", "operators[0].token: is required"),
        ("  - { token: carol-token-0123456789, role: admin }", "operators[0].name: is required"),
        ("  - { name: carol, token: carol-token-0123456789 }", "operators[0].role: is required"),
        ("  - { name: carol, token: carol-token-0123456789, role: boss }", "operators[0].role: must be one of read, admin"),
        ("  - { name: system, token: carol-token-0123456789, role: admin }", "operators[0].name: \"system\""),
        ("  - { name: \"carol smith\", token: carol-token-0123456789, role: admin }", "operators[0].name: \"carol smith\" is not a name"),
        ("  - { name: carol, token: carol-token-0123456789, role: admin, colour: red }", "operators[0].colour: unknown key"),
        (
            "  - { name: carol, token: carol-token-0123456789, role: admin }\n  - { name: carol, token: carol-token-9876543210, role: read }",
            "operators[1].name: \"carol\" is taken by operators[0].name"
        ),
        (
            "  - { name: carol, token: carol-token-0123456789, role: admin }\n  - { name: dan, token: carol-token-0123456789, role: read }",
            "operators[1].token: is the same token as operators[0].token"
        ),
        ("  - { name: carol, token: \"${NOBODY}\", role: admin }", "NOBODY"),
    ])
    func aBadOperatorIsAConfigErrorNamingItsPath(_ entry: String, _ expected: String) {
        let found = problems(Self.base + "operators:\n" + entry + "\n")
        #expect(found.contains { $0.contains(expected) }, "\(found)")
    }
}
