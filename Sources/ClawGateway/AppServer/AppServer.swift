import AsyncHTTPClient
import Foundation
import Logging
import Protocol
import ServiceLifecycle

/// The NetEase demo's app server, served by the gateway (SPEC §8): the
/// tourist login, the room list with its background online counts, and the
/// chatroom queue mirror. Made from `app_server:` and `im.netease`.
final class AppServer: Sendable {
    let settings: AppServerSettings
    let tourists: Tourists
    let onlineCounts: OnlineCounts
    let mirror: ChatroomMirror

    init(settings: AppServerSettings, tourists: Tourists, onlineCounts: OnlineCounts, mirror: ChatroomMirror) {
        self.settings = settings
        self.tourists = tourists
        self.onlineCounts = onlineCounts
        self.mirror = mirror
    }

    /// The app server of `config`, or nil when it has no `app_server:`.
    static func make(
        config: GatewayConfig, store: GameStore, client: HTTPClient, clock: GameClock, wallets: Wallets? = nil, logger: Logger
    ) -> AppServer? {
        guard let settings = config.appServer, let netease = config.im.netease else { return nil }
        let api = NetEaseServerAPI(settings: netease, client: client, timeout: netease.replyTimeout)
        return AppServer(
            settings: settings,
            tourists: Tourists(
                store: store, accounts: api, ttl: settings.touristTTL, sessions: settings.sessions, clock: clock,
                wallets: wallets, logger: logger),
            onlineCounts: OnlineCounts(rooms: config.machines.compactMap(\.chatroomID), api: api, clock: clock, logger: logger),
            mirror: ChatroomMirror(config: config, api: api, clock: clock, logger: logger))
    }

    /// What runs beside the routes.
    var services: [any Service] { [onlineCounts, mirror, tourists] }

    /// Starts the mirror from the machines' state once the arcade exists.
    func attach(_ arcade: Arcade) {
        mirror.start { arcade.machine(at: $0)?.currentSnapshot() }
    }

    /// The `room/list` page: the arcade's machines that have a chatroom, as they are now.
    func rooms(limit: Int, offset: Int, machines: [Machine]) -> RoomList {
        let all = machines.map { ($0, $0.config) }.filter { $0.1.chatroomID != nil }
        let page = all.dropFirst(offset).prefix(limit).map { machine, config in
            RoomInfo(config, machine.currentSnapshot(), onlineUserCount: onlineCounts.count(room: config.chatroomID ?? 0))
        }
        return RoomList(total: all.count, list: Array(page))
    }
}

/// `data` of `room/list`: the page, and how many rooms there are in all.
struct RoomList: Encodable, Sendable {
    var total: Int
    var list: [RoomInfo]
}

/// One room as the demo clients read it (their `RoomInfo`): a field with no
/// value is left out, as the demo's server leaves out nulls.
struct RoomInfo: Encodable, Sendable, Equatable {
    var roomId: Int64
    var name: String
    var creator: String
    var rtmpPullUrl1: String?
    var rtmpPullUrl2: String?
    var httpPullUrl1: String?
    var httpPullUrl2: String?
    var hlsPullUrl1: String?
    var hlsPullUrl2: String?
    /// Open for play: online and not paused.
    var roomStatus: Bool
    /// 1 online, 0 offline, 2 paused (the demo's live channel states: idle, live, disabled).
    var liveStatus: Int
    var onlineUserCount: Int
    /// Players waiting, not counting the one offered or playing.
    var queueCount: Int
    /// Games left before the next full-power grab (SPEC §16), with `guarantee_after`.
    var playsUntilGuarantee: Int?

    /// The demo's own names, and SPEC §16's for the odds.
    enum CodingKeys: String, CodingKey {
        case roomId, name, creator, rtmpPullUrl1, rtmpPullUrl2, httpPullUrl1, httpPullUrl2, hlsPullUrl1, hlsPullUrl2
        case roomStatus, liveStatus, onlineUserCount, queueCount
        case playsUntilGuarantee = "plays_until_guarantee"
    }

    init(_ machine: MachineConfig, _ snapshot: QueueSnapshot, onlineUserCount: Int) {
        roomId = machine.chatroomID ?? 0
        name = machine.name
        creator = machine.imAccount
        let cameras = machine.cameras
        func camera(_ index: Int) -> CameraConfig? { cameras.indices.contains(index) ? cameras[index] : nil }
        rtmpPullUrl1 = camera(0)?.stream
        rtmpPullUrl2 = camera(1)?.stream
        httpPullUrl1 = camera(0)?.http
        httpPullUrl2 = camera(1)?.http
        hlsPullUrl1 = camera(0)?.hls
        hlsPullUrl2 = camera(1)?.hls
        // Paused, in maintenance (SPEC §12) or out of stock (SPEC §15): shown, but out of play.
        let outOfPlay = snapshot.paused || snapshot.state == .maintenance || snapshot.state == .outOfStock
        roomStatus = snapshot.online && !outOfPlay
        liveStatus = outOfPlay ? 2 : snapshot.online ? 1 : 0
        self.onlineUserCount = onlineUserCount
        queueCount = snapshot.length
        playsUntilGuarantee = snapshot.playsUntilGuarantee
    }
}
