import Foundation

/// A finished game as a site ships it to the chain (SPEC §10), one per
/// message on `<prefix>/<site>/records`: the §5 game shape, plus the site,
/// the epoch of the site's SQLite file and the site's sequence number in
/// it, which is given in the SQLite transaction that ends the game and
/// never changes.
///
/// ```json
/// {"site":"arcade-1","epoch":"3f…","seq":17,"id":"g-…","machine":"m1","player":"alice","provider":"netease",
///  "nick":"Alice","outcome":"won","offered_at":"…","started_at":"…","ended_at":"…","commands":9}
/// ```
struct ChainRecord: Codable, Sendable, Equatable {
    var site: String
    /// The site file's epoch: a file put in the place of another starts at 1 again, in an epoch of its own.
    var epoch: String
    /// 1, 2, 3, … per site and epoch, in the order games ended; no gaps.
    var seq: Int64
    var game: GameRecord

    private enum CodingKeys: String, CodingKey {
        case site, epoch, seq
    }

    init(site: String, epoch: String, seq: Int64, game: GameRecord) {
        self.site = site
        self.epoch = epoch
        self.seq = seq
        self.game = game
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        site = try container.decode(String.self, forKey: .site)
        // A site of before epochs: its one numbering is the epoch "".
        epoch = try container.decodeIfPresent(String.self, forKey: .epoch) ?? ""
        seq = try container.decode(Int64.self, forKey: .seq)
        game = try GameRecord(from: decoder)
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(site, forKey: .site)
        try container.encode(epoch, forKey: .epoch)
        try container.encode(seq, forKey: .seq)
        try game.encode(to: encoder)
    }

    /// Where a record that does not decode stands, when it says so: its
    /// epoch and sequence number, so that it can be set aside in its place.
    static func place(of payload: [UInt8]) -> (epoch: String, seq: Int64)? {
        guard let object = try? JSONSerialization.jsonObject(with: Data(payload)) as? [String: Any],
            let seq = (object["seq"] as? NSNumber)?.int64Value, seq >= 1
        else { return nil }
        let epoch = object["epoch"] as? String ?? ""
        guard epoch.utf8.count <= ValidRecord.maxEpochBytes else { return nil }
        return (epoch, seq)
    }

    var payload: [UInt8] { JSONCoding.encode(self) }

    static func decode(_ payload: [UInt8]) -> ChainRecord? {
        JSONCoding.decode(ChainRecord.self, from: payload)
    }
}

/// The recorder's acknowledgement, retained on `<prefix>/<site>/records/ack`:
/// every record of the site's epoch up to and including `upto` is
/// committed (or set aside, for a record the database cannot hold).
struct ChainRecordsAck: Codable, Sendable, Equatable {
    var epoch: String
    var upto: Int64

    init(epoch: String, upto: Int64) {
        self.epoch = epoch
        self.upto = upto
    }

    private enum CodingKeys: String, CodingKey {
        case epoch, upto
    }

    init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        epoch = try container.decodeIfPresent(String.self, forKey: .epoch) ?? ""
        upto = try container.decode(Int64.self, forKey: .upto)
    }

    var payload: [UInt8] { JSONCoding.encode(self) }

    static func decode(_ payload: [UInt8]) -> ChainRecordsAck? {
        JSONCoding.decode(ChainRecordsAck.self, from: payload)
    }
}
