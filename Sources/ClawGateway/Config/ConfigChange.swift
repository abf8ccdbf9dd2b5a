/// What a reload of `gateway.yaml` may apply while games go on, and what
/// waits for the next start (SPEC §13), from the running config and the
/// file's.
///
/// The machines and the game's settings are applied (``applied``); every
/// other section (the listen address, storage, the MQTT connection, the
/// secrets, the chain link, the app server) is kept as it runs and named in
/// ``needsRestart`` when the file changed it, as are the few keys of the
/// applied sections that the running gateway built its parts from.
struct ConfigChange: Sendable {
    /// The running config with what the reload applies.
    let applied: GatewayConfig
    /// The keys the file changed that apply only at the next start, as an
    /// operator edits them (`http`, `machines.m1.camera_topic`).
    let needsRestart: [String]

    init(running: GatewayConfig, file: GatewayConfig) {
        var later: [String] = []
        func compare<T: Equatable>(_ key: String, _ part: (GatewayConfig) -> T) {
            if part(running) != part(file) { later.append(key) }
        }
        compare("gateway") { $0.gateway }
        compare("mqtt") { $0.mqtt }
        compare("http") { $0.http }
        compare("im") { $0.im }
        compare("storage") { $0.storage }
        compare("chain") { $0.chain }
        compare("app_server") { $0.appServer }
        // The cameras recorded, and how, are what the gateway started recording.
        compare("evidence") { $0.evidence }
        compare("machines.cameras.stream") { config in
            config.evidence == nil ? [] : config.machines.map { machine in machine.cameras.map { "\(machine.id)/\($0.id) \($0.stream ?? "")" } }
        }
        // Prices apply (through the machines); whether games cost at all,
        // and how top-ups are taken, are what the gateway was built with.
        compare("credits") { config in config.credits.map { [$0.topupSecret, String($0.maxTopup), String($0.welcome)] } }
        // Whether wins make prizes, and how long addresses are kept, are
        // what the gateway was built with; a machine's prize and the low
        // mark apply (through the machines).
        compare("prizes") { config in config.prizes.map { [String($0.forgetAddress.seconds)] } }
        // Every player's budget is one bucket the arcade was built with.
        compare("game.max_commands_per_second") { $0.game.maxCommandsPerSecond }
        var applied = running
        applied.game = file.game
        applied.game.maxCommandsPerSecond = running.game.maxCommandsPerSecond
        let before = Dictionary(running.machines.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        applied.machines = file.machines.map { machine in
            var machine = machine
            // A machine's topics are subscribed and its chatroom mirrored as
            // it started; a new machine's chatroom waits for a start too.
            if let old = before[machine.id] {
                if old.cameraTopic != machine.cameraTopic { later.append("machines.\(machine.id).camera_topic") }
                if old.chatroomID != machine.chatroomID { later.append("machines.\(machine.id).chatroom_id") }
                machine.cameraTopic = old.cameraTopic
                machine.chatroomID = old.chatroomID
            } else if machine.chatroomID != nil, running.appServer != nil {
                later.append("machines.\(machine.id).chatroom_id")
            }
            if let credits = running.credits {
                machine.price = machine.price ?? credits.price
            } else {
                machine.price = nil
            }
            return machine
        }
        self.applied = applied
        needsRestart = later
    }
}
