/// `app_server:` of `gateway.yaml`: the gateway serves the NetEase demo's
/// app-server API (`tourist`, `room/list`) and mirrors each machine's queue
/// into its chatroom's queue (SPEC §8).
struct AppServerSettings: Sendable, Equatable {
    /// Where the routes go: `<prefix>/tourist`, `<prefix>/room/list`. The
    /// demo clients have `/dollsCatcher` compiled in.
    var pathPrefix: String = "/dollsCatcher"
    /// How long a tourist account stays valid after its last `tourist` call.
    var touristTTL: Duration = .seconds(7 * 24 * 3600)
    /// Who may come back as whom (SPEC §8).
    var sessions: Sessions = .secret

    /// What a client's `sid` is.
    enum Sessions: String, Sendable, Equatable, CaseIterable {
        /// A random secret of 128 bits, given once with the new account and
        /// kept only as a hash: the default.
        case secret
        /// The account id, as the demo's own server has it. Account ids are
        /// public (every chatroom member reads them in the queue), so whoever
        /// knows one logs in as that player: for the unchanged demo clients
        /// and free games only.
        case accid
    }

    static let keys = ["path_prefix", "tourist_ttl", "sessions"]

    /// Reads the section; the API calls NetEase's server API, so `im.netease` must be set.
    static func read(_ section: ConfigReader.Section, netease: NetEaseSettings?, machines: [MachineConfig]) -> AppServerSettings? {
        var settings = AppServerSettings()
        if let prefix = section.nonEmpty("path_prefix") {
            let allowed = prefix.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || "/-_.".unicodeScalars.contains($0)) }
            if !prefix.hasPrefix("/") || prefix.hasSuffix("/") || prefix.hasPrefix("/v1/") || prefix == "/v1" || !allowed {
                section.reader.report(
                    section.path("path_prefix"), "must start with /, not end with /, not be under /v1/, and hold only letters, digits, - _ . / (e.g. /dollsCatcher)")
            } else {
                settings.pathPrefix = prefix
            }
        }
        // SPEC §6 writes `7d`: days are taken here besides the durations every key takes.
        if let text = section.string("tourist_ttl"), text.hasSuffix("d"), let days = Int(text.dropLast()), (1...3650).contains(days) {
            settings.touristTTL = .seconds(days * 24 * 3600)
        } else {
            settings.touristTTL = section.duration("tourist_ttl", default: settings.touristTTL, atLeast: .seconds(60))
        }
        settings.sessions = section.choice("sessions", default: .secret, from: Sessions.allCases.map { ($0.rawValue, $0) })
        if netease == nil {
            section.reader.report(section.path, "needs im.netease: tourists are NetEase IM accounts and the rooms are YunXin chatrooms")
        }
        if !machines.isEmpty, !machines.contains(where: { $0.chatroomID != nil }) {
            section.reader.report(section.path, "lists no room: give at least one machine a chatroom_id")
        }
        var seen: [Int64: String] = [:]
        for machine in machines {
            guard let room = machine.chatroomID else { continue }
            if let first = seen[room] {
                section.reader.report(section.path, "chatroom_id \(room) is given to both \(first) and \(machine.id); each machine has its own chatroom")
            }
            seen[room] = seen[room] ?? machine.id
        }
        return netease == nil ? nil : settings
    }

    /// A machine's `chatroom_id`: a positive whole number, as YunXin numbers its chatrooms.
    static func chatroomID(_ machine: ConfigReader.Section) -> Int64? {
        guard let text = machine.string("chatroom_id") else { return nil }
        guard let room = Int64(text), room > 0 else {
            machine.reader.report(machine.path("chatroom_id"), "must be a YunXin chatroom id (a positive whole number), not \"\(text)\"")
            return nil
        }
        return room
    }
}
