import Logging
import Protocol

/// The whole of `gateway.yaml`, typed and validated (SPEC §6).
///
/// Values here are final: defaults applied, `${VAR}` substituted, relative file
/// paths resolved against the config file's folder.
struct GatewayConfig: Sendable {
    var gateway: GatewaySettings
    var mqtt: MQTTSettings
    var http: HTTPSettings
    var im: IMSettings
    var game: GameSettings
    var storage: StorageSettings
    var machines: [MachineConfig]
    /// Set when this site is one arcade of a chain (SPEC §9).
    var chain: ChainSettings? = nil
    /// Set when the gateway serves the NetEase demo's app-server API (SPEC §8).
    var appServer: AppServerSettings? = nil
    /// Set when games cost credits (SPEC §11).
    var credits: CreditsSettings? = nil
    /// Set when every game's video is kept (SPEC §14).
    var evidence: EvidenceSettings? = nil
    /// Set when wins make prizes owed to their players (SPEC §15).
    var prizes: PrizeSettings? = nil

    var topics: Topics { Topics(prefix: mqtt.topicPrefix) }
}

struct GatewaySettings: Sendable, Equatable {
    var id: String
    var logLevel: Logger.Level
    /// How often `claw/<m>/stats` and `claw/gateway/stats` go out; zero: never.
    var statsInterval: Duration = .seconds(3)
}

struct MQTTSettings: Sendable, Equatable {
    var url: BrokerURL
    var clientID: String
    var username: String?
    var password: String?
    /// Seconds between PINGREQs when nothing else is sent.
    var keepalive: Int
    var topicPrefix: String
    var tls: TLSSettings?
}

/// `mqtt://host[:port]` or `mqtts://host[:port]`.
struct BrokerURL: Sendable, Equatable, CustomStringConvertible {
    var host: String
    var port: Int
    var usesTLS: Bool

    var description: String { "\(usesTLS ? "mqtts" : "mqtt")://\(host.contains(":") ? "[\(host)]" : host):\(port)" }
}

struct TLSSettings: Sendable, Equatable {
    /// The CA that signed the broker's certificate; nil means the system's CAs.
    var caFile: String?
    var certFile: String?
    var keyFile: String?
}

struct HTTPSettings: Sendable, Equatable {
    var host: String
    var port: Int
    /// Enables the admin routes; compared in constant time.
    var adminToken: String?
    /// When set, the read API, the stream, metrics and the page need it (or
    /// the admin token) as a Bearer token.
    var readToken: String?
    /// Operators by name (SPEC §16), beside the two tokens (``credentials``).
    var operators: [Operator] = []
    /// Host names (no port, lower case) that the read, page and admin routes
    /// answer besides the listen address and `localhost` (``AccessPolicy``).
    var allowedHosts: [String] = []
    /// How long a request may take to arrive, from its first byte to its last:
    /// a client trickling a request is cut off after this.
    var readTimeout: Duration = .seconds(10)
    /// Connections open at once; more are closed as they come.
    var maxConnections: Int = 1024
    /// Connections open at once from one client address (an IPv6 /64); more
    /// are closed as they come, so one client cannot take everyone's slots.
    var maxConnectionsPerClient: Int = 16
    /// How long a keep-alive connection may sit between requests.
    var idleTimeout: Duration = .seconds(60)
    /// The reverse proxies whose `Forwarded` or `X-Forwarded-For` names the
    /// client (SPEC §5); none by default: the peer is the client.
    var trustedProxies: TrustedProxies = .none
}

struct IMSettings: Sendable, Equatable {
    var netease: NetEaseSettings?
    var generic: GenericSettings?
}

struct NetEaseSettings: Sendable, Equatable {
    var appKey: String
    var appSecret: String
    var apiBase: String
    var callbackPath: String
    var maxClockSkew: Duration
    var replyTimeout: Duration
    var replyConcurrency: Int
}

struct GenericSettings: Sendable, Equatable {
    var secret: String
    /// Where replies to players are POSTed; nil logs them instead (local demo).
    var outboundURL: String?
    var maxClockSkew: Duration
    var replyTimeout: Duration
    var replyConcurrency: Int
}

struct GameSettings: Sendable, Equatable {
    var acceptTimeout: Duration = .seconds(10)
    var playTimeout: Duration = .seconds(30)
    var resultTimeout: Duration = .seconds(20)
    var ackTimeout: Duration = .seconds(3)
    var coinsPerGame: Int = 1
    var maxQueue: Int = 200
    var maxCommandsPerSecond: Int = 10
    var relayAcks: Bool = false
    /// Also publish a `command` event for every command forwarded and an
    /// `ack` event for every ack: several messages per move, for diagnosing
    /// a PC. They are counted in the metrics either way.
    var commandEvents: Bool = false
    /// Ack timeouts in a row before the machine is `suspect` and offers no
    /// new turn; 0 never.
    var suspectAfter: Int = 3
    /// How long a game survives its PC going offline; zero ends it at once.
    var offlineGrace: Duration = .seconds(10)
    /// A move, grab or camera switch older than this since the IM service
    /// stamped it is dropped, never played late (SPEC §13).
    var commandMaxAge: Duration = .seconds(2)
    /// `game.continue`: how long a player whose game ended `won` or `lost`
    /// has to take the machine again before the queue (SPEC §3); zero: no
    /// continues.
    var continueTimeout: Duration = .zero
    /// `game.max_continues`: continues in a row, at most.
    var maxContinues: Int = 3
}

extension GameSettings {
    /// Whether an event of this type goes out on `claw/<m>/events`: the
    /// per-command ones only with `game.command_events`.
    func publishes(_ type: EventType) -> Bool {
        switch type {
        case .command, .ack: commandEvents
        default: true
        }
    }
}

struct StorageSettings: Sendable, Equatable {
    /// Absolute path of the SQLite file.
    var path: String
}

struct MachineConfig: Sendable, Equatable {
    var id: String
    var name: String
    /// The machine PC's IM account: NetEase's `to`, and `from` of replies.
    var imAccount: String
    var cameras: [CameraConfig]
    /// Where camera switches go; defaults to `<prefix>/<id>/camera`.
    var cameraTopic: String?
    /// The machine's YunXin chatroom: listed by the app-server API, its queue mirrored (SPEC §8).
    var chatroomID: Int64? = nil
    /// What its mainboard takes with every coin (SPEC §12).
    var settings = MachineSettings()
    /// What a game costs here in credits (SPEC §11): the machine's `price:`
    /// or `credits.price`; 0 free on this machine; nil: no `credits:`, every game free.
    var price: Int64? = nil
    /// What a win here makes (SPEC §15); nil: no prize (no `prizes:`, or
    /// none configured for this machine).
    var prize: MachinePrize? = nil

    var cameraIDs: [String] { cameras.map(\.id) }
}

struct CameraConfig: Sendable, Equatable {
    var id: String
    var stream: String?
    /// HTTP-FLV and HLS pull URLs of the same camera, for the app-server API's room list.
    var http: String? = nil
    var hls: String? = nil
}
