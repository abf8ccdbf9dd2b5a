import Foundation
import Logging
import Protocol

/// A request of one of the ingresses, verified and read (SPEC §5): what the
/// site's ``Ingress`` and the chain's router (``RouterRoutes``) both start
/// from. One reading, one set of refusal sentences: the router checks a copy
/// exactly as the site it goes to will check it again.
enum IngressRequest: Sendable, Equatable {
    /// NetEase's correctly signed `{}`, sent when the callback address is configured.
    case addressCheck
    /// An event NetEase copies that is no player's command (chat, logins, …).
    case otherEvent
    case notification(IncomingNotification)
}

/// A player's notification as it came, verified.
struct IncomingNotification: Sendable, Equatable {
    /// `netease` or `generic`.
    var provider: String
    var from: String
    var to: String
    /// The wire JSON the player sent.
    var attach: [UInt8]
    /// When the sender stamped it (NetEase's `CurTime`, the generic `X-Claw-Timestamp`).
    var sent: Date
    var source: Source

    /// How it came, and so how it is checked against repeats and answered.
    enum Source: Sendable, Equatable {
        /// NetEase's copy, of every account of the app: answered by its
        /// status alone. `msgidServer`: the IM service's duplicates share it.
        case copy(messageID: String?)
        /// The signed generic webhook: its signature and timestamp are what its replay guard keeps.
        case webhook(ReplayKey)
    }

    struct ReplayKey: Sendable, Equatable {
        var signature: String
        var timestamp: Int64
    }
}

/// An ingress request refused before it was read: the answer, and why.
struct IngressRefusal: ShapedError, Sendable, Equatable {
    enum Reason: String, Sendable {
        /// A bad signature, checksum, app key or timestamp: 401.
        case unauthorized
        /// Signed, but not what the provider sends: 400.
        case malformed
    }

    var provider: String
    var reason: Reason
    var refusal: Refusal

    /// The refusal log's kind (a constant, never text from the request).
    var logKind: String { "\(provider).\(reason.rawValue)" }

    /// The caller's `{"code","message"}`, on the log line too.
    var shape: ErrorShape { refusal.shape }

    /// The refusal log's line: `NetEase copy refused`, `Generic notification refused`.
    var logMessage: Logger.Message {
        provider == "netease" ? "NetEase copy refused" : "Generic notification refused"
    }
}

extension Ingress.Route {
    var provider: String {
        switch self {
        case .netease: "netease"
        case .generic: "generic"
        }
    }

    /// Verifies and reads a request of this route.
    /// - Parameters:
    ///   - header: header lookup by lower-case name (``headerNames``).
    ///   - now: the wall time, for the signed timestamp's window.
    func read(body: [UInt8], header: (String) -> String?, now: Date) throws(IngressRefusal) -> IngressRequest {
        switch self {
        case .netease(let settings):
            let copy: NetEaseCopy
            let sent: Date
            do throws(NetEaseCopy.Refusal) {
                (copy, sent) = try NetEaseCopy.read(body: body, header: header, settings: settings, now: now)
            } catch {
                let unauthorized = error.kind == .unauthorized
                throw IngressRefusal(
                    provider: provider, reason: unauthorized ? .unauthorized : .malformed,
                    refusal: unauthorized ? .badSignature(error.message) : .badRequest(error.message))
            }
            switch copy {
            case .addressCheck:
                return .addressCheck
            case .other:
                return .otherEvent
            case .notification(let from, let to, let attach, let messageID):
                return .notification(
                    IncomingNotification(
                        provider: provider, from: from, to: to, attach: Array(attach.utf8), sent: sent, source: .copy(messageID: messageID)))
            }
        case .generic(let settings):
            let key: IncomingNotification.ReplayKey
            do throws(Refusal) {
                let (signature, timestamp) = try Ingress.verifyGeneric(body: body, header: header, settings: settings, now: now)
                key = .init(signature: signature, timestamp: timestamp)
            } catch {
                throw IngressRefusal(provider: provider, reason: .unauthorized, refusal: error)
            }
            guard let envelope = GenericEnvelope.decode(body) else {
                throw IngressRefusal(
                    provider: provider, reason: .malformed,
                    refusal: .badRequest(#"The body must be a JSON object {"from":string,"to":string,"attach":string or object}."#))
            }
            return .notification(
                IncomingNotification(
                    provider: provider, from: envelope.from, to: envelope.to, attach: envelope.attach,
                    sent: Date(timeIntervalSince1970: Double(key.timestamp)), source: .webhook(key)))
        }
    }
}
