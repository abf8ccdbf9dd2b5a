/// The recorder's word to a site about one of its players' prizes (SPEC
/// §15), on `<prefix>/<site>/tell`, QoS 1: in a chain the players' choices
/// and the shipping are the recorder's, and only a site speaks to players
/// (through its IM); the site tells the player command 15 with it.
///
/// ```json
/// {"provider":"netease","account":"alice","prize":"p-…","name":"Pikachu 30 cm","state":"shipped","tracking":"SF123"}
/// ```
public struct ChainPrizeNotice: Codable, Sendable, Equatable {
    public var provider: String
    public var account: String
    /// The prize's own id.
    public var prize: String
    public var name: String
    /// `to_ship`, `shipped`, `delivered` or `exchanged`.
    public var state: String
    public var tracking: String?
    /// After an exchange: the credits taken and the chain wallet's balance
    /// after them, for command 14.
    public var credits: Int64?
    public var balance: Int64?

    public init(
        provider: String, account: String, prize: String, name: String, state: String, tracking: String? = nil, credits: Int64? = nil,
        balance: Int64? = nil
    ) {
        self.provider = provider
        self.account = account
        self.prize = prize
        self.name = name
        self.state = state
        self.tracking = tracking
        self.credits = credits
        self.balance = balance
    }

    /// The longest text a notice may carry in any field: a site drops one over it.
    public static let maxFieldBytes = 512

    public var payload: [UInt8] { JSONCoding.encode(self) }

    public static func decode(_ payload: [UInt8]) -> ChainPrizeNotice? {
        guard let notice = JSONCoding.decode(ChainPrizeNotice.self, from: payload),
            [notice.provider, notice.account, notice.prize, notice.name, notice.state, notice.tracking ?? ""].allSatisfy({
                $0.utf8.count <= maxFieldBytes
            })
        else { return nil }
        return notice
    }
}
