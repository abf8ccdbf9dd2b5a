import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Protocol

/// An answer of the ingress as it goes on the wire: always JSON.
struct IngressAnswer: Sendable, Equatable {
    var status: HTTPResponse.Status
    var body: [UInt8]

    /// `{"code","message"}`, as every 4xx and 5xx of the gateway.
    static func error(_ refusal: Refusal) -> IngressAnswer {
        IngressAnswer(status: refusal.status, body: refusal.body)
    }
}

/// What the ingress made of a request: an answer now, or one once what the
/// request changed is durable (SPEC: what is told is durable first).
enum IngressResult: Sendable {
    case now(IngressAnswer)
    /// `answer(true)` once the ticket is durable, `answer(false)` if it is
    /// not within ``Arcade/durabilityWait``.
    case afterWrite(StorageWriter.Ticket, answer: @Sendable (_ durable: Bool) -> IngressAnswer)
}

/// The ways players' notifications come in: NetEase's message copy and the
/// signed generic webhook (SPEC §5), over HTTP and over a chain's inbox.
/// Checks the request, hands the notification to the arcade and says how to
/// answer. Nothing here waits on MQTT or an IM API; what changed the queue
/// is answered once it is durable, a move at once.
///
/// One is built for a gateway, in its wiring, and every transport answers
/// through it: the raw HTTP path (``RawIngress``) and the chain's inbox
/// (``ChainInbox``) with ``answer(_:on:beforeWaiting:_:)`` on their event
/// loop, the Hummingbird routes (``IngressRoutes``) with ``answer(_:)``. So
/// all of them keep one contract: an answer that depends on a write is
/// given once the write is durable (``Arcade/durabilityWait`` at most).
struct Ingress: Sendable {
    let arcade: Arcade
    let im: IMSettings
    /// The message ids already seen, against the IM service's duplicates.
    let recentMessages: RecentIDs
    /// Generic notifications already accepted, against replays.
    let replays: ReplayGuard
    let logger: Logger
    let now: @Sendable () -> Date
    /// Warnings about refused requests, one per reason every 10 s, whatever
    /// the transport: no one outside can flood the journal.
    let refusalLog = LogLimiter()

    init(arcade: Arcade, im: IMSettings, logger: Logger, now: @escaping @Sendable () -> Date) {
        self.arcade = arcade
        self.im = im
        self.logger = logger
        self.now = now
        recentMessages = RecentIDs()
        replays = ReplayGuard(window: im.generic?.maxClockSkew ?? .seconds(300))
    }

    /// Each ingress `im` configures, with the path it is posted to: the
    /// site's and the chain's router's.
    static func routes(of im: IMSettings) -> [(path: String, route: Route)] {
        (im.netease.map { [($0.callbackPath, Route.netease($0))] } ?? []) + (im.generic.map { [(genericPath, Route.generic($0))] } ?? [])
    }

    /// Each ingress this gateway configures, with its path: for the routes and the fast path.
    var routes: [(path: String, route: Route)] { Self.routes(of: im) }

    static let genericPath = "/v1/notifications"

    enum Route: Sendable {
        case netease(NetEaseSettings)
        case generic(GenericSettings)

        /// The headers (lower-case names) the request of this route is read with.
        var headerNames: Set<String> {
            switch self {
            case .netease: NetEaseCopy.headerNames
            case .generic: Ingress.genericHeaders
            }
        }
    }

    /// The request of `route` with this body and headers (looked up by lower-case name).
    /// - Parameter voucher: a router's voucher for the debit of the accept
    ///   the copy carries, when it came over a chain's inbox (SPEC §9).
    func handle(_ route: Route, body: [UInt8], header: (String) -> String?, voucher: ChainVoucher? = nil) -> IngressResult {
        let now = now()
        let request: IngressRequest
        do throws(IngressRefusal) {
            request = try route.read(body: body, header: header, now: now)
        } catch {
            GatewayMetrics.notification(provider: error.provider, result: error.reason.rawValue)
            refusalLog.warning(error.logKind, error.logMessage, error.shape.metadata(), on: logger)
            return .now(.error(error.refusal))
        }
        switch request {
        case .addressCheck:
            GatewayMetrics.notification(provider: route.provider, result: "address_check")
            return .now(Self.copyAccepted)
        case .otherEvent:
            GatewayMetrics.notification(provider: route.provider, result: "ignored")
            return .now(Self.copyAccepted)
        case .notification(let notification):
            return handle(notification, now: now, voucher: voucher)
        }
    }

    private func handle(_ notification: IncomingNotification, now: Date, voucher: ChainVoucher?) -> IngressResult {
        let provider = notification.provider
        if case .webhook(let key) = notification.source, !replays.accept(signature: key.signature, timestamp: key.timestamp, now: now) {
            GatewayMetrics.notification(provider: provider, result: "replayed")
            let refusal = Refusal(
                .conflict, code: "replayed",
                "These signed bytes were already accepted; send each notification once, with its own timestamp and signature.")
            refusalLog.warning("\(provider).replayed", "Generic notification replayed", refusal.shape.metadata(), on: logger)
            return .now(.error(refusal))
        }
        let age = GatewayMetrics.copyArrived(sent: notification.sent, now: now)
        // NetEase copies every account of the app, and sends a copy again
        // when it is unsure: neither is a player's to be told of.
        if case .copy(let messageID?) = notification.source, !recentMessages.insert(messageID) {
            GatewayMetrics.notification(provider: provider, result: "duplicate")
            return .now(Self.copyAccepted)
        }
        if case .copy = notification.source, arcade.machine(notification.to) == nil {
            GatewayMetrics.notification(provider: provider, result: ErrorCode.unknownMachine.rawValue)
            return .now(Self.copyAccepted)
        }
        let (outcome, ticket) = arcade.handleNow(
            PlayerNotification(
                from: notification.from, to: notification.to, attach: notification.attach, provider: provider, age: age, voucher: voucher))
        guard let ticket else { return .now(told(outcome, of: notification, saved: true)) }
        return .afterWrite(ticket) { saved in told(outcome, of: notification, saved: saved) }
    }

    /// What the sender of `notification` is told once the request's write
    /// is durable (`saved`), or is not in time.
    private func told(_ outcome: RequestOutcome, of notification: IncomingNotification, saved: Bool) -> IngressAnswer {
        let told = saved ? outcome : .rejected(Arcade.notSavedInTime)
        GatewayMetrics.notification(provider: notification.provider, result: told.metricLabel)
        guard case .webhook(let key) = notification.source else {
            // NetEase reads only the status: a 503 counts the copy as not delivered.
            return saved ? Self.copyAccepted : IngressAnswer(status: .serviceUnavailable, body: Array(#"{"code":503}"#.utf8))
        }
        if told.isPassingRefusal { replays.forget(signature: key.signature) }
        return Self.answer(told)
    }

    // MARK: Answering

    /// Answers `result`: at once, on the caller's thread, when the answer
    /// is ready or the write it depends on is already durable; else once it
    /// is (or ``Arcade/durabilityWait`` passed), on `eventLoop`, after
    /// `beforeWaiting` has run.
    func answer(
        _ result: IngressResult, on eventLoop: any EventLoop, beforeWaiting: () -> Void = {},
        _ respond: @escaping @Sendable (IngressAnswer) -> Void
    ) {
        switch result {
        case .now(let answer):
            respond(answer)
        case .afterWrite(let ticket, let answer) where arcade.writer.isDurable(ticket):
            respond(answer(true))
        case .afterWrite(let ticket, let answer):
            beforeWaiting()
            arcade.writer.whenDurable(ticket, timeout: Arcade.durabilityWait, on: eventLoop) { durable in
                respond(answer(durable))
            }
        }
    }

    /// The answer of `result` for an async caller: after the write it depends on.
    func answer(_ result: IngressResult) async -> IngressAnswer {
        switch result {
        case .now(let answer):
            return answer
        case .afterWrite(let ticket, let answer):
            return answer(await arcade.durable(ticket))
        }
    }

    // MARK: NetEase

    /// NetEase reads only the status; the body is the same for every copy.
    static let copyAccepted = IngressAnswer(status: .ok, body: Array(#"{"code":200}"#.utf8))

    // MARK: Generic

    /// The headers the generic webhook is read with.
    static let genericHeaders: Set<String> = [
        GenericEnvelope.timestampHeader.lowercased(), GenericEnvelope.signatureHeader.lowercased(),
    ]

    /// Checks a generic notification's `X-Claw-Timestamp` and
    /// `X-Claw-Signature` against its raw body and the secret (SPEC §5), as
    /// the site's ingress and the chain's router both do: the signature and
    /// the timestamp (Unix seconds), or the refusal to answer.
    static func verifyGeneric(
        body: [UInt8], header: (String) -> String?, settings: GenericSettings, now: Date
    ) throws(Refusal) -> (signature: String, timestamp: Int64) {
        guard let timestamp = header(GenericEnvelope.timestampHeader.lowercased()),
            let signature = header(GenericEnvelope.signatureHeader.lowercased())
        else {
            throw .badSignature("The \(GenericEnvelope.timestampHeader) and \(GenericEnvelope.signatureHeader) headers are required.")
        }
        let expected = Signatures.genericSignature(secret: settings.secret, timestamp: timestamp, body: body)
        guard Signatures.hexEqual(signature, expected) else {
            throw .badSignature("The signature does not match; check im.generic.secret.")
        }
        guard let seconds = Int64(timestamp),
            ClockSkew.within(settings.maxClockSkew, sent: Date(timeIntervalSince1970: Double(seconds)), now: now)
        else {
            throw .badSignature("\(GenericEnvelope.timestampHeader) must be Unix seconds within the allowed clock skew.")
        }
        return (signature, seconds)
    }

    /// The generic webhook's answer: what happened, or why not.
    static func answer(_ outcome: RequestOutcome) -> IngressAnswer {
        func ok(_ fields: [(String, JSONObjectWriter.Value)]) -> IngressAnswer {
            IngressAnswer(status: .ok, body: JSONObjectWriter.object(fields))
        }
        switch outcome {
        case .rejected(let error):
            if let refusal = Refusal(error) { return .error(refusal) }
            // `insufficient_credits` says what the player has and what a game costs (SPEC §11).
            let balance = error.balance.map { [("balance", JSONObjectWriter.Value.integer($0))] } ?? []
            let price = error.price.map { [("price", JSONObjectWriter.Value.integer($0))] } ?? []
            return ok(
                balance + [("code", .string(error.code.rawValue)), ("message", .string(error.message))] + price + [("result", "rejected")])
        case .forwarded(let serial):
            return ok([("result", "forwarded"), ("serial", .integer(serial))])
        case .queued(let position, let length):
            return ok([("length", .integer(Int64(length))), ("position", .integer(Int64(position))), ("result", "queued")])
        case .offered(let session):
            return ok([("result", "offered"), ("session", .string(session))])
        case .accepted(let session):
            return ok([("result", "accepted"), ("session", .string(session))])
        case .declined:
            return ok([("result", "declined")])
        case .left:
            return ok([("result", "left")])
        case .ignored(let reason):
            return ok([("message", .string(reason)), ("result", "ignored")])
        }
    }
}

extension JSONResponse {
    /// The ingress's answer as a response (the router's, the full pipeline's).
    static func make(_ answer: IngressAnswer) -> Response {
        Response(
            status: answer.status, headers: [.contentType: "application/json"],
            body: ResponseBody(byteBuffer: ByteBuffer(bytes: answer.body)))
    }

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

    /// Refused for a reason that passes (the sender's budget, storage):
    /// the same signed bytes may be sent again, and are not a replay.
    var isPassingRefusal: Bool {
        guard case .rejected(let error) = self else { return false }
        return error.code == .rateLimited || error.code == .gatewayUnavailable
    }
}
