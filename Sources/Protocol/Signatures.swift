import Crypto

/// The checksums of SPEC §5, and comparing them without leaking timing.
public enum Signatures {
    /// NetEase message copy: `CheckSum` = hex SHA1(AppSecret + MD5 + CurTime).
    public static func netEaseCopyChecksum(secret: String, md5: String, curTime: String) -> String {
        sha1Hex(secret + md5 + curTime)
    }

    /// NetEase server API: `CheckSum` = hex SHA1(AppSecret + Nonce + CurTime).
    public static func netEaseAPIChecksum(secret: String, nonce: String, curTime: String) -> String {
        sha1Hex(secret + nonce + curTime)
    }

    /// Generic webhook: hex HMAC-SHA256(secret, timestamp + "." + raw body).
    public static func genericSignature(secret: String, timestamp: String, body: some Collection<UInt8>) -> String {
        hmac(secret: secret, parts: [Array(timestamp.utf8), [UInt8(ascii: ".")]], body: body)
    }

    /// Generic replies: hex HMAC-SHA256(secret, "reply." + timestamp + "." +
    /// raw body). The prefix keeps a captured reply from ever verifying as a
    /// notification (SPEC §5).
    public static func genericReplySignature(secret: String, timestamp: String, body: some Collection<UInt8>) -> String {
        hmac(secret: secret, parts: [Array("reply.".utf8), Array(timestamp.utf8), [UInt8(ascii: ".")]], body: body)
    }

    /// Credit top-ups from the operator's payment service: hex
    /// HMAC-SHA256(`credits.topup_secret`, "topup." + timestamp + "." + raw
    /// body) (SPEC §11). The prefix keeps a top-up from ever verifying as
    /// anything else signed with the same scheme.
    public static func topupSignature(secret: String, timestamp: String, body: some Collection<UInt8>) -> String {
        hmac(secret: secret, parts: [Array("topup.".utf8), Array(timestamp.utf8), [UInt8(ascii: ".")]], body: body)
    }

    public static func sha256Hex(_ bytes: some Collection<UInt8>) -> String {
        hex(SHA256.hash(data: Array(bytes)))
    }

    private static func hmac(secret: String, parts: [[UInt8]], body: some Collection<UInt8>) -> String {
        var message = parts.flatMap { $0 }
        message.append(contentsOf: body)
        return hmacHex(key: Array(secret.utf8), message)
    }

    /// Hex HMAC-SHA256 of `message` with `key`.
    public static func hmacHex(key: [UInt8], _ message: [UInt8]) -> String {
        let code = HMAC<SHA256>.authenticationCode(for: message, using: SymmetricKey(data: key))
        return hex(code.withUnsafeBytes { Array($0) })
    }

    public static func md5Hex(_ bytes: some Collection<UInt8>) -> String {
        hex(Insecure.MD5.hash(data: Array(bytes)))
    }

    public static func sha1Hex(_ text: String) -> String {
        hex(Insecure.SHA1.hash(data: Array(text.utf8)))
    }

    /// Whether two hex strings are equal ignoring case, in time that depends
    /// only on their length.
    public static func hexEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        var difference: UInt8 = 0
        for index in x.indices {
            difference |= lowered(x[index]) ^ lowered(y[index])
        }
        return difference == 0
    }

    /// `A`–`F` (and other bytes with bit 0x40) folded to lower case; digits
    /// (0x30–0x39, bit 0x40 clear) unchanged. No branch on the data.
    private static func lowered(_ byte: UInt8) -> UInt8 {
        byte | ((byte >> 1) & 0x20)
    }

    /// Whether two secrets are equal, in time that depends only on their length.
    public static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        var difference: UInt8 = 0
        for index in x.indices { difference |= x[index] ^ y[index] }
        return difference == 0
    }

    public static func hex(_ bytes: some Sequence<UInt8>) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out: [UInt8] = []
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// A random hex string, e.g. a NetEase `Nonce`.
    public static func nonce(bytes: Int = 16) -> String {
        var generator = SystemRandomNumberGenerator()
        return hex((0..<bytes).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }
}
