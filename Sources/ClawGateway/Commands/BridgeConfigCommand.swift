import ArgumentParser

/// `claw-gateway bridge-config`: the site broker's bridge to the chain's
/// cluster (SPEC §9), as a mosquitto `conf.d` snippet, from `gateway.yaml`.
struct BridgeConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bridge-config",
        abstract: "Print the site mosquitto's bridge to the chain's cluster (a conf.d snippet) from gateway.yaml's chain: section.",
        discussion: """
            The bridge carries the read-only streams the chain's dashboard shows (queue, state, events, stats) out \
            to <prefix>/<site>/ on the cluster; nothing comes in over it. The snippet holds chain.password: write it \
            to a file only mosquitto can read, e.g. claw-gateway bridge-config > /etc/mosquitto/conf.d/chain.conf \
            && chmod 0640 /etc/mosquitto/conf.d/chain.conf && chgrp mosquitto /etc/mosquitto/conf.d/chain.conf
            """
    )

    @OptionGroup var options: ConfigOptions

    func run() async throws {
        let config = try options.load()
        guard let chain = config.chain else {
            printError("\(options.config): chain: is not set; this gateway is not a site of a chain, it has no bridge.")
            throw ExitCode(ExitStatus.configError)
        }
        print(ChainBridge(chain: chain, prefix: config.mqtt.topicPrefix).snippet, terminator: "")
    }
}

/// The mosquitto bridge of SPEC §9 for one site.
struct ChainBridge {
    let chain: ChainSettings
    /// The site's local topic prefix, which is also the chain's.
    let prefix: String

    /// What goes out, with the QoS it is bridged at: the snapshots, queues and
    /// events are wanted whole (QoS 1, kept through a failover by the
    /// persistent session); statistics are a figure a second.
    static let streams: [(pattern: String, qos: Int)] = [("+/queue", 1), ("+/state", 1), ("+/events", 1), ("+/stats", 0)]

    var connectionName: String { "claw-chain-\(chain.site)" }

    /// NATS refuses `.`, space, `*` and `>` in client ids; a site name has none of them.
    var remoteClientID: String { "claw-bridge-\(chain.site)" }

    var snippet: String {
        var lines = [
            "# The bridge of site \(chain.site) to the chain's cluster (SPEC §9), printed by claw-gateway bridge-config.",
            "# Out only: local \(prefix)/<machine>/{queue,state,events,stats} to \(prefix)/\(chain.site)/ on the cluster.",
            "# Control, camera, ack and result topics never leave the site; nothing comes in.",
            "connection \(connectionName)",
            "address \(chain.bus.map { "\($0.host.contains(":") ? "[\($0.host)]" : $0.host):\($0.port)" }.joined(separator: " "))",
            "round_robin true",
            "bridge_protocol_version mqttv311",
            "try_private false",
            "cleansession false",
            "remote_clientid \(remoteClientID)",
            "restart_timeout 1 5",
            "start_type automatic",
            // The bridge's state topic stays on the site broker: the site's
            // cluster user may publish only under its own prefix.
            "notifications_local_only true",
        ]
        if let username = chain.username { lines.append("remote_username \(username)") }
        if let password = chain.password { lines.append("remote_password \(password)") }
        if chain.tls != nil {
            lines.append("bridge_capath /etc/ssl/certs")
            lines.append("bridge_insecure false")
        }
        for stream in Self.streams {
            lines.append("topic \(stream.pattern) out \(stream.qos) \(prefix)/ \(prefix)/\(chain.site)/")
        }
        return lines.joined(separator: "\n") + "\n"
    }
}
