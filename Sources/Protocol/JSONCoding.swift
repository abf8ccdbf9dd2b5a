import Foundation

/// The one JSON encoding of everything written that is not the hand-written
/// wire format (``JSONObjectWriter``, for the hot path): HTTP answers, the
/// chain's messages, records. Keys sorted, so that the same value is always
/// the same bytes; slashes as they are.
public enum JSONCoding {
    public static func encode(_ value: some Encodable) -> [UInt8] {
        (try? Array(encoder.encode(value))) ?? Array("{}".utf8)
    }

    public static func decode<T: Decodable>(_ type: T.Type, from bytes: some Collection<UInt8>) -> T? {
        try? JSONDecoder().decode(type, from: Data(bytes))
    }

    private static var encoder: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}
