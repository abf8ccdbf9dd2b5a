import Logging
import Protocol
import ServiceLifecycle

/// Publishes every machine's `claw/<m>/stats` and the gateway's
/// `claw/gateway/stats` every `gateway.stats_interval` (SPEC §4), as a video
/// SDK reports `onStat`: figures for the interval just ended, zeros for an
/// idle machine, never retained, each message expiring after one interval
/// so that nobody ever reads a stale figure as a current one.
///
/// Ticks are on the game clock at fixed multiples of the interval from the
/// start; a tick that comes late (a suspended process) is not made up for.
/// While the broker is away the figures are still taken (and lost): the
/// next message covers its own interval only.
struct StatsService: Service {
    /// Publishes one message, not retained, QoS 0, with this MQTT v5 expiry in seconds.
    typealias Publish = @Sendable (_ topic: String, _ payload: [UInt8], _ expiry: UInt32) throws(MQTTError) -> Void

    let arcade: Arcade
    let interval: Duration
    let gatewayID: String
    let topics: Topics
    let clock: GameClock
    /// When the first interval began, on `clock`: ticks fall at its multiples.
    let start: Duration
    /// Connections the MQTT client has made so far.
    let connects: @Sendable () -> Int
    let publish: Publish
    /// The dashboard's feed, which gets the figures even while the broker is away.
    var feed: ArcadeFeed?
    let logger: Logger

    func run() async throws {
        guard interval > .zero else {
            // Off: stay until the group stops, as every service does.
            try? await gracefulShutdown()
            return
        }
        try? await cancelWhenGracefulShutdown {
            var previousConnects = connects()
            var next = 1
            while !Task.isCancelled {
                try await clock.sleep(start + interval * next)
                let now = clock.moment()
                let total = connects()
                tick(at: now, reconnects: Swift.max(0, total - Swift.max(previousConnects, 1)))
                previousConnects = Swift.max(previousConnects, total)
                // The next multiple of the interval after now: a late tick is not made up for.
                next = Int(((now.uptime - start) / interval).rounded(.down)) + 1
            }
        }
    }

    /// One round of messages: every machine's, then the gateway's.
    func tick(at now: Moment, reconnects: Int) {
        let expiry = UInt32(max(1, interval.seconds.rounded(.up)))
        var failures = 0
        for machine in arcade.machines {
            let payload = machine.takeStats(at: now, interval: interval).encoded()
            feed?.stats(machine.index, payload)
            do {
                try publish(machine.topics.stats, payload, expiry)
            } catch {
                failures += 1
            }
        }
        let (notifications, replies) = GatewayMetrics.takeInterval()
        let report = GatewayStatsReport(
            gateway: gatewayID, ts: Timestamp.string(now.wall), intervalSeconds: interval.seconds,
            uptimeSeconds: Int(now.uptime.seconds), notifications: notifications, replies: replies, mqttReconnects: reconnects)
        let payload = report.encoded()
        feed?.gatewayStats(payload)
        do {
            try publish(topics.gatewayStats, payload, expiry)
        } catch {
            failures += 1
        }
        if failures > 0 {
            logger.debug("Statistics not published", metadata: ["stats.unpublished": .stringConvertible(failures)])
        }
    }
}
