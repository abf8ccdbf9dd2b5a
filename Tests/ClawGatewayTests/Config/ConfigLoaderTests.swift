import Foundation
import Protocol
import Testing

@testable import ClawGateway

@Suite("gateway.yaml: parsing and validation")
struct ConfigLoaderTests {
    static let minimal = """
        gateway: { id: arcade-1 }
        mqtt: { url: "mqtt://127.0.0.1:1883" }
        machines:
          - id: m1
        """

    private func parse(_ yaml: String, environment: [String: String] = [:], base: String = "/tmp") throws(ConfigError) -> GatewayConfig {
        try ConfigLoader.parse(yaml, file: "test.yaml", baseDirectory: base, environment: environment)
    }

    private func problems(_ yaml: String, environment: [String: String] = [:]) -> [String] {
        do {
            _ = try parse(yaml, environment: environment)
            return []
        } catch {
            return error.problems.map(\.description)
        }
    }

    @Test("the minimal file gets the documented defaults")
    func defaults() throws {
        let config = try parse(Self.minimal)
        #expect(config.gateway.logLevel == .info)
        #expect(config.mqtt.clientID == "claw-gateway-arcade-1")
        #expect(config.mqtt.url == BrokerURL(host: "127.0.0.1", port: 1883, usesTLS: false))
        #expect(config.mqtt.keepalive == 30)
        #expect(config.mqtt.topicPrefix == "claw")
        #expect(config.http.host == "127.0.0.1" && config.http.port == 8080)
        #expect(config.http.adminToken == nil && config.http.readToken == nil && config.http.allowedHosts == [])
        #expect(config.im.netease == nil && config.im.generic == nil)
        #expect(config.game == GameSettings())
        #expect(config.game.acceptTimeout == .seconds(10))
        #expect(config.game.playTimeout == .seconds(30))
        #expect(config.game.resultTimeout == .seconds(20))
        #expect(config.game.offlineGrace == .seconds(10))
        #expect(config.game.commandMaxAge == .seconds(2))
        #expect(config.gateway.statsInterval == .seconds(3))
        #expect(config.storage.path == "/tmp/data/gateway.sqlite")
        #expect(config.machines == [MachineConfig(id: "m1", name: "m1", imAccount: "m1", cameras: [], cameraTopic: nil)])
    }

    @Test("0 turns the statistics off and the offline grace to nothing")
    func zeroTurnsOff() throws {
        let config = try parse("gateway: { id: a, stats_interval: 0 }\nmqtt: { url: mqtt://h }\ngame: { offline_grace: 0s }\nmachines: [{id: m1}]")
        #expect(config.gateway.statsInterval == .zero)
        #expect(config.game.offlineGrace == .zero)
    }

    @Test("the repository's gateway.yaml is valid")
    func repositoryConfig() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent()
        let config = try ConfigLoader.load(file: root.appendingPathComponent("gateway.yaml").path, environment: [:])
        #expect(config.machines.map(\.id) == ["m1", "m2"])
        #expect(config.machines.allSatisfy { $0.cameras.count == 2 })
        #expect(config.mqtt.url.host == "127.0.0.1")
    }

    @Test("the full example of SPEC §6 parses, with ${VAR} from the environment")
    func fullExample() throws {
        let folder = try TemporaryDirectory.make(prefix: "cfg")
        for name in ["ca.crt", "gw.crt", "gw.key"] {
            _ = FileManager.default.createFile(atPath: folder.appendingPathComponent(name).path, contents: Data("x".utf8))
        }
        let yaml = """
            gateway:
              id: arcade-1
              log_level: debug
            mqtt:
              url: mqtts://broker.example:8884
              client_id: gw-1
              username: gateway
              password: ${MQTT_PASSWORD}
              keepalive: 45
              topic_prefix: site/claw
              tls: { ca_file: ca.crt, cert_file: gw.crt, key_file: gw.key }
            http:
              listen: 0.0.0.0:9090
              admin_token: ${CLAW_ADMIN_TOKEN}
              read_token: ${CLAW_READ_TOKEN}
              allowed_hosts: [Arcade-7.example.com, "[2001:db8::7]", 192.0.2.7]
            im:
              netease:
                app_key: key-1
                app_secret: ${NIM_APP_SECRET}
                api_base: https://api.netease.im/nimserver
                callback_path: /im/netease
                max_clock_skew: 5m
              generic:
                secret: ${CLAW_WEBHOOK_SECRET}
                outbound_url: http://127.0.0.1:9000/claw
            game:
              accept_timeout: 1.5s
              play_timeout: 2m
              result_timeout: 20s
              ack_timeout: 500ms
              coins_per_game: 2
              max_queue: 50
              max_commands_per_second: 5
              relay_acks: true
            storage:
              path: /var/lib/claw/gateway.sqlite
            machines:
              - id: m1
                name: Pikachu
                im_account: claw_m1
                cameras:
                  - { id: "1", stream: rtmp://live.example.com/live/m1-front }
                  - { id: 2, stream: rtmp://live.example.com/live/m1-side }
                camera_topic: claw/m1/camera-switch
            """
        let environment = ["MQTT_PASSWORD": "pw", "CLAW_ADMIN_TOKEN": "admin-token-of-16b", "CLAW_READ_TOKEN": "read-token-of-16by", "NIM_APP_SECRET": "sec", "CLAW_WEBHOOK_SECRET": "hook"]
        let config = try parse(yaml, environment: environment, base: folder.path)
        #expect(config.mqtt.url == BrokerURL(host: "broker.example", port: 8884, usesTLS: true))
        #expect(config.mqtt.password == "pw")
        #expect(config.mqtt.tls?.caFile == folder.appendingPathComponent("ca.crt").path)
        #expect(config.mqtt.topicPrefix == "site/claw")
        #expect(config.http.adminToken == "admin-token-of-16b")
        #expect(config.http.readToken == "read-token-of-16by")
        #expect(config.http.allowedHosts == ["arcade-7.example.com", "2001:db8::7", "192.0.2.7"])
        #expect(config.http.port == 9090)
        #expect(config.im.netease?.appSecret == "sec")
        #expect(config.im.netease?.maxClockSkew == .seconds(300))
        #expect(config.im.generic?.secret == "hook")
        #expect(config.game.acceptTimeout == .milliseconds(1500))
        #expect(config.game.playTimeout == .seconds(120))
        #expect(config.game.ackTimeout == .milliseconds(500))
        #expect(config.game.relayAcks)
        #expect(config.machines[0].cameraIDs == ["1", "2"])
        #expect(config.machines[0].cameraTopic == "claw/m1/camera-switch")
        #expect(config.storage.path == "/var/lib/claw/gateway.sqlite")
    }

    /// A broken file and one problem it must report, as `path: message` (or a part of it).
    struct Case: CustomTestStringConvertible, Sendable {
        let yaml: String
        let expected: String
        var testDescription: String { expected }
    }

    static let invalid: [Case] = [
        Case(yaml: "mqtt: { url: mqtt://h }\nmachines: [{id: m1}]", expected: "gateway: is required"),
        Case(yaml: "gateway: {}\nmqtt: { url: mqtt://h }\nmachines: [{id: m1}]", expected: "gateway.id: is required"),
        Case(yaml: "gateway: {id: a}\nmachines: [{id: m1}]", expected: "mqtt: is required"),
        Case(yaml: "gateway: {id: a}\nmqtt: {}\nmachines: [{id: m1}]", expected: "mqtt.url: is required"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }", expected: "machines: is required"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: []", expected: "machines: must list at least one machine"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{name: x}]", expected: "machines[0].id: is required"),
        // unknown keys: typos must not pass silently
        Case(yaml: minimal + "\ngame: { acept_timeout: 10s }", expected: "game.acept_timeout: unknown key (did you mean accept_timeout?)"),
        Case(yaml: minimal + "\nmetrics: {}", expected: "metrics: unknown key"),
        Case(yaml: "gateway: { id: a, loglevel: info }\nmqtt: { url: mqtt://h }\nmachines: [{id: m1}]", expected: "gateway.loglevel: unknown key (did you mean log_level?)"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: m1, camera: []}]", expected: "machines[0].camera: unknown key (did you mean cameras?)"),
        // URLs
        Case(yaml: "gateway: {id: a}\nmqtt: { url: http://h:1883 }\nmachines: [{id: m1}]", expected: "mqtt.url: scheme \"http\" is not supported"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: \"tcp://h\" }\nmachines: [{id: m1}]", expected: "mqtt.url: scheme \"tcp\" is not supported"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: \"mqtt://\" }\nmachines: [{id: m1}]", expected: "mqtt.url: \"mqtt://\" has no host"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: \"127.0.0.1:1883\" }\nmachines: [{id: m1}]", expected: "mqtt.url:"),
        Case(yaml: minimal + "\nim: { generic: { secret: s, outbound_url: ftp://x } }", expected: "im.generic.outbound_url: \"ftp://x\" must be an http:// or https:// URL"),
        // durations
        Case(yaml: minimal + "\ngame: { play_timeout: 30 }", expected: "game.play_timeout: \"30\" is not a duration"),
        Case(yaml: minimal + "\ngame: { accept_timeout: 10 s }", expected: "game.accept_timeout: \"10 s\" is not a duration"),
        Case(yaml: minimal + "\ngame: { result_timeout: 5w }", expected: "game.result_timeout: \"5w\" is not a duration"),
        Case(yaml: minimal + "\ngame: { ack_timeout: 0s }", expected: "game.ack_timeout: must be longer than zero"),
        Case(yaml: minimal + "\ngame: { offline_grace: -1s }", expected: "game.offline_grace: \"-1s\" is not a duration"),
        Case(yaml: minimal + "\ngame: { command_max_age: soon }", expected: "game.command_max_age: \"soon\" is not a duration"),
        Case(yaml: "gateway: { id: a, stats_interval: 500ms }\nmqtt: { url: mqtt://h }\nmachines: [{id: m1}]", expected: "gateway.stats_interval: must be at least 1s, or 0 to turn it off"),
        Case(yaml: "gateway: { id: a, stats_interval: often }\nmqtt: { url: mqtt://h }\nmachines: [{id: m1}]", expected: "gateway.stats_interval: \"often\" is not a duration"),
        Case(yaml: minimal + "\nim: { netease: { app_key: k, app_secret: s, max_clock_skew: soon } }", expected: "im.netease.max_clock_skew: \"soon\" is not a duration"),
        // numbers and flags
        Case(yaml: minimal + "\ngame: { max_queue: 0 }", expected: "game.max_queue: must be between 1 and 100000, not 0"),
        Case(yaml: minimal + "\ngame: { coins_per_game: two }", expected: "game.coins_per_game: must be a whole number, not \"two\""),
        Case(yaml: minimal + "\ngame: { relay_acks: maybe }", expected: "game.relay_acks: must be true or false"),
        Case(yaml: "gateway: { id: a, log_level: loud }\nmqtt: { url: mqtt://h }\nmachines: [{id: m1}]", expected: "gateway.log_level: must be one of trace, debug, info, notice, warning, error, critical"),
        Case(yaml: minimal + "\nhttp: { listen: localhost }", expected: "http.listen: \"localhost\" is not host:port"),
        // tokens: 16 bytes at least, named by their key; hosts without port or scheme
        Case(yaml: minimal + "\nhttp: { admin_token: x }", expected: "http.admin_token: is 1 byte long; a token needs 16 at least"),
        Case(yaml: minimal + "\nhttp: { admin_token: 0123456789abcde }", expected: "http.admin_token: is 15 bytes long"),
        Case(yaml: minimal + "\nhttp: { read_token: short-token }", expected: "http.read_token: is 11 bytes long; a token needs 16 at least"),
        Case(yaml: minimal + "\nhttp: { read_token: \"\" }", expected: "http.read_token: must not be empty"),
        Case(yaml: minimal + "\nhttp: { allowed_hosts: arcade.example }", expected: "http.allowed_hosts: must be a list"),
        Case(yaml: minimal + "\nhttp: { allowed_hosts: [\"arcade.example:8080\"] }", expected: "http.allowed_hosts[0]: \"arcade.example:8080\" is not a host name"),
        Case(yaml: minimal + "\nhttp: { allowed_hosts: [a.example, \"https://arcade.example\"] }", expected: "http.allowed_hosts[1]: \"https://arcade.example\" is not a host name"),
        Case(yaml: minimal + "\nhttp: { allowed_hosts: [\"*.example\"] }", expected: "http.allowed_hosts[0]: \"*.example\" is not a host name"),
        Case(yaml: minimal + "\nhttp: { allowed_hosts: [\"\"] }", expected: "http.allowed_hosts[0]: \"\" is not a host name"),
        // machine ids must be topic-safe
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: \"\"}]", expected: "machines[0].id: must not be empty"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: \"a/b\"}]", expected: "machines[0].id: \"a/b\" contains \"/\""),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: \"m+\"}]", expected: "machines[0].id: \"m+\" contains \"+\""),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: \"m#\"}]", expected: "machines[0].id: \"m#\" contains \"#\""),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: \"m\\tx\"}]", expected: "machines[0].id: \"m\\tx\" contains a control character"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: gateway}]", expected: "machines[0].id: \"gateway\" is reserved"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: m1}, {id: m2}, {id: m1}]", expected: "machines[2].id: \"m1\" is already the id of machines[0]"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: m1, im_account: x}, {id: m2, im_account: x}]", expected: "machines[1].im_account: \"x\" is already the im_account of machines[0]"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: m1, im_account: claw_m2}, {id: claw_m2}]", expected: "machines[0].im_account: \"claw_m2\" is the id of machines[1]; an account may not name another machine"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: m1, cameras: [{id: \"1\"}, {id: \"1\"}]}]", expected: "machines[0].cameras[1].id: camera \"1\" is listed twice"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: m1, camera_topic: \"claw/+/cam\"}]", expected: "machines[0].camera_topic: \"claw/+/cam\" contains a wildcard"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h, topic_prefix: \"claw/#\" }\nmachines: [{id: m1}]", expected: "mqtt.topic_prefix: \"claw/#\" contains a wildcard"),
        // TLS
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtts://h, tls: { ca_file: /nonexistent/ca.crt } }\nmachines: [{id: m1}]", expected: "mqtt.tls.ca_file: file /nonexistent/ca.crt does not exist"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtts://h, tls: { cert_file: /etc/hostname } }\nmachines: [{id: m1}]", expected: "mqtt.tls: cert_file and key_file go together"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h, tls: { } }\nmachines: [{id: m1}]", expected: "mqtt.tls: is set but mqtt.url uses mqtt://"),
        // environment
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h, password: \"${NOT_SET_ANYWHERE}\" }\nmachines: [{id: m1}]", expected: "mqtt.password: environment variable NOT_SET_ANYWHERE is not set"),
        Case(yaml: minimal + "\nim: { generic: { secret: \"${}\" } }", expected: "im.generic.secret: \"${}\" is not a variable name"),
        // IM providers
        Case(yaml: minimal + "\nim: { netease: { app_key: k } }", expected: "im.netease.app_secret: is required"),
        Case(yaml: minimal + "\nim: { generic: { } }", expected: "im.generic.secret: is required"),
        Case(yaml: minimal + "\nim: { generic: { secret: \"\" } }", expected: "im.generic.secret: must not be empty"),
        Case(yaml: minimal + "\nim: { netease: { app_key: k, app_secret: s, callback_path: im } }", expected: "im.netease.callback_path: must start with /"),
        // credits (SPEC §11)
        Case(yaml: minimal + "\ncredits: { price: 1 }", expected: "credits.topup_secret: is required"),
        Case(yaml: minimal + "\ncredits: { topup_secret: short }", expected: "credits.topup_secret: must be at least 16 characters"),
        Case(yaml: minimal + "\ncredits: { topup_secret: 0123456789abcdef, price: -1 }", expected: "credits.price: must be between 0 and 1000000000, not -1"),
        Case(yaml: minimal + "\ncredits: { topup_secret: 0123456789abcdef, max_topup: 0 }", expected: "credits.max_topup: must be between 1 and"),
        Case(yaml: minimal + "\ncredits: { topup_secret: 0123456789abcdef, welcome: lots }", expected: "credits.welcome: must be a whole number"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: m1, price: 2}]", expected: "machines[0].price: needs a credits: section"),
        Case(yaml: minimal + "\ncredits: { topup_secret: 0123456789abcdef }\nim: { netease: { app_key: k, app_secret: s } }\napp_server: { sessions: accid }", expected: "app_server.sessions: must be secret with credits:"),
        Case(yaml: minimal + "\nchain: { site: a-1, bus: [mqtt://h] }\ncredits: { price: 1, topup_secret: 0123456789abcdef }", expected: "credits.topup_secret: is not a site's in a chain"),
        Case(yaml: minimal + "\nchain: { site: a-1, bus: [mqtt://h], wallet_timeout: 10ms }\ncredits: { price: 1 }", expected: "chain.wallet_timeout: must be at least 100ms"),
        // evidence (SPEC §14)
        Case(yaml: minimal + "\nevidence: { buffer: 10m }", expected: "evidence.dir: is required"),
        Case(yaml: minimal + "\nevidence: { dir: ev, max_disk: 20GB }", expected: "evidence.max_disk: \"20GB\" is not a size of 1MiB or more"),
        Case(yaml: minimal + "\nevidence: { dir: ev, max_disk: 512KiB }", expected: "evidence.max_disk: \"512KiB\" is not a size of 1MiB or more"),
        Case(yaml: minimal + "\nevidence: { dir: ev, keep: 30s }", expected: "evidence.keep: must be at least 1m"),
        Case(yaml: minimal + "\nevidence: { dir: ev, min_free: 2G }", expected: "evidence.min_free: \"2G\" is not a size of 1MiB or more"),
        Case(yaml: minimal + "\nevidence: { dir: ev, min_free: 0 }", expected: "evidence.min_free: \"0\" is not a size of 1MiB or more"),
        Case(yaml: minimal + "\nevidence: { dir: ev, min_free: [1GiB] }", expected: "evidence.min_free: must be a single value, not a list"),
        Case(yaml: minimal + "\nevidence: { dir: ev, cut_timeout: 500ms }", expected: "evidence.cut_timeout: must be at least 1s"),
        Case(yaml: minimal + "\nevidence: { dir: ev, cut_timeout: soon }", expected: "evidence.cut_timeout: \"soon\" is not a duration"),
        Case(yaml: minimal + "\nevidence: { dir: ev, min_fre: 1GiB }", expected: "evidence.min_fre: unknown key (did you mean min_free?)"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nevidence: { dir: ev }\nmachines: [{id: m1, cameras: [{id: \"1\", stream: rtmp://cam/live/1}, {id: \"2\", stream: /var/video/m1.flv}]}]", expected: "machines[0].cameras[1].stream: \"/var/video/m1.flv\" is not an RTMP URL"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nevidence: { dir: ev }\nmachines: [{id: m1, cameras: [{id: \"1\", stream: \"http://cam/live.flv\"}]}]", expected: "machines[0].cameras[0].stream: \"http://cam/live.flv\" is not an RTMP URL"),
        // prizes (SPEC §15)
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: [{id: m1, prize: {id: p, name: P}}]", expected: "machines[0].prize: needs a prizes: section"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nprizes: {}\nmachines: [{id: m1, prize: {name: P}}]", expected: "machines[0].prize.id: is required"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nprizes: {}\nmachines: [{id: m1, prize: {id: p}}]", expected: "machines[0].prize.name: is required"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nprizes: {}\nmachines: [{id: m1, prize: {id: \"pika chu\", name: P}}]", expected: "machines[0].prize.id: \"pika chu\" is not a prize id"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nprizes: {}\nmachines: [{id: m1, prize: {id: p, name: P, cost: -1}}]", expected: "machines[0].prize.cost: must be between 0 and"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nprizes: {}\nmachines: [{id: m1, prize: {id: p, name: P, exchange: 8}}]", expected: "machines[0].prize.exchange: needs a credits: section"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nprizes: {}\nmachines: [{id: m1, prize: {id: p, name: P, excange: 8}}]", expected: "machines[0].prize.excange: unknown key (did you mean exchange?)"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nprizes: {}\nmachines: [{id: m1, prize: pikachu}]", expected: "machines[0].prize: must be a mapping"),
        Case(yaml: minimal + "\nprizes: { low_at: -1 }", expected: "prizes.low_at: must be between 0 and 1000000"),
        Case(yaml: minimal + "\nprizes: { forget_address: 10m }", expected: "prizes.forget_address: must be at least 1h"),
        Case(yaml: minimal + "\nprizes: { forget_adress: 30d }", expected: "prizes.forget_adress: unknown key (did you mean forget_address?)"),
        Case(yaml: minimal + "\nprize: {}", expected: "prize: unknown key (did you mean prizes?)"),
        // shapes
        Case(yaml: "gateway: {id: a}\nmqtt: [1, 2]\nmachines: [{id: m1}]", expected: "mqtt: must be a mapping"),
        Case(yaml: "gateway: {id: a}\nmqtt: { url: mqtt://h }\nmachines: { id: m1 }", expected: "machines: must be a list"),
        Case(yaml: "gateway: {id: [a]}\nmqtt: { url: mqtt://h }\nmachines: [{id: m1}]", expected: "gateway.id: must be a single value, not a list"),
        // YAML syntax errors carry line and column
        Case(yaml: "gateway: {id: a}\nmqtt: [1, 2\nmachines: []", expected: "test.yaml:3:"),
        Case(yaml: "gateway:\n  id: a\n  id: b\nmqtt: { url: mqtt://h }\nmachines: [{id: m1}]", expected: "duplicate key id"),
        Case(yaml: "", expected: "test.yaml: is empty"),
    ]

    /// What `credits:` and `evidence:` need beside them (SPEC §11).
    static let readToken = "\nhttp: { read_token: 0123456789abcdef }"

    /// SPEC §11: with credits: or evidence: the HTTP API needs a read token,
    /// and the problem says why; a token that is there but refused is reported once, as itself.
    @Test(arguments: [
        ("\ncredits: { topup_secret: 0123456789abcdef }", ["http.read_token: is required with credits: (the players' wallets); without it they are open to anyone who reaches the port (the Host check keeps other sites' pages out of a browser, not a script out); set it, e.g. read_token: ${CLAW_READ_TOKEN} with the output of openssl rand -hex 16"]),
        ("\nevidence: { dir: ev }", ["http.read_token: is required with evidence: (the games' clips); without it they are open"]),
        ("\ncredits: { topup_secret: 0123456789abcdef }\nevidence: { dir: ev }", ["http.read_token: is required with credits: (the players' wallets) and evidence: (the games' clips); without it they are open"]),
        ("\nevidence: { dir: ev }\nhttp: { admin_token: 0123456789abcdef }", ["http.read_token: is required with evidence:"]),
        ("\nchain: { site: a-1, bus: [mqtt://h] }\ncredits: { price: 1 }", ["http.read_token: is required with credits:"]),
        ("\nevidence: { dir: ev }\nhttp: { read_token: short }", ["http.read_token: is 5 bytes long"]),
        ("\nevidence: { dir: ev }\nhttp: { read_token: \"${UNSET_READ_TOKEN}\" }", ["http.read_token: environment variable UNSET_READ_TOKEN is not set"]),
    ])
    func creditsAndEvidenceNeedAReadToken(_ sections: String, _ expected: [String]) {
        let found = problems(Self.minimal + sections)
        #expect(found.count == expected.count, "one problem each: \(found)")
        for text in expected { #expect(found.contains { $0.hasPrefix(text) }, "\(text) in \(found)") }
    }

    /// `http.trusted_proxies` (SPEC §5): addresses and blocks, each bad entry named by its index.
    @Test func trustedProxiesAreAddressesAndBlocks() throws {
        let config = try parse(Self.minimal + "\nhttp: { trusted_proxies: [127.0.0.1, 10.0.0.0/8, \"2001:db8:ff::/48\", \"::1\"] }")
        #expect(config.http.trustedProxies.networks.map(\.description) == ["127.0.0.1", "10.0.0.0/8", "2001:db8:ff::/48", "::1"])
        #expect(try parse(Self.minimal).http.trustedProxies == .none, "none by default")
        #expect(
            problems(Self.minimal + "\nhttp: { trusted_proxies: [127.0.0.1, 10.0.0.1/8, proxy.example, \"2001:db8::/129\", [1]] }") == [
                "http.trusted_proxies[1]: \"10.0.0.1/8\" has address bits set past /8: write 10.0.0.0/8 for the block, or the address alone",
                "http.trusted_proxies[2]: \"proxy.example\" is not an IP address or a CIDR block (write e.g. 127.0.0.1, 10.0.0.0/8 or 2001:db8::/32)",
                "http.trusted_proxies[3]: \"2001:db8::/129\" is not an IP address or a CIDR block (write e.g. 127.0.0.1, 10.0.0.0/8 or 2001:db8::/32)",
                "http.trusted_proxies[4]: must be a single value, not a list",
            ])
        #expect(problems(Self.minimal + "\nhttp: { trusted_proxies: 10.0.0.1 }") == ["http.trusted_proxies: must be a list"])
        #expect(problems(Self.minimal + "\nhttp: { trusted_proxy: [10.0.0.1] }") == ["http.trusted_proxy: unknown key (did you mean trusted_proxies?)"])
    }

    @Test func evidenceHasItsDefaultsAndSizes() throws {
        let config = try parse(Self.minimal + "\nevidence: { dir: evidence }" + Self.readToken, base: "/srv/claw")
        #expect(config.evidence == EvidenceSettings(dir: "/srv/claw/evidence"))
        #expect(config.evidence?.buffer == .seconds(600) && config.evidence?.pad == .seconds(2))
        #expect(config.evidence?.keep == .seconds(30 * 86400) && config.evidence?.maxDisk == 20 << 30)
        let sized = try parse(Self.minimal + "\nevidence: { dir: /e, buffer: 5m, pad: 500ms, keep: 7d, max_disk: 200MiB }" + Self.readToken)
        #expect(sized.evidence == EvidenceSettings(dir: "/e", buffer: .seconds(300), pad: .milliseconds(500), keep: .seconds(7 * 86400), maxDisk: 200 << 20))
        #expect(config.evidence?.minFree == 2 << 30 && config.evidence?.cutTimeout == .seconds(60))
        let guarded = try parse(Self.minimal + "\nevidence: { dir: /e, min_free: 512MiB, cut_timeout: 90s }" + Self.readToken)
        #expect(guarded.evidence?.minFree == 512 << 20 && guarded.evidence?.cutTimeout == .seconds(90))
        #expect(EvidenceSettings.format(2 << 30) == "2GiB" && EvidenceSettings.format(1536 << 20) == "1536MiB")
        #expect(EvidenceSettings.format(3 << 10) == "3KiB" && EvidenceSettings.format(1000) == "1000 bytes")
        #expect(EvidenceSettings.size("1TiB") == 1 << 40 && EvidenceSettings.size("1.5GiB") == nil && EvidenceSettings.size("-1MiB") == nil)
    }

    @Test func creditsPriceEachMachineFromTheSectionOrItsOwn() throws {
        let config = try parse(
            """
            gateway: { id: a }
            mqtt: { url: "mqtt://h" }
            credits: { price: 3, topup_secret: "${SECRET}", max_topup: 500, welcome: 5 }
            http: { read_token: 0123456789abcdef }
            machines:
              - id: m1
              - id: m2
                price: 0
              - id: m3
                price: 7
            """, environment: ["SECRET": "0123456789abcdef0123"])
        #expect(config.credits == CreditsSettings(price: 3, topupSecret: "0123456789abcdef0123", maxTopup: 500, welcome: 5))
        #expect(config.machines.map(\.price) == [3, 0, 7])
        #expect(try parse(Self.minimal).machines.first?.price == nil, "without credits: every game is free")
    }

    @Test func prizesHaveTheirDefaultsAndEachMachineItsPrize() throws {
        let config = try parse(
            """
            gateway: { id: a }
            mqtt: { url: "mqtt://h" }
            credits: { price: 1, topup_secret: "0123456789abcdef0123" }
            http: { read_token: 0123456789abcdef }
            prizes: { low_at: 5, forget_address: 30d }
            machines:
              - id: m1
                prize: { id: pikachu-30cm, name: "Pikachu 30 cm", cost: 12, exchange: 8 }
              - id: m2
            """)
        #expect(config.prizes == PrizeSettings(lowAt: 5, forgetAddress: .seconds(30 * 86400)))
        #expect(config.machines[0].prize == MachinePrize(id: "pikachu-30cm", name: "Pikachu 30 cm", cost: 12, exchange: 8, lowAt: 5))
        #expect(config.machines[1].prize == nil, "a machine without a prize makes none")
        let defaults = try parse(Self.minimal + "\nprizes: {}")
        #expect(defaults.prizes == PrizeSettings(lowAt: 3, forgetAddress: .seconds(90 * 86400)))
        #expect(try parse(Self.minimal).prizes == nil)
    }

    @Test("an invalid file is refused with the problem named by its path", arguments: invalid)
    func invalidFile(_ example: Case) {
        let found = problems(example.yaml)
        #expect(found.contains { $0.hasPrefix(example.expected) || $0.contains(example.expected) }, "got \(found)")
    }

    @Test("a token of 16 bytes is enough, counted in bytes; the environment's value is what counts")
    func tokenLength() throws {
        let yaml = Self.minimal + "\nhttp: { admin_token: \"${ADMIN}\", read_token: 小明小明小明 }"
        let config = try parse(yaml, environment: ["ADMIN": "0123456789abcdef"])
        #expect(config.http.adminToken == "0123456789abcdef")
        #expect(config.http.readToken == "小明小明小明", "18 bytes in UTF-8")
        #expect(problems(yaml, environment: ["ADMIN": "0123456789"]) == ["http.admin_token: is 10 bytes long; a token needs 16 at least (e.g. the output of openssl rand -hex 16)"])
    }

    @Test("every problem of a file is reported, not only the first")
    func allProblems() {
        let yaml = """
            gateway: { idd: x }
            mqtt: { url: "http://x", keepalive: abc, password: "${NOPE}" }
            game: { play_timeout: 30 }
            machines: [{ id: gateway }, { id: "a/b" }]
            """
        let found = problems(yaml)
        #expect(found.count >= 8, "\(found)")
        for path in ["gateway.idd", "gateway.id", "mqtt.url", "mqtt.keepalive", "mqtt.password", "game.play_timeout", "machines[0].id", "machines[1].id"] {
            #expect(found.contains { $0.hasPrefix(path + ":") }, "\(path) missing from \(found)")
        }
    }

    @Test("durations", arguments: [
        ("500ms", Duration.milliseconds(500)), ("10s", .seconds(10)), ("2m", .seconds(120)), ("1h", .seconds(3600)),
        ("1.5s", .milliseconds(1500)), ("0.25m", .seconds(15)),
    ])
    func durations(_ text: String, _ expected: Duration) {
        #expect(ConfigDuration.parse(text) == expected)
        #expect(ConfigDuration.parse(ConfigDuration.format(expected)) == expected)
    }

    @Test("not durations", arguments: ["", "10", "s", "ms", "-1s", "d", "1w", "10 s", "1e3s", "ten s", "1s2"])
    func notDurations(_ text: String) {
        #expect(ConfigDuration.parse(text) == nil)
    }
}

@Suite("gateway.yaml: the machines' board settings (SPEC §12)")
struct BoardSettingsConfigTests {
    static func parse(_ yaml: String) throws(ConfigError) -> GatewayConfig {
        try ConfigLoader.parse(yaml, file: "test.yaml", baseDirectory: "/tmp", environment: [:])
    }

    @Test func gameSettingsAreEveryMachinesDefaultsAndAMachineOverridesFieldByField() throws {
        let config = try Self.parse(
            """
            gateway: { id: a }
            mqtt: { url: "mqtt://127.0.0.1:1883" }
            game:
              settings: { game_time: 40s, claw: { grab: 35 }, guarantee_after: 8 }
            machines:
              - id: m1
              - id: m2
                settings: { claw: { top: 12 }, lift_height: 7, guarantee_after: 0 }
            """)
        let m1 = config.machines[0].settings, m2 = config.machines[1].settings
        #expect(m1.board == BoardSettings(gameTime: 40, claw: .init(grab: 35, top: 20, move: 10, max: 48), liftHeight: 5))
        #expect(m1.guaranteeAfter == 8)
        #expect(m2.board == BoardSettings(gameTime: 40, claw: .init(grab: 35, top: 12, move: 10, max: 48), liftHeight: 7))
        #expect(m2.guaranteeAfter == 0)
        #expect(try Self.parse("gateway: { id: a }\nmqtt: { url: \"mqtt://h\" }\nmachines: [{ id: m1 }]").machines[0].settings == MachineSettings())
    }

    @Test func eachBadFieldIsOneProblemNamingIt() {
        do {
            _ = try Self.parse(
                """
                gateway: { id: a }
                mqtt: { url: "mqtt://127.0.0.1:1883" }
                game:
                  settings: { game_time: 2.5s, claw: { grab: 0, grabb: 3 } }
                machines:
                  - id: m1
                    settings: { lift_height: 11, guarantee_after: -1, claw: { max: 49 }, game_time: 1h }
                """)
            Issue.record("a file with bad settings was taken")
        } catch {
            #expect(
                error.problems.map(\.description).sorted() == [
                    "game.settings.claw.grab: must be between 1 and 48, not 0",
                    "game.settings.claw.grabb: unknown key (did you mean grab?)",
                    "game.settings.game_time: must be whole seconds from 5s to 300s (the board counts seconds)",
                    "machines[0].settings.claw.max: must be between 1 and 48, not 49",
                    "machines[0].settings.game_time: must be whole seconds from 5s to 300s (the board counts seconds)",
                    "machines[0].settings.guarantee_after: must be between 0 and 1000, not -1",
                    "machines[0].settings.lift_height: must be between 0 and 10, not 11",
                ].sorted())
        }
    }
}
