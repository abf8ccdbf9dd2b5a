import Foundation
import Logging
import Protocol
import Synchronization

/// What a router knows of the chain's sites, all of it from the cluster
/// (SPEC §9): nothing is configured twice, and a router that restarts learns
/// it again from the retained messages.
///
/// - `<prefix>/<site>/gateway/directory` (retained): the site's machines,
///   and so who owns which IM account; an empty retained message forgets
///   the site.
/// - `<prefix>/<site>/gateway/heartbeat`: when the site was last heard of,
///   on the router's monotonic clock; a site is reachable while that is
///   less than ``heartbeatFreshness`` ago.
/// - `<prefix>/<site>/<machine>/state` (`online`/`offline`) and
///   `<prefix>/<site>/<machine>/queue` (the snapshot), both retained and
///   bridged from the site's broker: what `/v1/sites` shows of a machine.
///
/// An IM account (or a machine id, for a generic `to`) that two sites'
/// directories both claim belongs to neither, whichever kind of name each
/// site gives it: a copy for it is answered as for nobody's
/// (`unknown_machine`), and a claimed IM account is logged as an error
/// naming both sites when it appears. (Machine ids such as `m1` repeat
/// from site to site; in a chain players address machines by their IM
/// accounts, which are unique in the app.)
///
/// What a site's topics may make the router hold is bounded (SPEC §9, no
/// site speaks for another): a directory of at most ``maxMachines``
/// machines with names of bounded length, and for each of those machines
/// only its presence and a summary of its snapshot (the waiting list is
/// left out: `/v1/sites` shows its length). Presence and snapshots of
/// machines a site's directory does not list are dropped.
final class ChainSites: Sendable {
    /// A site is reachable while its last heartbeat is younger than this.
    static let heartbeatFreshness: Duration = .seconds(3)
    /// Machines in one site's directory, at most.
    static let maxMachines = 1000
    /// The longest machine id, IM account and name a directory may give.
    static let maxNameBytes = 128

    let prefix: String
    private let clock: GameClock
    private let logger: Logger
    private let state = Mutex(State())

    private struct State {
        var directories: [String: ChainDirectory] = [:]
        /// The last heartbeat of each site, on ``GameClock/now``.
        var heartbeats: [String: Duration] = [:]
        /// When the router last asked the cluster again for a site's
        /// directory because it heard the site without holding it.
        var directoryAsked: [String: Duration] = [:]
        var presence: [MachineKey: Bool] = [:]
        var snapshots: [MachineKey: QueueSnapshot] = [:]
        /// The sites whose directories name each IM account, and each machine id.
        var byAccount: [String: [String]] = [:]
        var byID: [String: [String]] = [:]
        /// Since when the router holds every subscription on its current
        /// connection; nil while it does not.
        var listeningSince: Duration?
        /// When the router last ran its one-second tick (``awake()``).
        var awakeAt: Duration?
    }

    /// What the router knows of a site's liveness (SPEC §9).
    enum Liveness: Sendable, Equatable {
        /// Its heartbeat is less than ``heartbeatFreshness`` old.
        case reachable
        /// Not heard for ``heartbeatFreshness`` while the router listened.
        case unreachable
        /// Not heard since the router (re)started listening, which was less
        /// than ``heartbeatFreshness`` ago, or the router itself has not run
        /// for ``stallAfter``: the router does not know yet.
        case unknown
    }

    private struct MachineKey: Hashable {
        var site: String
        var machine: String
    }

    /// Who a copy's `to` belongs to.
    enum Owner: Sendable, Equatable {
        case site(String)
        case nobody
        /// Claimed by two sites or more (sorted): routed to none of them.
        case disputed([String])
    }

    /// What a message of the router's subscriptions is about.
    enum Topic: Sendable, Equatable {
        case directory(site: String)
        case heartbeat(site: String)
        case receipt(site: String)
        case presence(site: String, machine: String)
        case snapshot(site: String, machine: String)
    }

    init(prefix: String, clock: GameClock, logger: Logger) {
        self.prefix = prefix
        self.clock = clock
        self.logger = logger
    }

    /// The topic filters that bring in everything above, and the receipts.
    var subscriptions: [String] {
        let every = ChainTopics.everySite(prefix: prefix)
        return [every.directory, every.heartbeat, every.inboxAck, every.machine("+", .state), every.machine("+", .queue)]
    }

    /// Reads a topic under the prefix; nil for anything else (the sites'
    /// own `gateway/state`, which the `+/+/state` filter also brings in).
    func parse(_ topic: String) -> Topic? {
        guard let (site, rest) = ChainTopics.split(topic, prefix: prefix) else { return nil }
        switch ChainTopics.Level(rawValue: rest) {
        case .directory: return .directory(site: site)
        case .heartbeat: return .heartbeat(site: site)
        case .inboxAck: return .receipt(site: site)
        default: break
        }
        let parts = rest.split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        guard parts.count == 2, !parts[0].isEmpty, parts[0] != Topics.reservedMachineID else { return nil }
        switch MachineTopic(rawValue: parts[1]) {
        case .state: return .presence(site: site, machine: parts[0])
        case .queue: return .snapshot(site: site, machine: parts[0])
        default: return nil
        }
    }

    /// How often the router asks again for the directory of a site it hears but has none of.
    static let directoryRetry: Duration = .seconds(5)

    /// Takes in one message of ``subscriptions`` (receipts are the router's).
    /// Returns the directory topic to subscribe to again when a site's
    /// heartbeat comes but its retained directory never did: a NATS node may
    /// miss a retained message published on another node the moment it
    /// subscribes, and subscribing again sends the retained message anew.
    @discardableResult
    func receive(_ topic: Topic, payload: [UInt8]) -> String? {
        switch topic {
        case .directory(let site): directory(site, payload)
        case .heartbeat(let site):
            let now = clock.now()
            let ask = state.withLock { state -> Bool in
                state.heartbeats[site] = now
                guard state.directories[site] == nil else {
                    state.directoryAsked[site] = nil
                    return false
                }
                // The first heartbeat may come before the retained directory
                // of the same subscription: give that a moment first.
                guard let asked = state.directoryAsked[site] else {
                    state.directoryAsked[site] = now - Self.directoryRetry + .seconds(2)
                    return false
                }
                guard now - asked >= Self.directoryRetry else { return false }
                state.directoryAsked[site] = now
                return true
            }
            if ask {
                logger.warning(
                    "A site's heartbeat without its directory: asking the cluster for the directory again",
                    metadata: ["chain.site": .string(site)])
                return ChainTopics(prefix: prefix, site: site).directory
            }
        case .presence(let site, let machine):
            let online: Bool? =
                switch String(decoding: payload, as: UTF8.self) {
                case Presence.online.rawValue: true
                case Presence.offline.rawValue: false
                default: nil
                }
            state.withLock { state in
                guard Self.lists(state, site: site, machine: machine) else { return }
                state.presence[MachineKey(site: site, machine: machine)] = online
            }
        case .snapshot(let site, let machine):
            var snapshot = payload.isEmpty ? nil : try? JSONDecoder().decode(QueueSnapshot.self, from: Data(payload))
            if let player = snapshot?.player,
                [player.accid, player.provider, player.nick, player.session, player.deadline ?? ""].contains(where: {
                    $0.utf8.count > Self.maxNameBytes
                })
            {
                snapshot?.player = nil
            }
            // Only the figures /v1/sites shows: the waiting list can be long.
            snapshot?.waiting = []
            state.withLock { state in
                guard Self.lists(state, site: site, machine: machine) else { return }
                state.snapshots[MachineKey(site: site, machine: machine)] = snapshot
            }
        case .receipt:
            break
        }
        return nil
    }

    /// Whether `site`'s directory lists `machine`: only those have a presence and a snapshot here.
    private static func lists(_ state: State, site: String, machine: String) -> Bool {
        state.directories[site]?.machines.contains { $0.id == machine } == true
    }

    private func directory(_ site: String, _ payload: [UInt8]) {
        var directory: ChainDirectory?
        if !payload.isEmpty {
            guard let decoded = try? JSONDecoder().decode(ChainDirectory.self, from: Data(payload)) else {
                logger.error(
                    "A site's directory is not JSON the router reads: kept what it had",
                    metadata: ["chain.site": .string(site), "chain.bytes": "\(payload.count)"])
                return
            }
            let long = decoded.machines.first { machine in
                [machine.id, machine.imAccount, machine.name].contains { $0.isEmpty || $0.utf8.count > Self.maxNameBytes }
                    || machine.price.map { !(1...ChainWalletAsk.maxCredits).contains($0) } == true
            }
            guard decoded.machines.count <= Self.maxMachines, long == nil else {
                logger.error(
                    "A site's directory is over the router's bounds: kept what it had",
                    metadata: [
                        "chain.site": .string(site), "chain.machines": "\(decoded.machines.count)",
                        "chain.max_machines": "\(Self.maxMachines)", "chain.max_name_bytes": "\(Self.maxNameBytes)",
                    ])
                return
            }
            directory = decoded
            // The topic says whose it is: a site's user may publish only under its own name.
            directory?.site = site
        }
        let (added, disputes) = state.withLock { state -> (Bool, [(String, [String])]) in
            let before = Set(Self.claimedTwice(state))
            let added = state.directories[site] == nil && directory != nil
            state.directories[site] = directory
            // What the directory no longer lists goes with it.
            let listed = Set(directory?.machines.map(\.id) ?? [])
            state.presence = state.presence.filter { $0.key.site != site || listed.contains($0.key.machine) }
            state.snapshots = state.snapshots.filter { $0.key.site != site || listed.contains($0.key.machine) }
            Self.index(&state)
            let disputes = Self.claimedTwice(state).filter { !before.contains($0) }
            return (added, disputes.map { ($0, Self.claimants(of: $0, state)) })
        }
        if let directory {
            logger.log(
                level: added ? .info : .debug, "Site directory received",
                metadata: ["chain.site": .string(site), "chain.machines": "\(directory.machines.count)"])
        } else {
            logger.info("Site directory removed: the site is forgotten", metadata: ["chain.site": .string(site)])
        }
        for (account, sites) in disputes {
            logger.error(
                "Two sites claim one IM account: copies for it go to neither until one directory drops it",
                metadata: ["im.account": .string(account), "chain.sites": .string(sites.joined(separator: ","))])
        }
    }

    private static func index(_ state: inout State) {
        state.byAccount = [:]
        state.byID = [:]
        for (site, directory) in state.directories.sorted(by: { $0.key < $1.key }) {
            for machine in directory.machines {
                if state.byAccount[machine.imAccount]?.contains(site) != true { state.byAccount[machine.imAccount, default: []].append(site) }
                if state.byID[machine.id]?.contains(site) != true { state.byID[machine.id, default: []].append(site) }
            }
        }
    }

    /// The sites that name `to`, as an IM account or as a machine id, sorted.
    private static func claimants(of to: String, _ state: State) -> [String] {
        Array(Set((state.byAccount[to] ?? []) + (state.byID[to] ?? []))).sorted()
    }

    /// IM accounts that two sites or more claim (as an account, or one's
    /// account as another's machine id), sorted: logged when they appear.
    private static func claimedTwice(_ state: State) -> [String] {
        state.byAccount.keys.filter { claimants(of: $0, state).count > 1 }.sorted()
    }

    /// The site that owns `to`: the one site that names it, as an IM account
    /// (NetEase's `to`) or a machine id (a generic `to`); two or more sites
    /// naming it, in either way, is a dispute.
    func owner(of to: String) -> Owner {
        state.withLock { state in
            let sites = Self.claimants(of: to, state)
            switch sites.count {
            case 0: return .nobody
            case 1: return .site(sites[0])
            default: return .disputed(sites)
            }
        }
    }

    /// The price `site`'s directory lists for the machine `to` names (its
    /// IM account, or its id): what a voucher for it carries (SPEC §9); nil
    /// where its games are free.
    func price(of to: String, at site: String) -> Int64? {
        state.withLock { state in
            state.directories[site]?.machines.first { $0.imAccount == to || $0.id == to }?.price
        }
    }

    func liveness(of site: String) -> Liveness {
        let now = clock.now()
        return state.withLock { Self.liveness(site, $0, now: now) }
    }

    private static func reachable(_ site: String, _ state: State, now: Duration) -> Bool {
        liveness(site, state, now: now) == .reachable
    }

    private static func liveness(_ site: String, _ state: State, now: Duration) -> Liveness {
        let last = state.heartbeats[site]
        if let last, now - last < heartbeatFreshness { return .reachable }
        // A router that has not run for a while (frozen, starved of the CPU)
        // has not read the heartbeats waiting for it either.
        if let awake = state.awakeAt, now - awake >= stallAfter { return .unknown }
        // A heartbeat from before the router listened again says nothing of now.
        guard let since = state.listeningSince else { return .unknown }
        if now - since < heartbeatFreshness, last.map({ $0 < since }) ?? true { return .unknown }
        return .unreachable
    }

    /// The router holds every subscription of a new connection: heartbeats flow from now.
    func listening() {
        let now = clock.now()
        state.withLock { state in
            if state.listeningSince == nil { state.listeningSince = now }
        }
    }

    /// A router whose one-second tick comes this late was not running: its
    /// silence says nothing of the sites.
    static let stallAfter: Duration = .seconds(2)

    /// Now, on the router's clock.
    var clockNow: Duration { clock.now() }

    /// When the router's tick last ran, on the router's clock.
    var lastAwake: Duration? {
        state.withLock { $0.awakeAt }
    }

    /// The router's tick ran: it is running. After a stall it listens again
    /// from now, as after a reconnection, so that a site whose heartbeats
    /// wait unread in its socket is not found unreachable for the router's
    /// own pause.
    func awake() {
        let now = clock.now()
        state.withLock { state in
            if let last = state.awakeAt, now - last >= Self.stallAfter, state.listeningSince != nil {
                state.listeningSince = now
            }
            state.awakeAt = now
        }
    }

    /// Whether the router may say a machine is in no site: it holds a
    /// directory and has listened ``heartbeatFreshness`` at least, so the
    /// retained directories of every site have come. A router just started
    /// or back (its connection new) answers a machine it does not know yet
    /// as unreachable for now, never as unknown: the IM service sends the
    /// copy again, and by then the directory is there.
    var settled: Bool {
        let now = clock.now()
        return state.withLock { state in
            guard !state.directories.isEmpty, let since = state.listeningSince else { return false }
            return now - since >= Self.heartbeatFreshness
        }
    }

    /// The router's connection is gone: what it hears of liveness stops.
    func deaf() {
        state.withLock { $0.listeningSince = nil }
    }

    /// Sites with a directory whose liveness the router does not know yet, sorted.
    var unknown: [String] {
        let now = clock.now()
        return state.withLock { state in state.directories.keys.filter { Self.liveness($0, state, now: now) == .unknown }.sorted() }
    }

    /// The sites with a directory, sorted: where the beats go.
    var known: [String] {
        state.withLock { $0.directories.keys.sorted() }
    }

    /// Snapshots held, and the waiting players they hold (tests: the bounds).
    var heldSnapshots: Int { state.withLock { $0.snapshots.count } }
    var heldWaiting: Int { state.withLock { $0.snapshots.values.map(\.waiting.count).reduce(0, +) } }

    /// Sites with a directory, and how many of them are reachable.
    var counts: (known: Int, reachable: Int) {
        let now = clock.now()
        return state.withLock { state in
            (state.directories.count, state.directories.keys.filter { Self.reachable($0, state, now: now) }.count)
        }
    }

    /// `GET /v1/sites`: every site with a directory, sorted, its machines in
    /// the directory's order.
    var list: SiteList {
        let now = clock.now()
        return state.withLock { state in
            SiteList(
                sites: state.directories.keys.sorted().map { site in
                    let directory = state.directories[site]
                    return SiteList.Site(
                        site: site, reachable: Self.reachable(site, state, now: now),
                        machines: (directory?.machines ?? []).map { machine in
                            let key = MachineKey(site: site, machine: machine.id)
                            return MachineObject(machine, online: state.presence[key], snapshot: state.snapshots[key])
                        })
                })
        }
    }
}

/// `{"sites":[{"site","reachable","machines":[…]}]}`: each machine as the
/// read API's machine object (SPEC §5, ``MachineObject``), with `null` for
/// what the cluster has not told the router (no snapshot yet; cameras,
/// which directories do not carry), plus its `im_account`.
struct SiteList: Encodable, Sendable {
    var sites: [Site]

    struct Site: Encodable, Sendable {
        var site: String
        var reachable: Bool
        var machines: [MachineObject]
    }
}
