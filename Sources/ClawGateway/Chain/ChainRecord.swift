import Foundation

/// A finished game as a site ships it to the chain (SPEC §10), one per
/// message on `<prefix>/<site>/records`: the §5 game shape, plus the site and
/// the site's sequence number, which is given in the SQLite transaction that
/// ends the game and never changes.
///
/// ```json
/// {"site":"arcade-1","seq":17,"id":"g-…","machine":"m1","player":"alice","provider":"netease",
///  "nick":"Alice","outcome":"won","offered_at":"…","started_at":"…","ended_at":"…","commands":9}
/// ```
struct ChainRecord: Codable, Sendable, Equatable {
    var site: String
    /// 1, 2, 3, … per site, in the order games ended; no gaps.
    var seq: Int64
    var game: GameRecord

    private enum CodingKeys: String, CodingKey {
        case site, seq
    }

    init(site: String, seq: Int64, game: GameRecord) {
        self.site = site
        self.seq = seq
        self.game = game
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        site = try container.decode(String.self, forKey: .site)
        seq = try container.decode(Int64.self, forKey: .seq)
        game = try GameRecord(from: decoder)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(site, forKey: .site)
        try container.encode(seq, forKey: .seq)
        try game.encode(to: encoder)
    }

    var payload: [UInt8] {
        (try? Array(Self.encoder.encode(self))) ?? []
    }

    static func decode(_ payload: [UInt8]) -> ChainRecord? {
        try? JSONDecoder().decode(ChainRecord.self, from: Data(payload))
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return encoder
    }()
}

/// The recorder's acknowledgement, retained on `<prefix>/<site>/records/ack`:
/// every record of the site up to and including `upto` is committed.
struct ChainRecordsAck: Codable, Sendable, Equatable {
    var upto: Int64

    var payload: [UInt8] {
        Array(#"{"upto":\#(upto)}"#.utf8)
    }

    static func decode(_ payload: [UInt8]) -> ChainRecordsAck? {
        try? JSONDecoder().decode(ChainRecordsAck.self, from: Data(payload))
    }
}
