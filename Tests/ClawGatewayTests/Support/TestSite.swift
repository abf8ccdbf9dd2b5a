import Foundation

/// A folder with a gateway.yaml for a test: the test's broker, a free HTTP
/// port, storage inside the folder.
struct TestSite {
    let directory: URL
    let httpPort: Int
    var config: URL { directory.appendingPathComponent("gateway.yaml") }
    var log: URL { directory.appendingPathComponent("gateway.log") }
    var database: URL { directory.appendingPathComponent("data/gateway.sqlite") }

    /// - Parameters:
    ///   - extra: YAML appended at the top level (e.g. an `im:` section).
    ///   - machineExtra: YAML lines added to every machine (e.g. its `prize:`).
    init(
        broker: MosquittoBroker, machines: [String] = ["m1", "m2"], game: String = "", extra: String = "",
        adminToken: String? = nil, logLevel: String = "debug", http: String = "", keepalive: Int = 30, gateway: String = "",
        topicPrefix: String = "claw", cameraBase: String = "rtmp://example", machineExtra: String = ""
    ) throws {
        directory = try TemporaryDirectory.make(prefix: "site")
        httpPort = try FreePort.next()
        var yaml = """
            gateway:
              id: test
              log_level: \(logLevel)
            \(gateway.split(separator: "\n").map { "  \($0)" }.joined(separator: "\n"))
            mqtt:
              url: \(broker.url)
              keepalive: \(keepalive)
              topic_prefix: \(topicPrefix)
            http:
              listen: 127.0.0.1:\(httpPort)
            \(adminToken.map { "  admin_token: \($0)" } ?? "")
            \(http.split(separator: "\n").map { "  \($0)" }.joined(separator: "\n"))
            storage:
              path: data/gateway.sqlite

            """
        if !game.isEmpty { yaml += "game:\n" + game.split(separator: "\n").map { "  \($0)\n" }.joined() }
        yaml += extra
        yaml += "machines:\n"
        for id in machines {
            yaml += """
                  - id: \(id)
                    name: Machine \(id)
                    im_account: claw_\(id)
                    cameras:
                      - { id: "1", stream: \(cameraBase)/\(id)-1 }
                      - { id: "2", stream: \(cameraBase)/\(id)-2 }

                """
            yaml += machineExtra.split(separator: "\n").map { "    \($0)\n" }.joined()
        }
        try yaml.write(to: config, atomically: true, encoding: .utf8)
    }

    var logText: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }
}
