import Foundation
import Logging
import NIOCore
import Protocol

/// What a site does with a copy a router published on its `inbox` (SPEC §9):
/// the same as with one that came over HTTP. It goes through the site's own
/// ``Ingress`` (verified again with the site's secret, deduplicated by
/// `msgidServer` with the same window as HTTP copies, durable before it is
/// answered), and the answer goes back as a ``ChainReceipt``, which the
/// router passes on to the IM service.
///
/// A copy older than `chain.inbox_max_age`, or past the deadline its router
/// set (shortly before it answers the IM service 5xx for want of a receipt),
/// is dropped and not acknowledged: the copy comes again, or the player has
/// given up. Nothing that waited in the cluster while the site was cut off
/// reaches a PC late, and no copy the IM service was told failed is played.
struct ChainInbox: Sendable {
    let ingress: Ingress
    let maxAge: Duration
    let wallNow: @Sendable () -> Date
    let logger: Logger
    /// Where the durability callback runs; nothing here blocks it.
    let eventLoop: any EventLoop
    /// Warnings about dropped copies, one per reason every 10 s.
    var dropLog = LogLimiter()

    enum Outcome: String, Sendable, CaseIterable {
        /// Handled by the ingress; the receipt is sent (now or once durable).
        case handled
        /// Older than `chain.inbox_max_age`, or past its router's deadline: dropped, no receipt.
        case stale
        /// Not a copy: dropped, no receipt (there is no id to answer).
        case malformed
    }

    /// Handles one message of the inbox that is not a beat; `acknowledge`
    /// publishes the receipt (on the event loop, or on the caller's thread
    /// when the answer is known at once).
    @discardableResult
    func receive(_ payload: [UInt8], acknowledge: @escaping @Sendable (ChainReceipt) -> Void) -> Outcome {
        guard let copy = ChainCopy.decode(payload) else {
            drop(.malformed, "A message on the chain inbox is not a copy: dropped", metadata: ["chain.bytes": "\(payload.count)"])
            return .malformed
        }
        let now = wallNow()
        let age = copy.age(at: now)
        guard age <= maxAge, !copy.isPastDeadline(at: now) else {
            drop(
                .stale, "A copy reached the site after chain.inbox_max_age or its router's deadline: dropped, not acknowledged",
                metadata: ["chain.copy": .string(copy.id), "chain.age_ms": "\(age.milliseconds)"])
            return .stale
        }
        guard let route = route(copy.provider) else {
            let refusal = Refusal(
                .notFound, code: "unknown_provider", "This site takes no \(copy.provider) copies; configure im.\(copy.provider).")
            acknowledge(ChainReceipt(copy, IngressAnswer.error(refusal)))
            return .handled
        }
        let headers = copy.headers
        ingress.answer(ingress.handle(route, body: copy.body, header: { headers[$0] }, voucher: copy.voucher), on: eventLoop) { answer in
            acknowledge(ChainReceipt(copy, answer))
        }
        return .handled
    }

    private func route(_ provider: String) -> Ingress.Route? {
        switch provider {
        case "netease": ingress.im.netease.map { .netease($0) }
        case "generic": ingress.im.generic.map { .generic($0) }
        default: nil
        }
    }

    private func drop(_ outcome: Outcome, _ message: Logger.Message, metadata: Logger.Metadata) {
        dropLog.warning(outcome.rawValue, message, metadata, on: logger)
    }
}

extension ChainReceipt {
    /// The receipt of `copy`: the ingress's answer as it would have gone over HTTP.
    init(_ copy: ChainCopy, _ answer: IngressAnswer) {
        self.init(id: copy.id, status: Int(answer.status.code), body: String(decoding: answer.body, as: UTF8.self))
    }
}
