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
    /// The sites' debits and refunds (SPEC §11), on a stream of their own: a
    /// record retried while the database is slow never holds a debit back.
    private let walletAsks: AsyncStream<MQTTMessage>
    private let walletContinuation: AsyncStream<MQTTMessage>.Continuation
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
        var walletBacklog = 0
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

    init(bus: BusSettings, store: RecorderStore, clock: GameClock, logger: Logger) throws(MQTTError) {
        self.store = store
        self.clock = clock
        self.logger = logger
        prefix = bus.topicPrefix
        (inbound, continuation) = AsyncStream.makeStream(of: MQTTMessage.self, bufferingPolicy: .unbounded)
        (walletAsks, walletContinuation) = AsyncStream.makeStream(of: MQTTMessage.self, bufferingPolicy: .unbounded)
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
        walletContinuation.finish()
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

    /// Answers the sites' debits and refunds as they come, one at a time,
    /// until the stream ends (``shutdown()``).
    func runWallet() async {
        for await message in walletAsks {
            state.withLock { $0.walletBacklog -= 1 }
            if Task.isCancelled { return }
            await settle(message)
        }
    }

    /// One debit or refund: written (or found) in the ledger, then answered
    /// on the site's `wallet/ack`. Not retried when the database is away: a
    /// debit's site has stopped waiting after `chain.wallet_timeout`, and a
    /// refund comes again from the site's outbox.
    private func settle(_ message: MQTTMessage) async {
        guard let site = site(of: message.topic, level: .wallet) else { return }
        guard let ask = ChainWalletAsk.decode(message.payload), ask.credits > 0, ask.credits <= Self.maxWalletCredits,
            !ask.session.isEmpty, !ask.provider.isEmpty, !ask.account.isEmpty,
            [ask.session, ask.provider, ask.account].allSatisfy({ $0.utf8.count <= RecorderStore.maxWalletField })
        else {
            countWallet("malformed")
            warn("wallet_malformed", "A debit or refund that does not decode, or names no game: not answered", [
                "chain.site": .string(site), "chain.bytes": "\(message.payload.count)",
            ])
            return
        }
        let answer: ChainWalletAnswer
        do {
            answer = try await store.settle(ask, site: site)
        } catch {
            countWallet("unanswered")
            warn(
                "wallet_database", "A debit or refund not answered: the database cannot be reached",
                RecorderStore.shape(error, "settle a wallet ask").metadata(["chain.site": .string(site), "game.session": .string(ask.session)]))
            return
        }
        countWallet("\(ask.kind.rawValue)_\(answer.result.rawValue)")
        do {
            try client.publish(
                ChainTopics(prefix: prefix, site: site).walletAck, payload: answer.payload, qos: .atLeastOnce, retain: false)
        } catch {
            // A debit's site gives up and its turn's refund settles it; a refund comes again.
            warn("wallet_ack", "An answer to a debit or refund not published", error.shape.metadata(["chain.site": .string(site)]))
        }
    }

    /// The most a site may ask for one game: anything above is not a price.
    static let maxWalletCredits: Int64 = 1_000_000

    private func countWallet(_ key: String) {
        state.withLock { $0.wallet[key, default: 0] += 1 }
    }

    /// Reaches the database every 2 s while it is up, and with the backoff
    /// while it is down, so that `readyz` tells the truth when no record comes.
    func watchDatabase() async {
        var delay = Self.backoff.lowerBound
        while !Task.isCancelled {
            if await store.probe() {
                delay = Self.backoff.lowerBound
                do { try await clock.sleep(clock.now() + .seconds(2)) } catch { return }
            } else {
                do { try await clock.sleep(clock.now() + delay) } catch { return }
                delay = min(delay * 2, Self.backoff.upperBound)
            }
        }
    }

    private func handle(_ message: MQTTMessage) async {
        guard let site = site(of: message.topic) else { return }
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
        if site(of: message.topic, level: .wallet) != nil {
            let held = state.withLock { state -> Bool in
                guard state.walletBacklog < Self.backlogLimit else { return false }
                state.walletBacklog += 1
                return true
            }
            if held { walletContinuation.yield(message) } else { countWallet("dropped") }
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
