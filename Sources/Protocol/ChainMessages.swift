import Foundation

/// A site's topics on the chain's cluster, all under `<prefix>/<site>/` (SPEC §9).
public struct ChainTopics: Sendable, Equatable {
    public let base: String

    public init(prefix: String, site: String) {
        base = "\(prefix)/\(site)"
    }

    /// Every site's topics at once, for subscribing: the site level is `+`.
    public static func everySite(prefix: String) -> ChainTopics {
        ChainTopics(prefix: prefix, site: "+")
    }

    /// What follows `<prefix>/<site>/` in each of the chain's own topics.
    public enum Level: String, Sendable, CaseIterable {
        case inbox
        case inboxAck = "inbox/ack"
        case directory = "gateway/directory"
        case heartbeat = "gateway/heartbeat"
        case records
        case recordsAck = "records/ack"
        case wallet
        case walletAck = "wallet/ack"
        case tell
    }

    public func topic(_ level: Level) -> String { "\(base)/\(level.rawValue)" }

    /// Copies from the routers, and their beats.
    public var inbox: String { topic(.inbox) }
    /// The site's receipts for copies.
    public var inboxAck: String { topic(.inboxAck) }
    /// Retained: which machines (IM accounts) the site owns.
    public var directory: String { topic(.directory) }
    /// Every second while the site is up.
    public var heartbeat: String { topic(.heartbeat) }
    /// Finished games, for the recorder (SPEC §10).
    public var records: String { topic(.records) }
    /// Retained by the recorder: how far it has written.
    public var recordsAck: String { topic(.recordsAck) }
    /// The site's debits and refunds, for the chain's ledger (SPEC §11).
    public var wallet: String { topic(.wallet) }
    /// The recorder's answers to them.
    public var walletAck: String { topic(.walletAck) }
    /// The recorder's word for one of the site's players (a prize of theirs
    /// changed, SPEC §15), which the site passes on through its IM.
    public var tell: String { topic(.tell) }
    /// A machine's topic as the site's broker bridges it out (`<m>/queue`, `<m>/state`, …).
    public func machine(_ id: String, _ topic: MachineTopic) -> String { "\(base)/\(id)/\(topic.rawValue)" }

    /// The site level and what follows it of a topic under `prefix`; nil
    /// for a topic elsewhere, or whose site level is empty.
    public static func split(_ topic: String, prefix: String) -> (site: String, rest: String)? {
        guard topic.hasPrefix(prefix + "/") else { return nil }
        let tail = topic.dropFirst(prefix.count + 1)
        guard let slash = tail.firstIndex(of: "/"), slash != tail.startIndex else { return nil }
        return (String(tail[..<slash]), String(tail[tail.index(after: slash)...]))
    }

    /// The site of `<prefix>/<site>/<level>`, or nil for any other topic.
    public static func site(of topic: String, prefix: String, level: Level) -> String? {
        guard let (site, rest) = split(topic, prefix: prefix), rest == level.rawValue else { return nil }
        return site
    }
}

/// `<prefix>/<site>/gateway/directory`: what the routers learn ownership from.
public struct ChainDirectory: Codable, Sendable, Equatable {
    public struct Machine: Codable, Sendable, Equatable {
        public var id: String
        public var imAccount: String
        public var name: String
        /// What a game costs here (SPEC §11), when games cost credits: the
        /// price a router puts in the vouchers of this machine's accepts
        /// (SPEC §9), and so the most the chain's ledger debits for one.
        public var price: Int64?

        public init(id: String, imAccount: String, name: String, price: Int64? = nil) {
            self.id = id
            self.imAccount = imAccount
            self.name = name
            self.price = price
        }

        enum CodingKeys: String, CodingKey {
            case id, name, price
            case imAccount = "im_account"
        }
    }

    public var site: String
    public var machines: [Machine]

    public init(site: String, machines: [Machine]) {
        self.site = site
        self.machines = machines
    }
}

/// A copy as a router publishes it on the owning site's `inbox` (SPEC §9):
/// the request as it came (its body byte for byte, and the headers it is
/// verified with), an id for the receipt, and when the router received it.
///
/// ```json
/// {"id":"r1-42","provider":"netease","received_ms":1764051200123,"deadline_ms":1764051201023,
///  "headers":{"curtime":"1764051200","md5":"…","checksum":"…"},"body":"<base64>"}
/// ```
///
/// The body travels as base64: the site checks its MD5 or HMAC again, so not
/// one byte may change on the way.
public struct ChainCopy: Codable, Sendable, Equatable {
    /// Unique per router and copy; the site's receipt names it.
    public var id: String
    /// Which ingress the copy came in through: `netease` or `generic`.
    public var provider: String
    /// When the router received the copy, Unix milliseconds (its wall clock).
    public var receivedMS: Int64
    /// After this (Unix milliseconds) the router has answered the IM service
    /// 5xx or is about to: a site that gets the copy later drops it, so that a
    /// copy the IM service was told failed never plays (it comes again).
    /// Nil from a router that sets none: then only `chain.inbox_max_age` applies.
    public var deadlineMS: Int64?
    /// The headers the ingress verifies, by lower-case name.
    public var headers: [String: String]
    public var body: [UInt8]
    /// On an accept (12) of a machine whose games cost credits: the router's
    /// voucher for the game's debit (SPEC §9), which the site passes on to
    /// the chain's ledger.
    public var voucher: ChainVoucher?

    enum CodingKeys: String, CodingKey {
        case id, provider, headers, body, voucher
        case receivedMS = "received_ms"
        case deadlineMS = "deadline_ms"
    }

    public init(
        id: String, provider: String, received: Date, deadline: Date? = nil, headers: [String: String], body: [UInt8],
        voucher: ChainVoucher? = nil
    ) {
        self.id = id
        self.provider = provider
        receivedMS = Self.milliseconds(received)
        deadlineMS = deadline.map(Self.milliseconds)
        self.headers = headers
        self.body = body
        self.voucher = voucher
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(String.self, forKey: .id)
        provider = try container.decode(String.self, forKey: .provider)
        receivedMS = try container.decode(Int64.self, forKey: .receivedMS)
        deadlineMS = try container.decodeIfPresent(Int64.self, forKey: .deadlineMS)
        headers = try container.decode([String: String].self, forKey: .headers)
        guard let body = Data(base64Encoded: try container.decode(String.self, forKey: .body)) else {
            throw DecodingError.dataCorruptedError(forKey: .body, in: container, debugDescription: "body is not base64")
        }
        self.body = Array(body)
        voucher = try container.decodeIfPresent(ChainVoucher.self, forKey: .voucher)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(provider, forKey: .provider)
        try container.encode(receivedMS, forKey: .receivedMS)
        try container.encodeIfPresent(deadlineMS, forKey: .deadlineMS)
        try container.encode(headers, forKey: .headers)
        try container.encode(Data(body).base64EncodedString(), forKey: .body)
        try container.encodeIfPresent(voucher, forKey: .voucher)
    }

    /// The copy's age at `now`; negative when the router's clock is ahead.
    public func age(at now: Date) -> Duration {
        .milliseconds(Self.milliseconds(now) - receivedMS)
    }

    /// Whether the router's deadline has passed at `now`.
    public func isPastDeadline(at now: Date) -> Bool {
        guard let deadlineMS else { return false }
        return Self.milliseconds(now) > deadlineMS
    }

    public static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    public var payload: [UInt8] { JSONCoding.encode(self) }

    public static func decode(_ payload: [UInt8]) -> ChainCopy? {
        JSONCoding.decode(ChainCopy.self, from: payload)
    }
}

/// The site's receipt for a copy, on `<prefix>/<site>/inbox/ack`: the answer
/// its ingress gave, which the router passes on to the IM service as it is.
///
/// ```json
/// {"id":"r1-42","status":200,"body":"{\"code\":200}"}
/// ```
public struct ChainReceipt: Codable, Sendable, Equatable {
    public init(id: String, status: Int, body: String) {
        self.id = id
        self.status = status
        self.body = body
    }

    public var id: String
    /// The HTTP status the site's ingress answered.
    public var status: Int
    /// The site's answer body (JSON, as text).
    public var body: String

    public var payload: [UInt8] { JSONCoding.encode(self) }

    public static func decode(_ payload: [UInt8]) -> ChainReceipt? {
        JSONCoding.decode(ChainReceipt.self, from: payload)
    }
}

/// A finished game as a site ships it to the chain (SPEC §10), one per
/// message on `<prefix>/<site>/records`: the §5 game shape, plus the site,
/// the epoch of the site's SQLite file and the site's sequence number in
/// it, which is given in the SQLite transaction that ends the game (with
/// evidence kept, a started game's: the one that writes its clips, which
/// the record then carries) and never changes.
///
/// ```json
/// {"site":"arcade-1","epoch":"3f…","seq":17,"id":"g-…","machine":"m1","player":"alice","provider":"netease",
///  "nick":"Alice","outcome":"won","offered_at":"…","started_at":"…","ended_at":"…","commands":9}
/// ```
public struct ChainRecord: Codable, Sendable, Equatable {
    /// The longest epoch a record may carry.
    public static let maxEpochBytes = 64

    public var site: String
    /// The site file's epoch: a file put in the place of another starts at 1 again, in an epoch of its own.
    public var epoch: String
    /// 1, 2, 3, … per site and epoch, in the order records were complete; no gaps.
    public var seq: Int64
    public var game: GameRecord

    private enum CodingKeys: String, CodingKey {
        case site, epoch, seq
    }

    public init(site: String, epoch: String, seq: Int64, game: GameRecord) {
        self.site = site
        self.epoch = epoch
        self.seq = seq
        self.game = game
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        site = try container.decode(String.self, forKey: .site)
        // A site of before epochs: its one numbering is the epoch "".
        epoch = try container.decodeIfPresent(String.self, forKey: .epoch) ?? ""
        seq = try container.decode(Int64.self, forKey: .seq)
        game = try GameRecord(from: decoder)
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(site, forKey: .site)
        try container.encode(epoch, forKey: .epoch)
        try container.encode(seq, forKey: .seq)
        try game.encode(to: encoder)
    }

    /// Where a record that does not decode stands, when it says so: its
    /// epoch and sequence number, so that it can be set aside in its place.
    public static func place(of payload: [UInt8]) -> (epoch: String, seq: Int64)? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any],
            let seq = (object["seq"] as? NSNumber)?.int64Value, seq >= 1
        else { return nil }
        let epoch = object["epoch"] as? String ?? ""
        guard epoch.utf8.count <= Self.maxEpochBytes else { return nil }
        return (epoch, seq)
    }

    public var payload: [UInt8] { JSONCoding.encode(self) }

    public static func decode(_ payload: [UInt8]) -> ChainRecord? {
        JSONCoding.decode(ChainRecord.self, from: payload)
    }
}

/// The recorder's acknowledgement, retained on `<prefix>/<site>/records/ack`:
/// every record of the site's epoch up to and including `upto` is
/// committed (or set aside, for a record the database cannot hold).
public struct ChainRecordsAck: Codable, Sendable, Equatable {
    public var epoch: String
    public var upto: Int64

    public init(epoch: String, upto: Int64) {
        self.epoch = epoch
        self.upto = upto
    }

    private enum CodingKeys: String, CodingKey {
        case epoch, upto
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        epoch = try container.decodeIfPresent(String.self, forKey: .epoch) ?? ""
        upto = try container.decode(Int64.self, forKey: .upto)
    }

    public var payload: [UInt8] { JSONCoding.encode(self) }

    public static func decode(_ payload: [UInt8]) -> ChainRecordsAck? {
        JSONCoding.decode(ChainRecordsAck.self, from: payload)
    }
}
