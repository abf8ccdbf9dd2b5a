import Foundation

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
struct ChainCopy: Codable, Sendable, Equatable {
    /// Unique per router and copy; the site's receipt names it.
    var id: String
    /// Which ingress the copy came in through: `netease` or `generic`.
    var provider: String
    /// When the router received the copy, Unix milliseconds (its wall clock).
    var receivedMS: Int64
    /// After this (Unix milliseconds) the router has answered the IM service
    /// 5xx or is about to: a site that gets the copy later drops it, so that a
    /// copy the IM service was told failed never plays (it comes again).
    /// Nil from a router that sets none: then only `chain.inbox_max_age` applies.
    var deadlineMS: Int64?
    /// The headers the ingress verifies, by lower-case name.
    var headers: [String: String]
    var body: [UInt8]

    enum CodingKeys: String, CodingKey {
        case id, provider, headers, body
        case receivedMS = "received_ms"
        case deadlineMS = "deadline_ms"
    }

    init(id: String, provider: String, received: Date, deadline: Date? = nil, headers: [String: String], body: [UInt8]) {
        self.id = id
        self.provider = provider
        receivedMS = Self.milliseconds(received)
        deadlineMS = deadline.map(Self.milliseconds)
        self.headers = headers
        self.body = body
    }

    init(from decoder: any Decoder) throws {
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
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(provider, forKey: .provider)
        try container.encode(receivedMS, forKey: .receivedMS)
        try container.encodeIfPresent(deadlineMS, forKey: .deadlineMS)
        try container.encode(headers, forKey: .headers)
        try container.encode(Data(body).base64EncodedString(), forKey: .body)
    }

    /// The copy's age at `now`; negative when the router's clock is ahead.
    func age(at now: Date) -> Duration {
        .milliseconds(Self.milliseconds(now) - receivedMS)
    }

    /// Whether the router's deadline has passed at `now`.
    func isPastDeadline(at now: Date) -> Bool {
        guard let deadlineMS else { return false }
        return Self.milliseconds(now) > deadlineMS
    }

    private static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    var payload: [UInt8] { JSONCoding.encode(self) }

    static func decode(_ payload: [UInt8]) -> ChainCopy? {
        JSONCoding.decode(ChainCopy.self, from: payload)
    }
}

/// The site's receipt for a copy, on `<prefix>/<site>/inbox/ack`: the answer
/// its ingress gave, which the router passes on to the IM service as it is.
///
/// ```json
/// {"id":"r1-42","status":200,"body":"{\"code\":200}"}
/// ```
struct ChainReceipt: Codable, Sendable, Equatable {
    var id: String
    /// The HTTP status the site's ingress answered.
    var status: Int
    /// The site's answer body (JSON, as text).
    var body: String

    var payload: [UInt8] { JSONCoding.encode(self) }

    static func decode(_ payload: [UInt8]) -> ChainReceipt? {
        JSONCoding.decode(ChainReceipt.self, from: payload)
    }
}
