import Foundation
import Logging
import Protocol
import Synchronization

/// A chain site's window on the chain's ledger (SPEC §11), the site's
/// ``GameLedger`` when its games cost credits: it asks for each game's
/// debit over the site's link (`<prefix>/<site>/wallet`, QoS 1, with the
/// router's voucher of the accept, SPEC §9) and reports each answer
/// (`wallet/ack`) to the machines through ``reports``; it sends the refunds
/// the site owes from their durable outbox (``GameStore/unansweredRefunds(limit:)``)
/// until the ledger answers each.
///
/// A debit is asked once per accept: with no answer within
/// `chain.wallet_timeout` the machine refuses the accept, and the next
/// accept asks again (the ledger debits a session once). A turn whose debit
/// was asked and whose game never started owes a refund like a failed game:
/// the ledger pays back only a debit it holds, and closes the session
/// otherwise, so that a debit that comes late can take nothing.
///
/// It publishes on the site's ``BusLink`` (the link's own connection, made
/// once by the wiring and handed to both), and hears the answers from the
/// link (``answered(_:)``): it holds no reference to the link or the arcade.
final class ChainLedgerDesk: GameLedger {
    let timeout: Duration
    private let bus: BusLink
    private let topics: ChainTopics
    private let store: GameStore
    private let writer: StorageWriter
    private let resendInterval: Duration
    private let clock: GameClock
    private let logger: Logger
    private let state = Mutex(DeskState())
    let reports: AsyncStream<LedgerReport>?
    private let report: AsyncStream<LedgerReport>.Continuation

    private struct DeskState {
        /// Refunds sent and not answered, by session: when last sent.
        var refundsSent: [String: (at: Duration, refund: ChainWalletAsk)] = [:]
    }

    /// The most refunds read from the outbox per round.
    static let batch = 500

    init(
        timeout: Duration, bus: BusLink, topics: ChainTopics, store: GameStore, writer: StorageWriter, resendInterval: Duration,
        clock: GameClock, logger: Logger
    ) {
        self.timeout = timeout
        self.bus = bus
        self.topics = topics
        self.store = store
        self.writer = writer
        self.resendInterval = resendInterval
        self.clock = clock
        self.logger = logger
        let (reports, report) = AsyncStream.makeStream(of: LedgerReport.self)
        self.reports = reports
        self.report = report
    }

    /// Whether an ask can go out now: the link is up with its subscriptions.
    var reachable: Bool {
        bus.state == .up
    }

    /// A transition at a site of a chain: it knows how the chain's ledger is
    /// reached, no balance (the chain's are not the site's), and its writes
    /// (a debit's ask, a refund in the outbox) are the site's own.
    func transact<R: Sendable>(machine: Int, _ decide: (LedgerView) -> (R, [StoreChange])) -> (R, StorageWriter.Ticket?) {
        let (result, writes) = decide(LedgerView(chain: ChainLedgerContext(timeout: timeout, reachable: reachable)))
        return (result, writes.isEmpty ? nil : writer.submit(writes, machine: machine))
    }

    /// A machine's debit, durable as asked: out now. Not sent (the link
    /// just went down), the machine's timer refuses the accept.
    func ask(_ ask: ChainWalletAsk) {
        publish(ask)
    }

    /// The link is up again: every refund owed goes out at the next round.
    func linkUp() {
        state.withLock { $0.refundsSent.removeAll() }
    }

    /// Sends the refunds owed that were not sent within the resend
    /// interval. Reads SQLite on GRDB's reader; call it from one task.
    func shipRefunds() async {
        guard reachable else { return }
        let owed: [ChainWalletAsk]
        do {
            owed = try await store.unansweredRefunds(limit: Self.batch)
        } catch {
            logger.warning("Refunds owed by the chain's ledger not read", metadata: error.shape.metadata())
            return
        }
        let now = clock.now()
        let due = state.withLock { state in
            owed.filter { refund in
                if let sent = state.refundsSent[refund.session], now - sent.at < resendInterval { return false }
                state.refundsSent[refund.session] = (now, refund)
                return true
            }
        }
        for refund in due { publish(refund) }
    }

    private func publish(_ ask: ChainWalletAsk) {
        do {
            try bus.client.publish(topics.wallet, payload: ask.payload, qos: .atLeastOnce, retain: false)
        } catch {
            logger.debug(
                "A debit or refund not sent to the chain's ledger now", metadata: error.shape.metadata(["game.session": .string(ask.session)]))
        }
    }

    /// The ledger's answer, from the link's thread.
    func answered(_ payload: [UInt8]) {
        guard let answer = ChainWalletAnswer.decode(payload) else {
            logger.warning("An answer of the chain's ledger does not decode: ignored", metadata: ["chain.bytes": "\(payload.count)"])
            return
        }
        switch answer.kind {
        case .debit:
            // To the machine whose turn it is; none holds it any more (the
            // turn ended, the site restarted): the turn's end settles it.
            report.yield(.debitAnswered(answer))
        case .refund:
            let sent = state.withLock { $0.refundsSent.removeValue(forKey: answer.session) }
            _ = writer.submit([.chainRefundAnswered(session: answer.session)], machine: -1)
            // Told once, with the balance the ledger has after it (SPEC §11, 14).
            guard let refund = sent?.refund, answer.result == .refunded, let balance = answer.balance else { return }
            report.yield(
                .tell(
                    PlayerReply(
                        to: PlayerAddress(accid: refund.account, provider: refund.provider),
                        message: WireMessage(
                            .creditsChanged, data: String(balance), session: refund.session, change: refund.credits,
                            reason: LedgerEntry.Kind.refund.rawValue),
                        priority: .high, expires: nil)))
        }
    }
}
