import Foundation
import Protocol

/// One POST of NetEase's message copy (抄送), checked and read (SPEC §5).
///
/// The body is a JSON object whose fields are strings (NetEase sends some as
/// numbers too, e.g. `eventType`, which is accepted either way).
enum NetEaseCopy: Equatable {
    /// The correctly signed `{}` NetEase sends when the callback address is configured.
    case addressCheck
    /// A custom peer-to-peer notification: a player's command.
    case notification(from: String, to: String, attach: String, messageID: String?)
    /// Any other event NetEase copies (chat messages, logins, …): answered 200 and ignored.
    case other(eventType: String)

    /// Why a copy was refused, with the HTTP status to answer.
    struct Refusal: Error, Equatable {
        enum Kind: Equatable { case unauthorized, malformed }
        var kind: Kind
        var message: String
    }

    /// The headers ``read(body:header:settings:now:)`` looks at, lower-case.
    static let headerNames: Set<String> = ["md5", "checksum", "curtime", "appkey"]

    /// Checks the headers against the raw body and the app's secret, then
    /// reads the body; with when NetEase stamped the copy (its `CurTime`):
    /// how old it is when it comes (SPEC §13).
    ///
    /// - Parameters:
    ///   - header: header lookup by lower-case name (``headerNames``).
    ///   - now: the current wall time, for the `CurTime` window.
    static func read(
        body: [UInt8], header: (String) -> String?, settings: NetEaseSettings, now: Date
    ) throws(Refusal) -> (copy: NetEaseCopy, sent: Date) {
        guard let md5 = header("md5"), let checksum = header("checksum"), let curTime = header("curtime") else {
            throw Refusal(kind: .unauthorized, message: "The MD5, CheckSum and CurTime headers are required.")
        }
        if let appKey = header("appkey"), !Signatures.constantTimeEqual(appKey, settings.appKey) {
            throw Refusal(kind: .unauthorized, message: "AppKey is not this gateway's app key.")
        }
        guard Signatures.hexEqual(md5, Signatures.md5Hex(body)) else {
            throw Refusal(kind: .unauthorized, message: "MD5 does not match the body.")
        }
        let expected = Signatures.netEaseCopyChecksum(secret: settings.appSecret, md5: md5, curTime: curTime)
        guard Signatures.hexEqual(checksum, expected) else {
            throw Refusal(kind: .unauthorized, message: "CheckSum does not match; check im.netease.app_secret.")
        }
        guard let sent = ClockSkew.date(fromCurTime: curTime) else {
            throw Refusal(kind: .unauthorized, message: "CurTime must be a Unix time in seconds or milliseconds.")
        }
        guard ClockSkew.within(settings.maxClockSkew, sent: sent, now: now) else {
            throw Refusal(kind: .unauthorized, message: "CurTime is outside the allowed clock skew; check the clocks.")
        }
        return (try parse(body), sent)
    }

    /// Reads a body whose signature was checked.
    static func parse(_ body: [UInt8]) throws(Refusal) -> NetEaseCopy {
        let fields: [JSONField]
        do throws(JSONReadError) {
            fields = try JSONObjectReader.fields(in: body)
        } catch where error.reason == .notAnObject {
            throw Refusal(kind: .malformed, message: "The body must be a JSON object.")
        } catch {
            throw Refusal(kind: .malformed, message: "The body is not valid JSON (\(error.summary)).")
        }
        if fields.isEmpty { return .addressCheck }
        /// A field as text: a string, or a number as written; the first of a repeated key.
        func text(_ key: String) -> String? {
            switch fields.first(where: { $0.key == key })?.value {
            case .string(let string): string
            case .number(let number): number.int64.map(String.init) ?? number.text
            default: nil
            }
        }
        let eventType = text("eventType") ?? ""
        guard eventType == "1", text("msgType") == "CUSTOM_P2P_MSG" || text("convType") == "CUSTOM_PERSON" else {
            return .other(eventType: eventType)
        }
        guard let from = text("fromAccount"), let to = text("to"), let attach = text("attach") else {
            throw Refusal(kind: .malformed, message: "A custom notification needs fromAccount, to and attach.")
        }
        return .notification(from: from, to: to, attach: attach, messageID: text("msgidServer"))
    }
}

/// Timestamps of signed requests.
enum ClockSkew {
    /// NetEase's `CurTime` is in milliseconds on the copy and in seconds on
    /// the server API; anything past the year 5138 in seconds is milliseconds.
    static func date(fromCurTime text: String) -> Date? {
        guard let value = Int64(text) ?? Int64(text.trimmingCharacters(in: .whitespaces)), value > 0 else { return nil }
        return Date(timeIntervalSince1970: value >= 100_000_000_000 ? Double(value) / 1000 : Double(value))
    }

    static func within(_ skew: Duration, sent: Date, now: Date) -> Bool {
        abs(sent.timeIntervalSince(now)) <= skew.seconds
    }
}
