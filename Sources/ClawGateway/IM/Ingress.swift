import Foundation
import HTTPTypes
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

    /// The path of each ingress configured, for the router and the fast path.
    var paths: [String] {
        (im.netease.map { [$0.callbackPath] } ?? []) + (im.generic.map { _ in [Self.genericPath] } ?? [])
    }

    static let genericPath = "/v1/notifications"

    /// Which ingress a POST to `path` is, if any.
    func route(_ path: String) -> Route? {
        if let netease = im.netease, path == netease.callbackPath { return .netease(netease) }
        if let generic = im.generic, path == Self.genericPath { return .generic(generic) }
        return nil
    }

    enum Route: Sendable {
        case netease(NetEaseSettings)
        case generic(GenericSettings)

        /// The headers (lower-case names) the request of this route is read with.
        var headerNames: Set<String> {
            switch self {
            case .netease: Ingress.neteaseHeaders
            case .generic: Ingress.genericHeaders
            }
        }
    }

    /// The request of `route` with this body and headers (looked up by lower-case name).
    /// - Parameter voucher: a router's voucher for the debit of the accept
    ///   the copy carries, when it came over a chain's inbox (SPEC §9).
    func handle(_ route: Route, body: [UInt8], header: (String) -> String?, voucher: ChainVoucher? = nil) -> IngressResult {
        switch route {
        case .netease(let settings): netease(body: body, header: header, settings: settings, voucher: voucher)
        case .generic(let settings): generic(body: body, header: header, settings: settings, voucher: voucher)
        }
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

    /// The headers the NetEase copy is read with.
    static let neteaseHeaders = NetEaseCopy.headerNames

    private func netease(body: [UInt8], header: (String) -> String?, settings: NetEaseSettings, voucher: ChainVoucher?) -> IngressResult {
        let copy: NetEaseCopy
        let sent: Date
        let now = now()
        do {
            (copy, sent) = try NetEaseCopy.readStamped(body: body, header: header, settings: settings, now: now)
        } catch {
            GatewayMetrics.notification(provider: "netease", result: error.kind == .unauthorized ? "unauthorized" : "malformed")
            warnRefused("netease.\(error.kind)", "NetEase copy refused", reason: error.message)
            return .now(
                error.kind == .unauthorized
                    ? .error(.badSignature(error.message))
                    : .error(.badRequest(error.message)))
        }
        switch copy {
        case .addressCheck:
            GatewayMetrics.notification(provider: "netease", result: "address_check")
        case .other:
            GatewayMetrics.notification(provider: "netease", result: "ignored")
        case .notification(let from, let to, let attach, let messageID):
            let age = GatewayMetrics.copyArrived(sent: sent, now: now)
            if let messageID, !recentMessages.insert(messageID) {
                GatewayMetrics.notification(provider: "netease", result: "duplicate")
            } else if arcade.machine(to) == nil {
                // Other accounts of the app are copied too; they are not this site's machines.
                GatewayMetrics.notification(provider: "netease", result: ErrorCode.unknownMachine.rawValue)
            } else {
                let (outcome, ticket) = arcade.handleNow(
                    PlayerNotification(from: from, to: to, attach: Array(attach.utf8), provider: "netease", age: age, voucher: voucher))
                guard let ticket else {
                    GatewayMetrics.notification(provider: "netease", result: outcome.metricLabel)
                    return .now(Self.copyAccepted)
                }
                return .afterWrite(ticket) { durable in
                    GatewayMetrics.notification(provider: "netease", result: durable ? outcome.metricLabel : ErrorCode.gatewayUnavailable.rawValue)
                    // Not saved in time: a 503 lets NetEase count the copy as not delivered.
                    return durable ? Self.copyAccepted : IngressAnswer(status: .serviceUnavailable, body: Array(#"{"code":503}"#.utf8))
                }
            }
        }
        return .now(Self.copyAccepted)
    }

    /// A refused request's warning, or none when one of the same `kind` (a
    /// constant, never text from the request) went out in the last 10 s; the
    /// next one says how many were held back.
    private func warnRefused(_ kind: String, _ message: Logger.Message, reason: String) {
        refusalLog.warning(kind, message, ["http.reason": .string(reason)], on: logger)
    }

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

    private func generic(body: [UInt8], header: (String) -> String?, settings: GenericSettings, voucher: ChainVoucher?) -> IngressResult {
        let now = now()
        let signature: String
        let seconds: Int64
        do throws(Refusal) {
            (signature, seconds) = try Self.verifyGeneric(body: body, header: header, settings: settings, now: now)
        } catch {
            GatewayMetrics.notification(provider: "generic", result: "unauthorized")
            return .now(.error(error))
        }
        guard replays.accept(signature: signature, timestamp: seconds, now: now) else {
            GatewayMetrics.notification(provider: "generic", result: "replayed")
            warnRefused("generic.replayed", "Generic notification replayed", reason: "the same signed bytes were already accepted")
            return .now(
                .error(
                    Refusal(
                        .conflict, code: "replayed",
                        "These signed bytes were already accepted; send each notification once, with its own timestamp and signature.")))
        }
        let age = GatewayMetrics.copyArrived(sent: Date(timeIntervalSince1970: Double(seconds)), now: now)
        guard let envelope = GenericEnvelope.decode(body) else {
            GatewayMetrics.notification(provider: "generic", result: "malformed")
            return .now(
                .error(.badRequest(#"The body must be a JSON object {"from":string,"to":string,"attach":string or object}."#)))
        }
        let (outcome, ticket) = arcade.handleNow(
            PlayerNotification(from: envelope.from, to: envelope.to, attach: envelope.attach, provider: "generic", age: age, voucher: voucher))
        guard let ticket else {
            GatewayMetrics.notification(provider: "generic", result: outcome.metricLabel)
            if outcome.isPassingRefusal { replays.forget(signature: signature) }
            return .now(Self.answer(outcome))
        }
        return .afterWrite(ticket) { [replays] durable in
            let told = durable ? outcome : .rejected(Arcade.notSavedInTime)
            GatewayMetrics.notification(provider: "generic", result: told.metricLabel)
            if told.isPassingRefusal { replays.forget(signature: signature) }
            return Self.answer(told)
        }
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
