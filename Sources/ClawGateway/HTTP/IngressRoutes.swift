import Foundation
import Hummingbird
import Logging
import Protocol

/// The ways players' notifications come in: NetEase's message copy and the
/// signed generic webhook (SPEC §5). Both hand the notification to the
/// arcade and answer as soon as what it changed is durable: nothing here
/// waits on MQTT or on an IM API, and a move waits on nothing at all.
struct IngressRoutes<Context: RequestContext>: Sendable {
    let arcade: Arcade
    let im: IMSettings
    let recentMessages: RecentIDs
    let logger: Logger
    let now: @Sendable () -> Date

    func add(to router: Router<Context>) {
        if let netease = im.netease {
            router.post(RouterPath(netease.callbackPath)) { request, _ in
                try await neteaseCopy(request, settings: netease)
            }
        }
        if let generic = im.generic {
            router.post("/v1/notifications") { request, _ in
                try await genericNotification(request, settings: generic)
            }
        }
    }

    // MARK: NetEase

    private func neteaseCopy(_ request: Request, settings: NetEaseSettings) async throws -> Response {
        var request = request
        let body = Array(try await request.collectBody(upTo: JSONResponse.maxBody).readableBytesView)
        let copy: NetEaseCopy
        do {
            copy = try NetEaseCopy.read(body: body, header: request.header, settings: settings, now: now())
        } catch {
            GatewayMetrics.notification(provider: "netease", result: error.kind == .unauthorized ? "unauthorized" : "malformed")
            logger.warning("NetEase copy refused", metadata: ["http.reason": .string(error.message)])
            return error.kind == .unauthorized
                ? JSONResponse.error(.unauthorized, code: "unauthorized", error.message)
                : JSONResponse.error(.badRequest, code: "bad_request", error.message)
        }
        switch copy {
        case .addressCheck:
            GatewayMetrics.notification(provider: "netease", result: "address_check")
        case .other:
            GatewayMetrics.notification(provider: "netease", result: "ignored")
        case .notification(let from, let to, let attach, let messageID):
            if let messageID, !recentMessages.insert(messageID) {
                GatewayMetrics.notification(provider: "netease", result: "duplicate")
            } else if arcade.machine(to) == nil {
                // Other accounts of the app are copied too; they are not this site's machines.
                GatewayMetrics.notification(provider: "netease", result: ErrorCode.unknownMachine.rawValue)
            } else {
                let outcome = await arcade.handle(PlayerNotification(from: from, to: to, attach: Array(attach.utf8), provider: "netease"))
                GatewayMetrics.notification(provider: "netease", result: outcome.metricLabel)
            }
        }
        return Self.copyAccepted
    }

    /// NetEase reads only the status; the body is the same for every copy.
    private static var copyAccepted: Response {
        Response(
            status: .ok, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(string: #"{"code":200}"#)))
    }

    // MARK: Generic

    private func genericNotification(_ request: Request, settings: GenericSettings) async throws -> Response {
        var request = request
        let body = Array(try await request.collectBody(upTo: JSONResponse.maxBody).readableBytesView)
        guard let timestamp = request.header(GenericEnvelope.timestampHeader),
            let signature = request.header(GenericEnvelope.signatureHeader)
        else {
            GatewayMetrics.notification(provider: "generic", result: "unauthorized")
            return JSONResponse.error(
                .unauthorized, code: "unauthorized", "The \(GenericEnvelope.timestampHeader) and \(GenericEnvelope.signatureHeader) headers are required.")
        }
        let expected = Signatures.genericSignature(secret: settings.secret, timestamp: timestamp, body: body)
        guard Signatures.hexEqual(signature, expected) else {
            GatewayMetrics.notification(provider: "generic", result: "unauthorized")
            return JSONResponse.error(.unauthorized, code: "unauthorized", "The signature does not match; check im.generic.secret.")
        }
        guard let seconds = Int64(timestamp),
            ClockSkew.within(settings.maxClockSkew, sent: Date(timeIntervalSince1970: Double(seconds)), now: now())
        else {
            GatewayMetrics.notification(provider: "generic", result: "unauthorized")
            return JSONResponse.error(
                .unauthorized, code: "unauthorized", "\(GenericEnvelope.timestampHeader) must be Unix seconds within the allowed clock skew.")
        }
        guard let envelope = GenericEnvelope.decode(body) else {
            GatewayMetrics.notification(provider: "generic", result: "malformed")
            return JSONResponse.error(
                .badRequest, code: "bad_request", #"The body must be a JSON object {"from":string,"to":string,"attach":string or object}."#)
        }
        let outcome = await arcade.handle(
            PlayerNotification(from: envelope.from, to: envelope.to, attach: envelope.attach, provider: "generic"))
        GatewayMetrics.notification(provider: "generic", result: outcome.metricLabel)
        return Self.answer(outcome)
    }

    /// The generic webhook's answer: what happened, or why not.
    static func answer(_ outcome: RequestOutcome) -> Response {
        switch outcome {
        case .rejected(let error):
            switch error.code {
            case .invalidPayload, .unknownCommand:
                return JSONResponse.error(.unprocessableContent, code: error.code.rawValue, error.message)
            case .unknownMachine:
                return JSONResponse.error(.notFound, code: error.code.rawValue, error.message)
            default:
                return JSONResponse.make(.ok, NotificationAnswer(result: "rejected", code: error.code.rawValue, message: error.message))
            }
        case .forwarded(let serial):
            return JSONResponse.make(.ok, NotificationAnswer(result: "forwarded", serial: serial))
        case .queued(let position, let length):
            return JSONResponse.make(.ok, NotificationAnswer(result: "queued", position: position, length: length))
        case .offered(let session):
            return JSONResponse.make(.ok, NotificationAnswer(result: "offered", session: session))
        case .accepted(let session):
            return JSONResponse.make(.ok, NotificationAnswer(result: "accepted", session: session))
        case .declined:
            return JSONResponse.make(.ok, NotificationAnswer(result: "declined"))
        case .left:
            return JSONResponse.make(.ok, NotificationAnswer(result: "left"))
        case .ignored(let reason):
            return JSONResponse.make(.ok, NotificationAnswer(result: "ignored", message: reason))
        }
    }
}

/// The generic webhook's 200 answer.
struct NotificationAnswer: Codable, Equatable {
    var result: String
    var code: String?
    var message: String?
    var serial: Int64?
    var position: Int?
    var length: Int?
    var session: String?
}

extension RequestOutcome {
    /// The `result` label of `claw_notifications_total`.
    var metricLabel: String {
        switch self {
        case .forwarded: "forwarded"
        case .queued: "queued"
        case .offered: "offered"
        case .accepted: "accepted"
        case .declined: "declined"
        case .left: "left"
        case .ignored: "ignored"
        case .rejected(let error): error.code.rawValue
        }
    }
}

extension Request {
    /// A header by name, case-insensitive.
    func header(_ name: String) -> String? {
        let wanted = name.lowercased()
        return headers.first { $0.name.canonicalName == wanted }?.value
    }
}
