import Clocks
import Foundation
import Logging
import Protocol
import Testing

@testable import ClawGateway

/// A site's liveness as a router judges it (SPEC §9), on a test clock.
@Suite struct ChainSitesLivenessTests {
    let clock = TestClock<Duration>()
    let sites: ChainSites

    init() {
        sites = ChainSites(prefix: "claw", clock: GameClock(clock, wallNow: { Date() }), logger: Logger(label: "test"))
    }

    func heartbeat(_ site: String) {
        sites.receive(.heartbeat(site: site), payload: [])
    }

    /// Runs the router's tick every second for `seconds`, as its tick loop does.
    func run(for seconds: Int) async {
        for _ in 0..<seconds {
            await clock.advance(by: .seconds(1))
            sites.awake()
        }
    }

    /// A router just started, reconnected or back from a stall may not have
    /// every site's retained directory yet: it says no machine is nobody's
    /// until it has held one and listened for 3 s (a copy is answered
    /// `gateway_unavailable`, and sent again, rather than `unknown_machine`).
    @Test func aRouterSaysAMachineIsNobodysOnlyOnceSettled() async throws {
        #expect(!sites.settled, "not listening")
        sites.listening()
        sites.awake()
        #expect(!sites.settled, "no directory yet")
        let directory = ChainDirectory(site: "arcade-1", machines: [ChainDirectory.Machine(id: "m1", imAccount: "claw_m1", name: "M1")])
        _ = sites.receive(.directory(site: "arcade-1"), payload: JSONCoding.encode(directory))
        await run(for: 2)
        #expect(!sites.settled, "listening for 2 s")
        await run(for: 1)
        #expect(sites.settled)
        sites.deaf()
        #expect(!sites.settled, "the connection gone")
        sites.listening()
        await clock.advance(by: .seconds(5))
        sites.awake()
        #expect(!sites.settled, "after a stall, listening again from now")
        await run(for: 3)
        #expect(sites.settled)
    }

    @Test func aSiteSilentFor3sWhileTheRouterRanIsUnreachable() async {
        sites.listening()
        sites.awake()
        heartbeat("arcade-1")
        #expect(sites.liveness(of: "arcade-1") == .reachable)
        await run(for: 2)
        #expect(sites.liveness(of: "arcade-1") == .reachable)
        await run(for: 1)
        #expect(sites.liveness(of: "arcade-1") == .unreachable)
    }

    /// A router frozen or starved for 5 s finds the heartbeats of those
    /// 5 s waiting in its socket: until it has run again and listened for
    /// 3 s, its silence is its own, not the site's.
    @Test func aRouterThatDidNotRunKnowsNoSiteToBeDown() async {
        sites.listening()
        sites.awake()
        heartbeat("arcade-1")
        await clock.advance(by: .seconds(5))  // no tick: the router did not run
        #expect(sites.liveness(of: "arcade-1") == .unknown, "a copy taken before the tick runs is tried")
        sites.awake()
        #expect(sites.liveness(of: "arcade-1") == .unknown, "listening again, as after a reconnection")
        heartbeat("arcade-1")  // what waited in the socket
        #expect(sites.liveness(of: "arcade-1") == .reachable)

        // A site that really is silent is found out 3 s after the stall.
        await run(for: 3)
        #expect(sites.liveness(of: "arcade-1") == .unreachable)
    }

    @Test func aStalledRouterThatHearsNothingAfterwardsFindsTheSiteDown3sLater() async {
        sites.listening()
        sites.awake()
        heartbeat("arcade-1")
        await clock.advance(by: .seconds(4))
        sites.awake()
        await run(for: 2)
        #expect(sites.liveness(of: "arcade-1") == .unknown)
        await run(for: 1)
        #expect(sites.liveness(of: "arcade-1") == .unreachable)
    }

    @Test func aTickOnTimeChangesNothing() async {
        sites.listening()
        await run(for: 3)
        #expect(sites.liveness(of: "arcade-1") == .unreachable, "never heard in the 3 s the router listened")
    }
}

/// SPEC §9: the prices a site's directory lists are what the routers'
/// vouchers carry; a directory with one that is not a price is refused whole.
@Suite struct ChainSitesPriceTests {
    @Test func aDirectorysPricesAreKeptAndOneThatIsNoPriceRefusesIt() {
        let sites = ChainSites(prefix: "claw", clock: .system, logger: Logger(label: "test"))
        func directory(_ price: Int64?) -> [UInt8] {
            JSONCoding.encode(
                ChainDirectory(
                    site: "arcade-1",
                    machines: [.init(id: "m1", imAccount: "claw_a1", name: "A1", price: price), .init(id: "m2", imAccount: "claw_a2", name: "A2")]))
        }
        _ = sites.receive(.directory(site: "arcade-1"), payload: directory(3))
        #expect(sites.price(of: "claw_a1", at: "arcade-1") == 3 && sites.price(of: "m1", at: "arcade-1") == 3)
        #expect(sites.price(of: "claw_a2", at: "arcade-1") == nil, "free")
        for bad: Int64 in [0, -1, 1_000_001] {
            _ = sites.receive(.directory(site: "arcade-1"), payload: directory(bad))
            #expect(sites.price(of: "claw_a1", at: "arcade-1") == 3, "a price of \(bad) is none: the directory is refused")
        }
        #expect(sites.price(of: "claw_a1", at: "arcade-2") == nil, "another site's machine")
    }
}
