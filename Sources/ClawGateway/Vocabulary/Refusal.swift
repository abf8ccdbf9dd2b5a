import HTTPTypes
import Hummingbird
import Protocol

/// What the gateway refuses, wherever it refuses it: a stable code, a
/// sentence that says what to do, and the HTTP status an HTTP caller gets.
/// A player's notification refused by the game is a ``WireError`` (command 9
/// to the player); ``init(_:)`` gives it its HTTP status for the generic
/// webhook, so the wire and every route answer from one table.
///
/// Every 4xx and 5xx body is `{"code","message"}`: routes throw a refusal
/// (``JSONErrorMiddleware`` answers it), the ingress and its fast path
/// answer with ``IngressAnswer/error(_:)``.
struct Refusal: Error, Sendable, Equatable {
    var status: HTTPResponse.Status
    var code: String
    var message: String
    /// Seconds after which trying again may succeed (`Retry-After`).
    var retryAfter: Int?

    init(_ status: HTTPResponse.Status, code: String, _ message: String, retryAfter: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
    }

    /// A game's refusal of a player's notification, for an HTTP caller:
    /// nil for the refusals the generic webhook answers 200
    /// `{"result":"rejected"}` (the request was fine, the game said no).
    init?(_ error: WireError) {
        guard let status = Self.httpStatus(of: error.code) else { return nil }
        self.init(status, code: error.code.rawValue, error.message)
    }

    /// The HTTP status of a wire error code, where it is an HTTP error.
    static func httpStatus(of code: ErrorCode) -> HTTPResponse.Status? {
        switch code {
        case .invalidPayload, .unknownCommand: .unprocessableContent
        case .unknownMachine: .notFound
        case .rateLimited: .tooManyRequests
        default: nil
        }
    }

    /// `{"code","message"}`.
    var body: [UInt8] {
        JSONObjectWriter.object([("code", .string(code)), ("message", .string(message))])
    }
}

// MARK: What is refused

extension Refusal {
    static func unknownMachine(_ id: String) -> Refusal {
        Refusal(.notFound, code: ErrorCode.unknownMachine.rawValue, "There is no machine \"\(id)\" here.")
    }

    static func badParameter(_ name: String, _ rule: String) -> Refusal {
        Refusal(.badRequest, code: "bad_request", "\(name) \(rule).")
    }

    static func badRequest(_ message: String) -> Refusal {
        Refusal(.badRequest, code: "bad_request", message)
    }

    /// A signature or checksum that does not hold.
    static func badSignature(_ message: String) -> Refusal {
        Refusal(.unauthorized, code: "unauthorized", message)
    }

    /// `Host` names another site. The name is not echoed: it is the
    /// visitor's browser that reads the answer.
    static let misdirected = Refusal(
        .misdirectedRequest, code: "unknown_host",
        "This gateway does not answer to that Host; open it by its own address, or add the name to http.allowed_hosts.")

    /// Too many wrong tokens from this address.
    static func throttled(retryAfter seconds: Int) -> Refusal {
        Refusal(
            .tooManyRequests, code: "too_many_failures",
            "Too many wrong tokens from this address; try again in \(seconds) s with the right one.", retryAfter: seconds)
    }

    static func unavailable(_ message: String) -> Refusal {
        Refusal(.serviceUnavailable, code: ErrorCode.gatewayUnavailable.rawValue, message)
    }

    static func notReady(_ reasons: [String]) -> Refusal {
        Refusal(.serviceUnavailable, code: "not_ready", reasons.joined(separator: "; "))
    }

    /// A body over ``JSONResponse/maxBody``: the fast path's answer and the router's alike.
    static let payloadTooLarge = Refusal(
        .contentTooLarge, code: "payload_too_large", "Bodies may be at most \(JSONResponse.maxBody) bytes.")

    static let noRoute = Refusal(.notFound, code: "not_found", "No such route.")

    static let wrongMethod = Refusal(.methodNotAllowed, code: "method_not_allowed", "This route does not take that method.")

    static let failed = Refusal(.internalServerError, code: "internal_error", "The gateway failed to handle the request.")
}
