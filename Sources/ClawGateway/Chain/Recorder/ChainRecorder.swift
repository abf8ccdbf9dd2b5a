import Foundation
import Logging
import Protocol
import Synchronization

/// The chain's recorder (SPEC §10): one MQTT 3.1.1 connection to the chain's
/// cluster, subscribed to every site's `<prefix>/+/records`, and each record
/// written into PostgreSQL (``RecorderStore``) before its site's progress is
/// acknowledged, retained, on `<prefix>/<site>/records/ack` `{"epoch":E,"upto":N}`.
///
/// A record the database cannot hold as it is (a field over its limit, a
/// value no game has, one PostgreSQL refuses as data, one that does not
/// decode but says its place) is set aside at its place, counted, and shown
/// on `GET /v1/records/set-aside`: it never stops the records behind it.
///
/// **Clean session false, with a stable client id.** The cluster keeps the
/// recorder's subscription and the records published while it was away, and
/// delivers them when it connects again: a restarted recorder catches up at
/// once instead of at the sites' next `chain.resend_interval`. Nothing
/// depends on it: libmosquitto acknowledges a QoS 1 message when it arrives,
/// before the record is in the database, so a record can be lost between the
/// two (a recorder killed, a database down); what makes that safe is the
/// acknowledgement. It is published only after COMMIT, and a site sends
/// again, in order, everything above the acknowledged sequence when its link
/// comes back and every `resend_interval` until it is acknowledged.
///
/// Records are written one at a time, in the order they came. When the
/// database cannot be reached, the record in hand is retried with a backoff
/// of 1 s doubling to 10 s, nothing is acknowledged, and records arriving
/// meanwhile wait in memory (up to ``backlogLimit``; beyond, they are
/// dropped, counted, and come again with the sites' resends).
///
/// The connection is a ``BusLink``: up only while every subscription is
/// granted, as a site's link's and a router's.
final class ChainRecorder: Sendable {
    /// Records held in memory while the database is slow or down.
    static let backlogLimit = 50_000
    /// The retry delays while the database is down: 1 s, doubling, at most 10 s.
    static let backoff: ClosedRange<Duration> = .seconds(1)...Duration.seconds(10)

    let bus: BusLink
    var client: MQTTClient { bus.client }
    let store: RecorderStore
    let prefix: String
    private let clock: GameClock
    private let logger: Logger
    private let inbound: AsyncStream<MQTTMessage>
    private let continuation: AsyncStream<MQTTMessage>.Continuation
    /// The sites' debits and refunds (SPEC §11) wait in lines of their own
    /// (``RecorderState/asks``), served by a loop of their own: a record
    /// retried while the database is slow never holds a debit back. This
    /// wakes that loop.
    private let walletWakes: AsyncStream<Void>
    private let wakeWallet: AsyncStream<Void>.Continuation
    /// `recorder.ledger_key` and `voucher_max_age`: what a debit's voucher must be (SPEC §9).
    let vouchers: VoucherPolicy
    private let state = Mutex(RecorderState())
    private let warnings = LogLimiter()

    /// What became of a record.
    enum Result: String, CaseIterable, Sendable {
        /// Written: a new row.
        case written
        /// Already there (sent again, or written by another recorder): acknowledged all the same.
        case duplicate
        /// Does not decode and does not say its place: never written, and the site's progress waits at it.
        case malformed
        /// Its `site` is not the site of the topic it came on: set aside.
        case forged
        /// Set aside at its place: a field over its limit, values no game has, refused by the database as data.
        case setAside = "set_aside"
    }

    struct RecorderState {
        var results: [Result: Int] = [:]
        /// Write attempts that failed because the database could not be reached.
        var failures = 0
        /// Records dropped because the backlog was full.
        var dropped = 0
        var acks = 0
        /// Records received and not yet handled.
        var backlog = 0
        /// Debits and refunds asked, by kind and answer ("malformed", "unanswered" for those not answered).
        var wallet: [String: Int] = [:]
        /// The asks waiting, a line per site, served in turn.
        var asks = SiteAskQueues<MQTTMessage>(perSite: ChainRecorder.walletLinePerSite)
        /// Each site's budget of refusals answered (``refusalsPerSecond``).
        var refusalBudgets: [String: TokenBucket] = [:]
    }

    /// What the recorder says of itself, for `/readyz` and the metrics.
    struct Status: Sendable {
        var busProblem: String?
        var databaseProblem: String?
        var connects: Int
        var results: [Result: Int]
        var failures: Int
        var dropped: Int
        var acks: Int
        var backlog: Int
        var wallet: [String: Int]
    }

    init(bus: BusSettings, store: RecorderStore, vouchers: VoucherPolicy, clock: GameClock, logger: Logger) throws(MQTTError) {
        self.store = store
        self.vouchers = vouchers
        self.clock = clock
        self.logger = logger
        prefix = bus.topicPrefix
        (inbound, continuation) = AsyncStream.makeStream(of: MQTTMessage.self, bufferingPolicy: .unbounded)
        (walletWakes, wakeWallet) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        // Clean session false: the cluster keeps what was published for the
        // recorder while it was away. A record is well under 1 KB.
        let everySite = ChainTopics.everySite(prefix: bus.topicPrefix)
        self.bus = try BusLink(
            role: .recorder, bus: bus, subscriptions: [everySite.records, everySite.wallet], cleanSession: false,
            maxInboundPayload: 64 << 10, logger: logger)
    }

    /// Connects in the background, and keeps connecting until ``shutdown()``.
    func start() {
        bus.start(qos: .atLeastOnce) { [self] message in received(message) }
    }

    func shutdown() async {
        await bus.shutdown()
        continuation.finish()
        wakeWallet.finish()
    }

    var status: Status {
        let busProblem = bus.problem
        return state.withLock { state in
            Status(
                busProblem: busProblem, databaseProblem: store.problem, connects: client.connectCount, results: state.results,
                failures: state.failures, dropped: state.dropped, acks: state.acks,
                backlog: state.backlog, wallet: state.wallet)
        }
    }

    /// Why the recorder is not ready, or nil.
    var problems: [String] {
        let status = status
        return [status.busProblem, status.databaseProblem].compactMap { $0 }
    }

    // MARK: Writing

    /// Writes the records as they come, until the stream ends (``shutdown()``)
    /// or the task is cancelled.
    func run() async {
        for await message in inbound {
            state.withLock { $0.backlog -= 1 }
            if Task.isCancelled { return }
            await handle(message)
        }
    }

    /// The most asks one transaction settles: one durable commit for all.
    /// A few milliseconds an ask: small enough that an ask behind a group
    /// waits well under a second, large enough that the commits' `fsync`s
    /// are a small part of the time (docs/BENCHMARKS.md, `claw-bench wallet`).
    static let walletGroup = 32
    /// The most asks one site may have waiting; beyond, its asks are dropped.
    static let walletLinePerSite = 1000
    /// The most refusals for a bad voucher answered to one site a second;
    /// beyond, a refusal is counted and not sent. Every answer goes out on
    /// the recorder's one connection at QoS 1, at most 20 unacknowledged: a
    /// site flooding asks without a voucher would otherwise queue a
    /// refusal per ask ahead of every other site's answer, and hold their
    /// debits back past `chain.wallet_timeout` (the hostile-site test saw
    /// it on a loaded box). A site's own debits carry their routers'
    /// vouchers; a few a second refused is already a site gone wrong.
    static let refusalsPerSecond = 20

    /// Answers the sites' debits and refunds as they come, in groups that
    /// serve the sites in turn (``SiteAskQueues``), each group one
    /// transaction, until the recorder shuts down.
    func runWallet() async {
        for await _ in walletWakes {
            while !Task.isCancelled {
                let group = state.withLock { $0.asks.take(Self.walletGroup) }
                if group.isEmpty { break }
                await settle(group)
            }
        }
    }

    /// One group of debits and refunds: each checked (a voucher the routers
    /// did not make for it is refused without a look at the wallet), the
    /// rest settled in one transaction, then every answer published on its
    /// site's `wallet/ack`. Not retried when the database is away: a
    /// debit's site has stopped waiting after `chain.wallet_timeout`, and a
    /// refund comes again from the site's outbox.
    private func settle(_ group: [(site: String, ask: MQTTMessage)]) async {
        var asks: [RecorderStore.SiteAsk] = []
        let now = clock.wallNow()
        for (site, message) in group {
            guard let ask = ChainWalletAsk.decode(message.payload), ask.credits > 0, ask.credits <= ChainWalletAsk.maxCredits,
                !ask.session.isEmpty, !ask.provider.isEmpty, !ask.account.isEmpty,
                [ask.session, ask.provider, ask.account].allSatisfy({ $0.utf8.count <= RecorderStore.maxWalletField })
            else {
                countWallet("malformed")
                warn("wallet_malformed", "A debit or refund that does not decode, or names no game: not answered", [
                    "chain.site": .string(site), "chain.bytes": "\(message.payload.count)",
                ])
                continue
            }
            if let problem = vouchers.problem(ask, site: site, now: now) {
                // Refused alike whatever the wallet holds: nothing of it is said.
                countWallet("debit_voucher_refused")
                warn("wallet_voucher", "A debit without a valid voucher of the routers: refused, nothing taken", [
                    "chain.site": .string(site), "game.session": .string(String(ask.session.prefix(64))), "chain.problem": .string(problem),
                ])
                guard mayAnswerRefusal(site) else {
                    countWallet("debit_voucher_refused_unsent")
                    continue
                }
                answer(ChainWalletAnswer(kind: ask.kind, session: ask.session, result: .refused, balance: nil), site: site)
                continue
            }
            asks.append(RecorderStore.SiteAsk(site: site, ask: ask))
        }
        guard !asks.isEmpty else { return }
        let answers: [ChainWalletAnswer?]
        let started = ContinuousClock.now
        do {
            answers = try await store.settle(asks)
            RecorderMetrics.walletLatency.recordNanoseconds(Int64((ContinuousClock.now - started).seconds * 1e9))
        } catch {
            for _ in asks { countWallet("unanswered") }
            warn(
                "wallet_database", "Debits and refunds not answered: the database cannot be reached",
                RecorderStore.shape(error, "settle wallet asks").metadata(["chain.asks": "\(asks.count)"]))
            return
        }
        for (item, answer) in zip(asks, answers) {
            guard let answer else {
                countWallet("unanswered")
                continue
            }
            countWallet("\(item.ask.kind.rawValue)_\(answer.result.rawValue)")
            self.answer(answer, site: item.site)
        }
    }

    /// Whether a refusal to `site` is within its ``refusalsPerSecond``.
    private func mayAnswerRefusal(_ site: String) -> Bool {
        let now = clock.now()
        return state.withLock { state in
            state.refusalBudgets[site, default: TokenBucket(perSecond: Self.refusalsPerSecond, now: now)].take(now: now)
        }
    }

    /// Publishes an answer on the site's `wallet/ack`, QoS 1.
    private func answer(_ answer: ChainWalletAnswer, site: String) {
        do {
            try client.publish(
                ChainTopics(prefix: prefix, site: site).walletAck, payload: answer.payload, qos: .atLeastOnce, retain: false)
        } catch {
            // A debit's site gives up and its turn's refund settles it; a refund comes again.
            warn("wallet_ack", "An answer to a debit or refund not published", error.shape.metadata(["chain.site": .string(site)]))
        }
    }

    /// Tells a site's player what became of their prize (SPEC §15), on the
    /// site's `tell`, QoS 1: the site sends it through its IM. One not
    /// published is logged (the change stands; the player's list shows it).
    func tell(site: String, _ notice: ChainPrizeNotice) {
        do {
            try client.publish(ChainTopics(prefix: prefix, site: site).tell, payload: notice.payload, qos: .atLeastOnce, retain: false)
        } catch {
            warn("tell", "A prize's change not sent to its site for its player", error.shape.metadata(["chain.site": .string(site)]))
        }
    }

    private func countWallet(_ key: String) {
        state.withLock { $0.wallet[key, default: 0] += 1 }
    }

    /// Reaches the database every 2 s while it is up, and with the backoff
    /// while it is down, so that `readyz` tells the truth when no record comes.
    func watchDatabase() async {
        var delay = Self.backoff.lowerBound
        var rounds = 0
        while !Task.isCancelled {
            if await store.probe() {
                delay = Self.backoff.lowerBound
                rounds += 1
                // Every 10 s: the vouchers and closed sessions no debit can use any more.
                if rounds % 5 == 1 { try? await store.forgetSpentVouchers(olderThan: vouchers.remembered) }
                do { try await clock.sleep(clock.now() + .seconds(2)) } catch { return }
            } else {
                do { try await clock.sleep(clock.now() + delay) } catch { return }
                delay = min(delay * 2, Self.backoff.upperBound)
            }
        }
    }

    private func handle(_ message: MQTTMessage) async {
        guard let site = site(of: message.topic) else { return }
        // An audit entry (SPEC §16) rides in the records' numbering.
        if let entry = ChainAuditRecord.decode(message.payload) {
            await handle(entry, site: site, message.payload)
            return
        }
        guard let record = ChainRecord.decode(message.payload) else {
            guard let place = ChainRecord.place(of: message.payload) else {
                count(.malformed)
                warn("malformed", "A record that does not decode nor say its place: not written", [
                    "chain.site": .string(site), "chain.bytes": "\(message.payload.count)",
                ])
                return
            }
            await setAside(site: site, epoch: place.epoch, seq: place.seq, reason: "does not decode as a game record", message.payload)
            return
        }
        guard record.site == site else {
            count(.forged)
            await setAside(
                site: site, epoch: record.epoch, seq: record.seq,
                reason: "its site \(String(record.site.prefix(64))) is not its topic's", message.payload)
            return
        }
        let valid: ValidRecord
        switch ValidRecord.check(record) {
        case .failure(let problem):
            await setAside(site: site, epoch: record.epoch, seq: record.seq, reason: problem.description, message.payload)
            return
        case .success(let checked):
            valid = checked
        }
        await retrying(site: site, seq: record.seq) {
            let started = ContinuousClock.now
            do {
                let written = try await store.write(valid)
                RecorderMetrics.writeLatency.recordNanoseconds(Int64((ContinuousClock.now - started).seconds * 1e9))
                count(written.inserted ? .written : .duplicate)
                acknowledge(site: site, epoch: record.epoch, upto: written.upto)
            } catch let refused as RecorderStore.Refused {
                await setAside(site: site, epoch: record.epoch, seq: record.seq, reason: refused.description, message.payload)
            }
        }
    }

    /// A site's audit entry: written at its place (a correction with its game's
    /// new version), or set aside, never retried for ever; acknowledged with the records.
    private func handle(_ record: ChainAuditRecord, site: String, _ payload: [UInt8]) async {
        guard record.site == site else {
            count(.forged)
            await setAside(
                site: site, epoch: record.epoch, seq: record.seq, reason: "its site \(String(record.site.prefix(64))) is not its topic's", payload)
            return
        }
        if let problem = record.problem {
            await setAside(site: site, epoch: record.epoch, seq: record.seq, reason: problem, payload)
            return
        }
        await retrying(site: site, seq: record.seq) {
            do {
                let written = try await store.write(record)
                count(written.inserted ? .written : .duplicate)
                acknowledge(site: site, epoch: record.epoch, upto: written.upto)
            } catch let refused as RecorderStore.Refused {
                await setAside(site: site, epoch: record.epoch, seq: record.seq, reason: refused.description, payload)
            }
        }
    }

    /// Sets a record aside at its place and acknowledges what that lets through.
    private func setAside(site: String, epoch: String, seq: Int64, reason: String, _ payload: [UInt8]) async {
        guard epoch.utf8.count <= ValidRecord.maxEpochBytes, seq >= 1 else {
            count(.malformed)
            return
        }
        warn("set_aside", "A record the database cannot hold as it is: set aside, the records behind it go on", [
            "chain.site": .string(site), "chain.epoch": .string(epoch), "chain.seq": "\(seq)", "chain.problem": .string(reason),
        ])
        await retrying(site: site, seq: seq) {
            let written = try await store.setAside(site: site, epoch: epoch, seq: seq, reason: reason, payload: payload)
            if written.inserted { count(.setAside) }
            acknowledge(site: site, epoch: epoch, upto: written.upto)
        }
    }

    /// Runs `body` until it does not fail for want of the database: while
    /// it cannot be reached, again with the backoff, nothing acknowledged.
    private func retrying(site: String, seq: Int64, _ body: () async throws -> Void) async {
        var delay = Self.backoff.lowerBound
        while true {
            do {
                try await body()
                return
            } catch {
                if Task.isCancelled { return }
                state.withLock { $0.failures += 1 }
                warn(
                    "database", "A record not written: the database cannot be reached; retrying, nothing acknowledged",
                    RecorderStore.shape(error, "write a game record").metadata(["chain.site": .string(site), "chain.seq": "\(seq)"]))
                do { try await clock.sleep(clock.now() + delay) } catch { return }
                delay = min(delay * 2, Self.backoff.upperBound)
            }
        }
    }

    /// Retained, QoS 1: the site's progress as the database has it, after COMMIT.
    private func acknowledge(site: String, epoch: String, upto: Int64) {
        let topic = ChainTopics(prefix: prefix, site: site).recordsAck
        do {
            try client.publish(topic, payload: ChainRecordsAck(epoch: epoch, upto: upto).payload, qos: .atLeastOnce, retain: true)
            state.withLock { $0.acks += 1 }
        } catch {
            // The site sends again what is above its last acknowledgement; this one goes out with the next write.
            warn(
                "ack", "An acknowledgement not published: the site sends its records again",
                error.shape.metadata(["chain.site": .string(site), "chain.upto": "\(upto)"]))
        }
    }

    /// The site level of `<prefix>/<site>/<level>`, or nil for any other topic.
    func site(of topic: String, level: ChainTopics.Level = .records) -> String? {
        ChainTopics.site(of: topic, prefix: prefix, level: level)
    }

    private func count(_ result: Result) {
        state.withLock { $0.results[result, default: 0] += 1 }
    }

    private func warn(_ kind: String, _ message: Logger.Message, _ metadata: Logger.Metadata) {
        warnings.warning(kind, message, metadata, on: logger)
    }

    // MARK: On the client's thread

    private func received(_ message: MQTTMessage) {
        if let site = site(of: message.topic, level: .wallet) {
            // A site's line is bounded: its flood is its own loss, no other site's.
            let held = state.withLock { state -> Bool in
                guard state.asks.append(message, site: site) else {
                    state.wallet["dropped", default: 0] += 1
                    return false
                }
                return true
            }
            if held { wakeWallet.yield() }
            return
        }
        let held = state.withLock { state -> Bool in
            // The stream is unbounded; the limit is counted here, where the drop is known.
            guard state.backlog < Self.backlogLimit else {
                state.dropped += 1
                return false
            }
            state.backlog += 1
            return true
        }
        guard held else { return }
        continuation.yield(message)
    }
}
