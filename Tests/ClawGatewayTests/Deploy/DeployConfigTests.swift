import Foundation
import Logging
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// The site deployment files of deploy/, for real: make-site-secrets.sh makes
    /// the CA, certificates, passwords and the ACL; mosquitto runs
    /// deploy/mosquitto.conf (site paths and ports moved into a temporary folder,
    /// see ``DeploySite``); MQTT clients log in as the gateway, the observer, the
    /// machine PCs and their camera switches.
    ///
    /// A denied publish is dropped by the broker without closing the connection,
    /// and a subscription is always granted, its messages filtered one by one. So
    /// "never delivered" is proved with barriers: a later message on the same
    /// connection, which the broker handles in order, instead of a sleep.
    @Suite("deploy/: the site's mosquitto config, ACL and secrets")
    struct DeployConfigTests {
        @Test("make-site-secrets.sh writes the CA, certificates, passwords and ACL, and refuses to overwrite them")
        func secrets() throws {
            let site = try DeploySite()
            let made = try site.makeSecrets()
            try #require(made.status == 0, "\(made.output)")
            for file in ["tls/ca.crt", "tls/server.crt", "tls/gateway.crt", "acl"] {
                #expect(site.mode(file) == 0o644, "\(file)")
            }
            for secret in ["tls/ca.key", "tls/server.key", "tls/gateway.key", "passwd", "passwords"] {
                #expect(site.mode(secret) == 0o600, "\(secret)")
            }
            let passwords = try site.readPasswords()
            #expect(Set(passwords.keys) == ["gateway", "observer", "m1", "m1-camera", "m2", "m2-camera"])
            #expect(passwords.values.allSatisfy { $0.count >= 16 && !$0.contains("/") && !$0.contains("+") })
            #expect(Set(passwords.values).count == 6)

            // The ACL: the rules of deploy/acl, then each PC and camera switch
            // with exactly its topics; no pattern, which would give every user
            // topics under its own name.
            let acl = try String(contentsOf: site.file("acl"), encoding: .utf8)
            let template = try String(contentsOf: DeploySite.deployFolder.appendingPathComponent("acl"), encoding: .utf8)
            let rules = { (text: String) in text.split(separator: "\n").filter { !$0.hasPrefix("#") } }
            #expect(rules(acl).starts(with: rules(template)))
            #expect(!rules(acl).contains { $0.hasPrefix("pattern") })
            for id in ["m1", "m2"] {
                #expect(acl.contains(
                    """
                    user \(id)
                    topic read claw/\(id)/control
                    topic read claw/\(id)/camera
                    topic read claw/\(id)/result/ack
                    topic write claw/\(id)/ack
                    topic write claw/\(id)/result
                    topic write claw/\(id)/state
                    topic write claw/\(id)/fault

                    """))
                #expect(acl.contains("user \(id)-camera\ntopic read claw/\(id)/camera\ntopic write claw/\(id)/ack\n"))
            }

            let ca = try Data(contentsOf: site.file("tls/ca.crt"))
            let again = try site.makeSecrets()
            #expect(again.status != 0)
            #expect(again.output.contains("already exists"), "\(again.output)")
            #expect(try Data(contentsOf: site.file("tls/ca.crt")) == ca)
            #expect(try site.readPasswords() == passwords)

            let forced = try site.makeSecrets(["--force", "--host", "localhost", "m1", "m2", "m3"])
            #expect(forced.status == 0, "\(forced.output)")
            #expect(try Data(contentsOf: site.file("tls/ca.crt")) != ca)
            #expect(try Set(site.readPasswords().keys) == ["gateway", "observer", "m1", "m1-camera", "m2", "m2-camera", "m3", "m3-camera"])

            // Usernames that would be shared: the broker's own, twice the
            // same, or a machine named like another's camera switch.
            for ids in [["observer"], ["gateway"], ["m1", "m1"], ["m1", "m1-camera"], ["m1-camera", "m1"], ["m 1"]] {
                let refused = try site.makeSecrets(["--force"] + ids)
                #expect(refused.status != 0, "\(ids)")
                #expect(refused.output.contains("machine id"), "\(ids): \(refused.output)")
            }
            #expect(try Set(site.readPasswords().keys).contains("m3-camera"), "a refused run changed nothing")

            let prefixed = try site.makeSecrets(["--force", "--host", "localhost", "--topic-prefix", "arcade7/claw", "m1"])
            #expect(prefixed.status == 0, "\(prefixed.output)")
            let prefixedACL = try String(contentsOf: site.file("acl"), encoding: .utf8)
            #expect(prefixedACL.contains("user gateway\ntopic readwrite arcade7/claw/#\n"))
            #expect(prefixedACL.contains("user m1-camera\ntopic read arcade7/claw/m1/camera\ntopic write arcade7/claw/m1/ack\n"))
            #expect(!rules(prefixedACL).contains { $0.contains(" claw/") })
        }

        @Test("make-site-secrets.sh puts no password on a command line, and every user it makes logs in")
        func passwordsOffTheCommandLine() async throws {
            try await DeploySite.with(wrapping: ["mosquitto_passwd"]) { site in
                let passwords = try site.readPasswords()
                let calls = site.toolCalls
                try #require(!calls.isEmpty, "make-site-secrets.sh did not run mosquitto_passwd")
                for call in calls {
                    // The arguments of a process are in ps and /proc for every user.
                    #expect(call.hasPrefix("-U "), "mosquitto_passwd \(call)")
                    for (user, password) in passwords {
                        #expect(!call.contains(password), "the password of \(user) was an argument of mosquitto_passwd")
                    }
                }
                let hashes = try String(contentsOf: site.file("passwd"), encoding: .utf8)
                #expect(hashes.split(separator: "\n").count == passwords.count)
                for (user, password) in passwords {
                    #expect(!hashes.contains(password), "the password of \(user) is in the clear in passwd")
                }

                // Each username is one connection, so all of them can be in at once.
                var clients: [SiteClient] = []
                for user in passwords.keys.sorted() {
                    clients.append(try site.client("login-\(user)", user: user))
                }
                try await eventually("every user of the passwords file to log in") { clients.allSatisfy(\.isConnected) }
                #expect(site.refusals == 0)
            }
        }

        @Test("make-site-secrets.sh --add: a new machine and its camera switch, after a reload, with nothing else changed")
        func addMachine() async throws {
            try await DeploySite.with { site in
                let before = try site.readPasswords()
                let ca = try Data(contentsOf: site.file("tls/ca.crt"))
                let gateway = try site.client("gateway", user: "gateway", subscribe: ["claw/#"])
                let m1 = try site.client("m1-pc", user: "m1")
                try await eventually("the gateway and m1 to connect") { gateway.isConnected && m1.isConnected }

                let added = try site.makeSecrets(["--add", "m3"])
                try #require(added.status == 0, "\(added.output)")
                let after = try site.readPasswords()
                #expect(Set(after.keys) == Set(before.keys).union(["m3", "m3-camera"]))
                #expect(before.allSatisfy { after[$0.key] == $0.value }, "--add changed a password")
                #expect(try Data(contentsOf: site.file("tls/ca.crt")) == ca)
                #expect(site.mode("passwd") == 0o600 && site.mode("passwords") == 0o600 && site.mode("acl") == 0o644)
                for ids in [["m3"], ["m1"], ["m2-camera"], ["m4", "m4"]] {
                    let refused = try site.makeSecrets(["--add"] + ids)
                    #expect(refused.status != 0, "--add \(ids)")
                }
                #expect(try site.readPasswords() == after)

                try site.reload()
                try gateway.publish("claw/m3/camera", "camera of m3", retain: true)
                try gateway.publish("claw/m3/control", "control of m3", retain: true)
                let m3 = try site.client("m3-pc", user: "m3", subscribe: ["claw/m3/control"])
                let camera = try site.client("m3-camera", user: "m3-camera", subscribe: ["claw/m3/#"])
                try await m3.waitFor("claw/m3/control", "control of m3")
                try await camera.waitFor("claw/m3/camera", "camera of m3")
                try m3.publish("claw/m3/state", "online", retain: true)
                try camera.publish("claw/m3/ack", "ack from the camera switch of m3")
                try await gateway.waitFor("claw/m3/state", "online")
                try await gateway.waitFor("claw/m3/ack", "ack from the camera switch of m3")
                #expect(camera.payloads(on: "claw/m3/control").isEmpty)
                // Connected clients stayed; old passwords still work.
                #expect(gateway.client.connectCount == 1 && m1.client.connectCount == 1)
                let m2 = try site.client("m2-pc", user: "m2")
                try await eventually("m2 to log in after the reload") { m2.isConnected }
            }
        }

        @Test("deploy/gateway.yaml passes check-config, with its files moved here and its four variables set")
        func gatewayConfig() throws {
            let site = try DeploySite()
            let made = try site.makeSecrets()
            try #require(made.status == 0, "\(made.output)")
            let config = try site.gatewayConfig()
            #expect(config.variables == ["MQTT_PASSWORD", "NIM_APP_SECRET", "CLAW_WEBHOOK_SECRET", "CLAW_ADMIN_TOKEN"])
            let result = try GatewayBinary.run(["check-config", "--config", config.file.path], environment: config.environment)
            #expect(result.status == 0, "\(result.error)")
            #expect(result.output.contains("broker mqtts://127.0.0.1:8883 as gateway"), "\(result.output)")
            #expect(result.output.contains("machines: 2"), "\(result.output)")
        }

        @Test("the unit bounds the gateway's memory and tasks")
        func unitLimits() throws {
            let unit = try String(contentsOf: DeploySite.deployFolder.appendingPathComponent("claw-gateway.service"), encoding: .utf8)
            let settings = unit.split(separator: "\n").filter { !$0.hasPrefix("#") }
            #expect(settings.contains("MemoryMax=256M"))
            #expect(settings.contains("TasksMax=256"))
        }

        @Test("every listener binds client ids to logins; the PCs' listener is an explicit address; no default listener opens")
        func listeners() async throws {
            let text = try String(contentsOf: DeploySite.deployFolder.appendingPathComponent("mosquitto.conf"), encoding: .utf8)
            let settings = text.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") && !$0.isEmpty }
            let firstListener = try #require(settings.firstIndex { $0.hasPrefix("listener ") })
            var blocks: [[String]] = []
            for line in settings[firstListener...] {
                if line.hasPrefix("listener ") { blocks.append([line]) } else { blocks[blocks.count - 1].append(line) }
            }
            #expect(blocks.map(\.[0]) == ["listener 1883 127.0.0.1", "listener 8883 127.0.0.1", "listener 8883 ARCADE_LAN_ADDRESS"])
            for block in blocks {
                #expect(block.contains("use_username_as_clientid true"), "\(block[0])")
            }
            // A listener option before the first listener line configures
            // mosquitto's default listener, which then opens on port 1883 of
            // every interface.
            let listenerOptions = [
                "use_username_as_clientid", "cafile", "capath", "certfile", "keyfile", "tls_version", "require_certificate",
                "bind_address", "bind_interface", "port", "protocol", "socket_domain", "max_connections", "mount_point",
            ]
            let global = settings[..<firstListener].compactMap { $0.split(separator: " ").first.map(String.init) }
            #expect(global.allSatisfy { !listenerOptions.contains($0) }, "\(global)")

            try await DeploySite.with { site in
                let opened = site.log.split(separator: "\n").filter { $0.contains("listen socket on port") }
                    .compactMap { $0.split(separator: " ").last.flatMap { Int($0.dropLast()) } }
                #expect(opened.sorted() == site.listeners.map(\.port).sorted(), "\(site.log)")
            }
        }

        @Test("one machine's login, under any client id on any listener, disconnects no one and fires no one's will")
        func clientIDsAreBoundToLogins() async throws {
            try await DeploySite.with { site in
                let offline = Array("offline".utf8)
                let observer = try site.client("observer", user: "observer", subscribe: ["claw/#"])
                let m2 = try site.client("m2-pc", user: "m2", will: MQTTWill(topic: "claw/m2/state", payload: offline))
                let camera = try site.client("m2-camera", user: "m2-camera")
                let gateway = try site.client(
                    "claw-gateway-arcade-1", user: "gateway", port: site.tlsPort, tls: site.tls,
                    will: MQTTWill(topic: "claw/gateway/state", payload: offline))
                try await eventually("the observer, m2, its camera switch and the gateway to connect") {
                    observer.isConnected && m2.isConnected && camera.isConnected && gateway.isConnected
                }
                try m2.publish("claw/m2/state", "online", retain: true)
                try gateway.publish("claw/gateway/state", "online", retain: true)
                try await observer.waitFor("claw/m2/state", "online")
                try await observer.waitFor("claw/gateway/state", "online")

                // m1's password under the others' client ids (and a random one),
                // one login at a time, on each listener. Without the binding the
                // first would disconnect m2's PC and publish its will.
                let ids = ["m2-pc", "m2", "m2-camera", "claw-gateway-arcade-1", "gateway", "observer", "m1-\(UInt32.random(in: 0...UInt32.max))"]
                for listener in site.listeners {
                    for id in ids {
                        let m1 = try site.client(id, user: "m1", port: listener.port, tls: listener.tls)
                        try await eventually("m1 as \(id) on the \(listener) listener to connect") { m1.isConnected }
                        try await site.disconnect(m1)
                    }
                }
                // A wrong password under m2's id is refused before it takes anything over.
                _ = try site.client("m2-pc", user: "m2", password: "not-the-password", retry: 60)
                try await eventually("the broker to refuse the wrong password") { site.refusals == 1 }

                for client in [observer, m2, camera, gateway] {
                    #expect(client.isConnected && client.client.connectCount == 1, "\(client.name) was disconnected")
                }
                // Barriers: the next messages of m2, its camera switch and the
                // gateway, on the connections they had from the start.
                try m2.publish("claw/m2/state", "still online", retain: true)
                try camera.publish("claw/m2/ack", "camera still here")
                try gateway.publish("claw/gateway/state", "still online", retain: true)
                try await observer.waitFor("claw/m2/state", "still online")
                try await observer.waitFor("claw/m2/ack", "camera still here")
                try await observer.waitFor("claw/gateway/state", "still online")
                #expect(observer.payloads(on: "claw/m2/state") == ["online", "still online"])
                #expect(observer.payloads(on: "claw/gateway/state") == ["online", "still online"])
                // What the broker did: it named every one of those logins m1 and
                // closed no earlier connection.
                #expect(site.log.components(separatedBy: " as m1 (").count - 1 == ids.count * site.listeners.count)
                #expect(!site.log.contains("closing old connection"), "\(site.log)")
            }
        }

        @Test("a camera switch reads its machine's camera topic and writes its acks, and nothing else")
        func cameraSwitchDoesOnlyItsJob() async throws {
            try await DeploySite.with { site in
                let gateway = try site.client("gateway", user: "gateway", subscribe: ["claw/#"])
                let m1 = try site.client(
                    "m1-pc", user: "m1", will: MQTTWill(topic: "claw/m1/state", payload: Array("offline".utf8)),
                    subscribe: ["claw/m1/control", "claw/m1/camera"])
                try await eventually("the gateway and m1's PC to connect") { gateway.isConnected && m1.isConnected }
                // Retained messages it must not get, and the one it must: the
                // gateway seeing them means the broker has stored them.
                try m1.publish("claw/m1/state", "online", retain: true)
                try gateway.publish("claw/m1/control", "control sentinel", retain: true)
                try gateway.publish("claw/m1/queue", #"{"machine":"m1"}"#, retain: true)
                try gateway.publish("claw/m2/camera", "camera sentinel of m2", retain: true)
                try gateway.publish("claw/m1/camera", "camera sentinel", retain: true)
                for (topic, payload) in [
                    ("claw/m1/state", "online"), ("claw/m1/control", "control sentinel"), ("claw/m1/queue", #"{"machine":"m1"}"#),
                    ("claw/m2/camera", "camera sentinel of m2"), ("claw/m1/camera", "camera sentinel"),
                ] {
                    try await gateway.waitFor(topic, payload)
                }

                // Subscribed to everything: the ACL decides what it gets.
                let camera = try site.client("m1-camera", user: "m1-camera", subscribe: ["claw/#"])
                try await camera.waitFor("claw/m1/camera", "camera sentinel")
                for topic in [
                    "claw/m1/control", "claw/m1/ack", "claw/m1/result", "claw/m1/result/ack", "claw/m1/events", "claw/m1/stats",
                    "claw/m2/camera", "claw/m2/control", "claw/gateway/state",
                ] {
                    try gateway.publish(topic, "not for the camera switch")
                }
                let command = WireMessage(.camera, data: "2", serial: 7).encoded()
                try gateway.publish("claw/m1/camera", bytes: command)
                try await eventually("the camera switch to get its command") { camera.messages.contains { $0.payload == command } }
                #expect(Set(camera.messages.map(\.topic)) == ["claw/m1/camera"], "it read \(Set(camera.messages.map(\.topic)))")
                // Its PC reads the camera topic too (the simulator plays both).
                try await eventually("m1's PC to get the camera command") { m1.messages.contains { $0.payload == command } }

                let forged = [
                    "claw/m1/result", "claw/m1/state", "claw/m1/control", "claw/m1/camera", "claw/m1/queue", "claw/m2/ack",
                    "claw/m2/result", "claw/m2/state", "claw/m2/camera", "claw/m1-camera/ack", "claw/m1-camera/state",
                    "claw/gateway/state",
                ]
                for topic in forged {
                    try camera.publish(topic, "forged by the camera switch", retain: topic.hasSuffix("/state"))
                }
                let ack = WireMessage(.ack, data: "ok", serial: 7).encoded()
                try camera.publish("claw/m1/ack", bytes: ack)
                try await eventually("the gateway to get the camera switch's ack") {
                    gateway.messages.contains { $0.topic == "claw/m1/ack" && $0.payload == ack }
                }
                let leaked = gateway.messages.filter { String(decoding: $0.payload, as: UTF8.self) == "forged by the camera switch" }.map(\.topic)
                #expect(leaked.isEmpty, "the camera switch published to \(leaked)")
                #expect(!m1.payloads(on: "claw/m1/camera").contains("forged by the camera switch"))

                // The PC and its camera switch are in at once, neither knocked off.
                #expect(m1.isConnected && m1.client.connectCount == 1)
                #expect(camera.isConnected && camera.client.connectCount == 1)
                #expect(!gateway.payloads(on: "claw/m1/state").contains("offline"))
            }
        }

        @Test("anonymous clients and wrong passwords are refused, on every listener")
        func refusesStrangers() async throws {
            try await DeploySite.with { site in
                // Refused clients retry only after a minute: one attempt each, so
                // the broker's "not authorised" lines can be counted.
                let anonymous = try site.client("anonymous", user: nil, retry: 60)
                try await eventually("the broker to refuse the anonymous client") { site.refusals == 1 }
                #expect(!anonymous.isConnected && anonymous.client.connectCount == 0)

                let wrong = try site.client("wrong-password", user: "m1", password: "not-the-password", retry: 60)
                try await eventually("the broker to refuse a wrong password") { site.refusals == 2 }
                #expect(!wrong.isConnected && wrong.client.connectCount == 0)

                let ca = site.file("tls/ca.crt").path
                let anonymousTLS = try site.client(
                    "anonymous-tls", user: nil, port: site.tlsPort, tls: TLSSettings(caFile: ca), retry: 60)
                try await eventually("the broker to refuse the anonymous TLS client") { site.refusals == 3 }
                #expect(!anonymousTLS.isConnected && anonymousTLS.client.connectCount == 0)

                let anonymousArcade = try site.client("anonymous-arcade", user: nil, port: site.arcadePort, tls: site.tls, retry: 60)
                try await eventually("the broker to refuse the anonymous client on the arcade listener") { site.refusals == 4 }
                #expect(!anonymousArcade.isConnected && anonymousArcade.client.connectCount == 0)

                // The same listeners let the right passwords in.
                let m1 = try site.client("m1-pc", user: "m1")
                let gateway = try site.client("gateway", user: "gateway", port: site.tlsPort, tls: TLSSettings(caFile: ca))
                try await eventually("m1 and the gateway to log in") { m1.isConnected && gateway.isConnected }
            }
        }

        @Test("a machine PC publishes its own ack, result and state, and nothing else")
        func pcWritesOnlyItsOwnTopics() async throws {
            try await DeploySite.with { site in
                let gateway = try site.client("gateway", user: "gateway", subscribe: ["claw/#"])
                let m1 = try site.client("m1-pc", user: "m1")
                try await eventually("the gateway and m1 to connect") { gateway.isConnected && m1.isConnected }
                // Retained, so the gateway gets it whether its subscription is
                // made before or after: once it has it, the subscription is active.
                try m1.publish("claw/m1/state", "online", retain: true)
                try await gateway.waitFor("claw/m1/state", "online")

                let forged = [
                    "claw/m2/result", "claw/m2/ack", "claw/m2/state", "claw/m2/control", "claw/m1/control",
                    "claw/m1/camera", "claw/m1/queue", "claw/m1/events", "claw/m1/result/ack", "claw/m2/result/ack",
                    "claw/gateway/state",
                ]
                for topic in forged {
                    try m1.publish(topic, "forged by m1", retain: topic.hasSuffix("/state"))
                }
                try m1.publish("claw/m1/ack", "ack of m1")
                // The barrier: m1's connection is handled in order, so anything
                // forged that got through would reach the gateway before this.
                try m1.publish("claw/m1/result", "result of m1")
                try await gateway.waitFor("claw/m1/result", "result of m1")

                #expect(gateway.payloads(on: "claw/m1/ack") == ["ack of m1"])
                let leaked = gateway.messages.filter { String(decoding: $0.payload, as: UTF8.self) == "forged by m1" }.map(\.topic)
                #expect(leaked.isEmpty, "m1 published to \(leaked)")
            }
        }

        @Test("a machine PC reads its own control, camera and result/ack topics, and nothing of another machine, retained included")
        func pcReadsOnlyItsOwnTopics() async throws {
            try await DeploySite.with { site in
                let gateway = try site.client("gateway", user: "gateway", subscribe: ["claw/#"])
                let m2 = try site.client("m2-pc", user: "m2")
                try await eventually("the gateway and m2 to connect") { gateway.isConnected && m2.isConnected }
                // Retained messages of m2 that m1 must not get when it subscribes;
                // the gateway seeing them means the broker has stored them.
                try m2.publish("claw/m2/state", "online", retain: true)
                try gateway.publish("claw/m2/queue", #"{"machine":"m2"}"#, retain: true)
                try gateway.publish("claw/m1/control", "sentinel", retain: true)
                try await gateway.waitFor("claw/m2/state", "online")
                try await gateway.waitFor("claw/m2/queue", #"{"machine":"m2"}"#)
                try await gateway.waitFor("claw/m1/control", "sentinel")

                let m1 = try site.client("m1-pc", user: "m1", subscribe: ["claw/m2/#", "claw/+/control", "claw/+/camera", "claw/+/result/ack"])
                // The subscription is granted (mosquitto filters messages, not
                // subscriptions); the retained sentinel says it is active.
                try await m1.waitFor("claw/m1/control", "sentinel")

                try gateway.publish("claw/m2/control", "for m2")
                try gateway.publish("claw/m2/camera", "camera of m2")
                try gateway.publish("claw/m2/result/ack", #"{"serial":2}"#)
                try gateway.publish("claw/m1/camera", "camera of m1")
                try gateway.publish("claw/m1/result/ack", #"{"serial":1}"#)
                // The barrier: the gateway's connection is handled in order.
                try gateway.publish("claw/m1/control", "for m1")
                try await m1.waitFor("claw/m1/control", "for m1")

                #expect(m1.payloads(on: "claw/m1/camera") == ["camera of m1"])
                #expect(m1.payloads(on: "claw/m1/result/ack") == [#"{"serial":1}"#], "its results' confirmations")
                let topics = Set(m1.messages.map(\.topic))
                #expect(topics == ["claw/m1/control", "claw/m1/camera", "claw/m1/result/ack"], "m1 read \(topics)")
            }
        }

        @Test("the observer reads everything, retained included, and publishes nothing")
        func observerReadsEverything() async throws {
            try await DeploySite.with { site in
                let gateway = try site.client("gateway", user: "gateway", subscribe: ["claw/#"])
                let m1 = try site.client("m1-pc", user: "m1")
                let m2 = try site.client("m2-pc", user: "m2")
                try await eventually("the gateway and the PCs to connect") { gateway.isConnected && m1.isConnected && m2.isConnected }
                try m1.publish("claw/m1/state", "online", retain: true)
                try m2.publish("claw/m2/state", "online", retain: true)
                try gateway.publish("claw/m1/queue", #"{"machine":"m1"}"#, retain: true)
                try gateway.publish("claw/m1/control", "sentinel", retain: true)
                try await gateway.waitFor("claw/m1/state", "online")
                try await gateway.waitFor("claw/m2/state", "online")
                try await gateway.waitFor("claw/m1/queue", #"{"machine":"m1"}"#)
                try await gateway.waitFor("claw/m1/control", "sentinel")

                let observer = try site.client("observer", user: "observer", subscribe: ["claw/#"])
                try await observer.waitFor("claw/m1/state", "online")
                try await observer.waitFor("claw/m2/state", "online")
                try await observer.waitFor("claw/m1/queue", #"{"machine":"m1"}"#)
                #expect(observer.messages.first { $0.topic == "claw/m1/queue" }?.retain == true)

                try m1.publish("claw/m1/ack", "ack of m1")
                try m1.publish("claw/m1/result", "result of m1")
                try m2.publish("claw/m2/result", "result of m2")
                try gateway.publish("claw/m2/control", "for m2")
                try gateway.publish("claw/m2/camera", "camera of m2")
                try gateway.publish("claw/m1/events", #"{"type":"online"}"#)
                try await observer.waitFor("claw/m1/ack", "ack of m1")
                try await observer.waitFor("claw/m1/result", "result of m1")
                try await observer.waitFor("claw/m2/result", "result of m2")
                try await observer.waitFor("claw/m2/control", "for m2")
                try await observer.waitFor("claw/m2/camera", "camera of m2")
                try await observer.waitFor("claw/m1/events", #"{"type":"online"}"#)

                // The observer publishes nothing.
                m1.subscribe(["claw/m1/control"])
                try await m1.waitFor("claw/m1/control", "sentinel")
                try observer.publish("claw/m1/control", "from the observer")
                try observer.publish("claw/m2/state", "offline", retain: true)
                // A barrier on the observer's own connection: the retained state of
                // a new subscription comes after the broker handled the publishes.
                let states = observer.payloads(on: "claw/m1/state").count
                observer.subscribe(["claw/m1/state"])
                try await eventually("the observer's second subscription") { observer.payloads(on: "claw/m1/state").count > states }
                // And a later message to m1 and the gateway from the gateway.
                try gateway.publish("claw/m1/control", "after")
                try await m1.waitFor("claw/m1/control", "after")
                try await gateway.waitFor("claw/m1/control", "after")
                #expect(!m1.payloads(on: "claw/m1/control").contains("from the observer"))
                #expect(!gateway.payloads(on: "claw/m1/control").contains("from the observer"))
                #expect(!gateway.payloads(on: "claw/m2/state").contains("offline"))
                #expect(!observer.payloads(on: "claw/m2/state").contains("offline"))
            }
        }

        @Test("the TLS listener: the site CA works, with or without the gateway's certificate; another CA does not")
        func tls() async throws {
            try await DeploySite.with { site in
                let ca = site.file("tls/ca.crt").path
                let m1 = try site.client("m1-pc", user: "m1", port: site.tlsPort, tls: TLSSettings(caFile: ca))
                try await eventually("m1 to connect over TLS") { m1.isConnected }
                try m1.publish("claw/m1/state", "online over TLS", retain: true)
                let gatewayTLS = TLSSettings(
                    caFile: ca, certFile: site.file("tls/gateway.crt").path, keyFile: site.file("tls/gateway.key").path)
                let gateway = try site.client("gateway", user: "gateway", port: site.tlsPort, tls: gatewayTLS, subscribe: ["claw/#"])
                try await gateway.waitFor("claw/m1/state", "online over TLS")

                let other = try TLSFixture.make(name: "some-other-ca")
                defer { try? FileManager.default.removeItem(at: other.directory) }
                let stranger = try site.client(
                    "wrong-ca", user: "observer", port: site.tlsPort, tls: TLSSettings(caFile: other.caCertificate.path), retry: 60)
                try await eventually("the certificate error to be reported") {
                    let error = stranger.client.lastError?.lowercased() ?? ""
                    return error.contains("certificate") || error.contains("tls")
                }
                #expect(!stranger.isConnected && stranger.client.connectCount == 0, "\(stranger.client.lastError ?? "")")
            }
        }

        /// The largest queue snapshot the deployed gateway can publish:
        /// deploy/gateway.yaml's max_queue waiting, and a player, each with the
        /// longest account and nickname accepted, made of the characters JSON
        /// doubles.
        static func largestSnapshot() throws -> [UInt8] {
            let yaml = try String(contentsOf: DeploySite.deployFolder.appendingPathComponent("gateway.yaml"), encoding: .utf8)
            let line = try #require(yaml.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("max_queue:") })
            let maxQueue = try #require(Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)))
            let accid = String(repeating: "\"", count: PlayerText.maxAccountBytes)
            let nick = String(repeating: "\\", count: PlayerRequest.maxNickBytes)
            let snapshot = QueueSnapshot(
                machine: "m1", seq: .max, state: .awaitingResult, online: true, paused: false, suspect: true,
                player: CurrentPlayer(accid: accid, provider: "generic", nick: nick, session: UUID().uuidString, deadline: "2026-11-21T10:00:30Z"),
                waiting: Array(repeating: WaitingPlayer(accid: accid, provider: "generic", nick: nick), count: maxQueue))
            return snapshot.encoded()
        }

        @Test("max_packet_size: the gateway's largest snapshot goes through; a larger publish reaches no one and costs its sender the connection")
        func packetSizeLimit() async throws {
            let limit = try DeploySite.maxPacketSize()
            let snapshot = try Self.largestSnapshot()
            // The PUBLISH around it: fixed header (5), topic (2 + length),
            // packet id (2), MQTT v5 properties (a message expiry: 6).
            let topic = "claw/m1/queue"
            #expect(5 + 2 + topic.utf8.count + 2 + 6 + snapshot.count <= limit, "the largest snapshot is \(snapshot.count) bytes")
            #expect(limit <= 256 * 1024, "a limit of \(limit) bytes lets a PC push that much at the gateway")

            try await DeploySite.with { site in
                let gateway = try site.client("gateway", user: "gateway", subscribe: ["claw/#"])
                let observer = try site.client("observer", user: "observer", subscribe: ["claw/#"])
                let m1 = try site.client("m1-pc", user: "m1")
                try await eventually("the gateway, the observer and m1 to connect") {
                    gateway.isConnected && observer.isConnected && m1.isConnected
                }
                try gateway.publish(topic, bytes: snapshot, retain: true)
                try await eventually("the observer to get the largest snapshot") {
                    observer.messages.contains { $0.topic == topic && $0.payload == snapshot }
                }

                // An MQTT v5 client is told the limit in its CONNACK: libmosquitto
                // refuses the publish itself, and the connection stays.
                let oversized = [UInt8](repeating: UInt8(ascii: "x"), count: limit)
                #expect(throws: MQTTError.self) { try m1.publish("claw/m1/result", bytes: oversized) }
                #expect(m1.isConnected)

                // A client that ignores it (MQTT 3.1.1 cannot even be told it) is
                // disconnected by the broker when the packet's header arrives; its
                // last will is published, as for any connection lost.
                let raw = try RawSocket(port: site.plainPort)
                let password = try #require(site.readPasswords()["m2"])
                raw.send(MQTT311Packet.connect(clientID: "m2-pc", username: "m2", password: password, will: ("claw/m2/state", "offline")))
                raw.send(MQTT311Packet.publish("claw/m2/result", payload: oversized))
                // Once the broker has closed the connection, a send fails (at
                // the latest the second after it).
                try await eventually("the broker to close the connection") { !raw.send(MQTT311Packet.ping) }
                // The barrier: the will comes after the broker handled the
                // oversized packet; had it been passed on, it would have come first.
                try await gateway.waitFor("claw/m2/state", "offline")
                #expect(!gateway.messages.contains { $0.topic == "claw/m2/result" })
                #expect(!observer.messages.contains { $0.topic == "claw/m2/result" })
                #expect(site.log.contains("Client m2 disconnected due to oversize packet."), "\(site.log)")
                // No one else is hurt.
                for client in [gateway, observer, m1] {
                    #expect(client.isConnected && client.client.connectCount == 1, "\(client.name)")
                }
            }
        }

        @Test("claw-gateway simulate --passwords: each PC logs in as its machine, beside the gateway, over the site's TLS")
        func simulatorWithSitePasswords() async throws {
            try await DeploySite.with { site in
                let config = try site.gatewayConfig(url: "mqtts://127.0.0.1:\(site.tlsPort)")
                let gateway = try site.client(
                    "claw-gateway-arcade-1", user: "gateway", port: site.tlsPort, tls: site.tls, subscribe: ["claw/#"])
                try await eventually("the gateway to connect") { gateway.isConnected }
                let simulator = try site.spawn(
                    ["simulate", "--config", config.file.path, "--passwords", site.file("passwords").path, "--ack-delay", "0s"],
                    environment: config.environment, log: "simulate.log")
                // Each PC subscribes before it says online, on one connection.
                try await gateway.waitFor("claw/m1/state", "online")
                try await gateway.waitFor("claw/m2/state", "online")

                try gateway.publish("claw/m1/control", bytes: WireMessage(.move, data: "left", serial: 41).encoded())
                try gateway.publish("claw/m2/camera", bytes: WireMessage(.camera, data: "2", serial: 42).encoded())
                let acked = { (topic: String, serial: Int64) in
                    gateway.messages.contains { message in
                        guard message.topic == topic, let ack = try? WireMessage.decode(message.payload) else { return false }
                        return ack.code == .ack && ack.serial == serial
                    }
                }
                try await eventually("each simulated PC to ack on its own topic") { acked("claw/m1/ack", 41) && acked("claw/m2/ack", 42) }
                #expect(site.log.contains(" as m1 (") && site.log.contains(" as m2 ("), "\(site.log)")
                #expect(!site.log.contains("closing old connection"))
                #expect(site.refusals == 0)
                #expect(gateway.isConnected && gateway.client.connectCount == 1)

                simulator.signal(SIGTERM)
                #expect(await simulator.wait(timeout: 10) == 0)
                try await gateway.waitFor("claw/m1/state", "offline")
                try await gateway.waitFor("claw/m2/state", "offline")

                // A passwords file that lacks a machine, or has a line it cannot
                // read, is refused before anything connects, without showing a password.
                let partial = site.directory.appendingPathComponent("partial-passwords")
                try "# only m1\nm1 \(try #require(site.readPasswords()["m1"]))\n".write(to: partial, atomically: true, encoding: .utf8)
                let missing = try GatewayBinary.run(
                    ["simulate", "--config", config.file.path, "--passwords", partial.path], environment: config.environment)
                #expect(missing.status == 78)
                #expect(missing.error.contains("no password for machine m2"), "\(missing.error)")
                // Only the machines simulated need one (--machine m1).
                let logins = try SimulateCommand.logins(of: ["m1"], in: partial.path)
                #expect(try logins["m1"]?.username == "m1" && logins["m1"]?.password == site.readPasswords()["m1"])
                try "m1 secret-one extra\n".write(to: partial, atomically: true, encoding: .utf8)
                let malformed = try GatewayBinary.run(
                    ["simulate", "--config", config.file.path, "--passwords", partial.path], environment: config.environment)
                #expect(malformed.status == 78)
                #expect(malformed.error.contains("line 1"), "\(malformed.error)")
                #expect(!malformed.error.contains("secret-one"))
            }
        }
    }
}
