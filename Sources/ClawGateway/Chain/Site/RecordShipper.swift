import Foundation
import Logging
import Protocol
import Synchronization

/// Ships a site's finished games and its audit entries to the chain's recorder
/// (SPEC §10, §16), in one numbering.
///
/// The games are numbered in the SQLite transaction that ends them
/// (``GameStore/shipsRecords``); the shipper only reads what is numbered and
/// publishes it, in order, at QoS 1 on `<prefix>/<site>/records`. It never
/// touches a machine or the writer, so shipping can neither delay a game nor
/// hold a machine's lock.
///
/// The recorder's retained acknowledgement (`{"epoch":E,"upto":N}`) says
/// what is safe. It counts only for this file's epoch: a site whose SQLite
/// file was replaced (restored, reinstalled, lost) numbers its games from 1
/// again in a new epoch, and the acknowledgement of the old one says
/// nothing of them, so they are shipped from the start.
/// At most ``window`` records are in flight above it; each acknowledgement
/// that moves it sends the next ones at once. After every connect, and when
/// the acknowledgement has not moved for `chain.resend_interval` while records
/// are out, everything above it is sent again, in order: the recorder writes
/// each game once however often it comes.
final class RecordShipper: Sendable {
    /// Records in flight above the acknowledgement: enough to keep the
    /// recorder busy, few enough that a resend is cheap.
    static let window: Int64 = 1000

    private let store: GameStore
    private let site: String
    private let resendInterval: Duration
    private let clock: GameClock
    private let logger: Logger
    private let publish: @Sendable ([UInt8]) throws(MQTTError) -> Void
    private let state = Mutex(ShipState())

    private struct ShipState {
        /// The recorder's acknowledgement; nil until one arrived on this connection.
        var acked: Int64?
        /// The highest number published since the last rewind.
        var sent: Int64 = 0
        /// When the acknowledgement last moved, or the last rewind.
        var progressAt: Duration = .zero
        /// Connected and subscribed, since when: with no retained
        /// acknowledgement a second after that, the recorder has none.
        var upSince: Duration?
        var shipped = 0
        var resends = 0
        var lastNumber: Int64 = 0
    }

    /// What the shipper says of itself, for the metrics.
    struct Status: Sendable, Equatable {
        var acked: Int64
        var lastNumber: Int64
        var shipped: Int
        var resends: Int
    }

    init(
        store: GameStore, site: String, resendInterval: Duration, clock: GameClock, logger: Logger,
        publish: @escaping @Sendable ([UInt8]) throws(MQTTError) -> Void
    ) {
        self.store = store
        self.site = site
        self.resendInterval = resendInterval
        self.clock = clock
        self.logger = logger
        self.publish = publish
    }

    var status: Status {
        state.withLock { Status(acked: $0.acked ?? 0, lastNumber: $0.lastNumber, shipped: $0.shipped, resends: $0.resends) }
    }

    /// The link is up and its subscriptions granted: start over from the
    /// acknowledgement, which the cluster sends again (retained).
    func linkUp() {
        let now = clock.now()
        state.withLock { state in
            state.acked = nil
            state.sent = 0
            state.upSince = now
            state.progressAt = now
        }
    }

    func linkDown() {
        state.withLock { $0.upSince = nil }
    }

    /// The recorder's retained acknowledgement arrived. Returns whether it
    /// moved, i.e. whether there is room to send more now.
    @discardableResult
    func acknowledged(_ ack: ChainRecordsAck) -> Bool {
        let now = clock.now()
        let epoch = store.epoch.id
        return state.withLock { state in
            guard ack.epoch == epoch else {
                // Another file's numbering: this one's is unacknowledged, from its start.
                guard state.acked == nil else { return false }
                state.acked = 0
                state.progressAt = now
                return true
            }
            guard ack.upto > (state.acked ?? -1) else { return false }
            state.acked = ack.upto
            state.sent = max(state.sent, ack.upto)
            state.progressAt = now
            return true
        }
    }

    /// Publishes what is due: the next records within the window, or all
    /// above the acknowledgement again when it has not moved for the resend
    /// interval. Reads SQLite on GRDB's reader; call it from one task.
    func ship() async {
        let now = clock.now()
        let from: Int64? = state.withLock { state in
            guard let upSince = state.upSince else { return nil }
            if state.acked == nil {
                // No retained acknowledgement a second after subscribing: the
                // recorder never acknowledged this site, everything is due.
                guard now - upSince >= .seconds(1) else { return nil }
                state.acked = 0
                state.progressAt = now
            }
            let acked = state.acked ?? 0
            if state.sent > acked, now - state.progressAt >= resendInterval {
                state.sent = acked
                state.progressAt = now
                state.resends += 1
            }
            return state.sent
        }
        guard let from else { return }
        do {
            let epoch = store.epoch
            let last = try await store.lastRecordNumber() - epoch.base
            if state.withLock({ ($0.acked ?? 0) > last }) {
                // The chain holds more of this epoch than the file: a backup
                // was put back. Its games from now on are a new epoch's, from 1.
                let started = try await store.startEpoch()
                logger.warning(
                    "The chain holds more game records of this file's epoch than the file: it was restored from a backup. A new epoch starts",
                    metadata: ["chain.epoch": .string(started.id), "chain.epoch_base": "\(started.base)"])
                state.withLock { state in
                    state.acked = 0
                    state.sent = 0
                    state.progressAt = now
                }
                return
            }
            state.withLock { $0.lastNumber = last }
            let room = state.withLock { ($0.acked ?? 0) + Self.window - from }
            guard last > from, room > 0 else { return }
            let records = try await store.shipments(of: epoch, after: from, limit: Int(min(room, Self.window)))
            for (seq, record) in records {
                switch record {
                case .game(let game): try publish(ChainRecord(site: site, epoch: epoch.id, seq: seq, game: game).payload)
                case .audit(let entry): try publish(ChainAuditRecord(site: site, epoch: epoch.id, seq: seq, audit: entry).payload)
                }
                state.withLock { state in
                    // A rewind or a reconnect in between starts over; never go back.
                    if state.sent == seq - 1 {
                        state.sent = seq
                        state.shipped += 1
                    }
                }
            }
        } catch let error as StorageError {
            logger.warning("Game records not read for shipping", metadata: error.shape.metadata())
        } catch let error as MQTTError {
            logger.debug("Game records not shipped now; sent again later", metadata: error.shape.metadata())
        } catch {
            logger.warning("Game records not shipped", metadata: ["error.message": "\(error)"])
        }
    }
}
