import Foundation
import Testing

@testable import ClawGateway

@Suite("gateway.yaml: chain")
struct ChainSettingsTests {
    static let base = """
        gateway: { id: arcade-7 }
        mqtt: { url: "mqtt://127.0.0.1:1883" }
        machines:
          - id: m1

        """

    private func parse(_ chain: String, environment: [String: String] = [:]) throws(ConfigError) -> GatewayConfig {
        try ConfigLoader.parse(Self.base + chain, file: "test.yaml", baseDirectory: "/tmp", environment: environment)
    }

    private func problems(_ chain: String, environment: [String: String] = [:]) -> [String] {
        do {
            _ = try parse(chain, environment: environment)
            return []
        } catch {
            return error.problems.map(\.description)
        }
    }

    @Test func noChainSectionMeansNoChain() throws {
        #expect(try parse("").chain == nil)
    }

    @Test func aFullSectionWithTheDocumentedDefaults() throws {
        let config = try parse(
            """
            chain:
              site: arcade-7
              bus: [mqtts://chain-1.example.com:8883, mqtts://chain-2.example.com, "mqtts://[::1]:9883"]
              username: site-arcade-7
              password: ${CHAIN_PASSWORD}
            """, environment: ["CHAIN_PASSWORD": "s3cret"])
        let chain = try #require(config.chain)
        #expect(chain.site == "arcade-7")
        #expect(chain.clientID == "claw-site-arcade-7")
        #expect(
            chain.bus == [
                BrokerURL(host: "chain-1.example.com", port: 8883, usesTLS: true),
                BrokerURL(host: "chain-2.example.com", port: 8883, usesTLS: true), BrokerURL(host: "::1", port: 9883, usesTLS: true),
            ])
        #expect(chain.username == "site-arcade-7" && chain.password == "s3cret")
        #expect(chain.inboxMaxAge == .seconds(2) && chain.resendInterval == .seconds(10))
        #expect(chain.tls == TLSSettings())
        let plain = try #require(try parse("chain: { site: a1, bus: [mqtt://n1:1883], inbox_max_age: 500ms, resend_interval: 3s }").chain)
        #expect(plain.tls == nil && plain.inboxMaxAge == .milliseconds(500) && plain.resendInterval == .seconds(3))
    }

    @Test(arguments: ["Arcade-7", "arcade_7", "arcade.7", "-arcade", "arcade-", "arcade 7", "arcade/7", "+", "#", "ärcade", String(repeating: "a", count: 64)])
    func aSiteNameThatIsNotLowercaseLettersDigitsAndDashIsRefused(site: String) {
        let found = problems("chain: { site: \"\(site)\", bus: [mqtt://n1] }")
        #expect(found.count == 1 && found[0].hasPrefix("chain.site:"), "\(found)")
    }

    @Test func everyProblemNamesItsKey() {
        #expect(problems("chain: { bus: [mqtt://n1] }") == ["chain.site: is required"])
        #expect(problems("chain: { site: a }") == ["chain.bus: is required"])
        #expect(problems("chain: { site: a, bus: [] }").first?.hasPrefix("chain.bus: must list at least one node") == true)
        #expect(problems("chain: { site: a, bus: mqtt://n1 }") == ["chain.bus: must be a list"])
        #expect(problems("chain: { site: a, bus: [http://n1] }").first?.hasPrefix("chain.bus[0]: scheme \"http\"") == true)
        #expect(problems("chain: { site: a, bus: [mqtt://n1, \"mqtt://\"] }").first?.hasPrefix("chain.bus[1]:") == true)
        #expect(problems("chain: { site: a, bus: [mqtt://n1, mqtts://n2] }").first?.hasPrefix("chain.bus: mixes") == true)
        #expect(problems("chain: { site: a, bus: [mqtt://n1], inbox_max_age: 2 }").first?.hasPrefix("chain.inbox_max_age:") == true)
        #expect(problems("chain: { site: a, bus: [mqtt://n1], resend_interval: 10ms }").first?.hasPrefix("chain.resend_interval: must be at least") == true)
        #expect(problems("chain: { site: a, bus: [mqtt://n1], password: \"${NOPE}\" }") == ["chain.password: environment variable NOPE is not set"])
        #expect(problems("chain: { site: a, bus: [mqtt://n1], sites: b }").first?.hasPrefix("chain.sites: unknown key (did you mean site?)") == true)
        #expect(problems("chain: [a]").first?.hasPrefix("chain: must be a mapping") == true)
    }
}
