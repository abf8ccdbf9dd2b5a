import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// SPEC §9, "No site spends another's money": what the chain's ledger asks
/// of a debit's voucher before it looks at the wallet, and how it serves
/// the sites' asks in turn.
@Suite struct VoucherTests {
    static let key = "routers-ledger-key-0123456789"
    static let now = Date(timeIntervalSince1970: 1_800_000_000)
    static let policy = VoucherPolicy(key: key, maxAge: .seconds(30))

    static func voucher(
        key: String = key, site: String = "arcade-1", account: String = "ann", session: String = "s1", copy: String = "r1-copy-1",
        age: Duration = .seconds(1), price: Int64 = 2
    ) -> ChainVoucher {
        ChainVoucher(
            key: key, site: site, provider: "netease", account: account, session: session, copy: copy,
            receivedMS: ChainCopy.milliseconds(now) - age.milliseconds, price: price)
    }

    static func debit(_ voucher: ChainVoucher?, credits: Int64 = 2, account: String = "ann", session: String = "s1") -> ChainWalletAsk {
        ChainWalletAsk(kind: .debit, session: session, provider: "netease", account: account, credits: credits, machine: "m1", voucher: voucher)
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var ask: ChainWalletAsk
        var site = "arcade-1"
        var policy = VoucherTests.policy
        var refused: Bool
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "the routers' voucher for this site, player, session and price", ask: debit(voucher()), refused: false),
        Case(name: "no voucher", ask: debit(nil), refused: true),
        Case(name: "a voucher of another key (a site's own)", ask: debit(voucher(key: "a-site-made-this-0000")), refused: true),
        Case(name: "another site's voucher", ask: debit(voucher(site: "arcade-2")), refused: true),
        Case(name: "for another player", ask: debit(voucher(account: "bob")), refused: true),
        Case(name: "the player's voucher in another player's debit", ask: debit(voucher(), account: "bob"), refused: true),
        Case(name: "for another session", ask: debit(voucher(session: "s0")), refused: true),
        Case(name: "for another price", ask: debit(voucher(), credits: 3), refused: true),
        Case(name: "older than voucher_max_age", ask: debit(voucher(age: .seconds(31))), refused: true),
        Case(name: "from a router's clock far ahead", ask: debit(voucher(age: .seconds(-6))), refused: true),
        Case(name: "from a router's clock a little ahead", ask: debit(voucher(age: .seconds(-4))), refused: false),
        Case(name: "a copy id too long to be a router's", ask: debit(voucher(copy: String(repeating: "c", count: 129))), refused: true),
        Case(name: "the routers' voucher, but the recorder has no key", ask: debit(voucher()), policy: VoucherPolicy(key: nil, maxAge: .seconds(30)), refused: true),
        Case(
            name: "a refund needs none",
            ask: ChainWalletAsk(kind: .refund, session: "s1", provider: "netease", account: "ann", credits: 2, machine: "m1"), refused: false),
    ]

    @Test(arguments: cases) func aDebitNeedsTheRoutersVoucherForItsSitePlayerSessionAndPrice(_ test: Case) {
        let problem = test.policy.problem(test.ask, site: test.site, now: Self.now)
        #expect((problem != nil) == test.refused, "\(problem ?? "taken")")
    }

    /// Whatever a voucher's fields hold, no two sets of them are signed alike.
    @Test func aVouchersFieldsCannotBeShiftedFromOneToAnother() {
        let a = ChainVoucher(key: Self.key, site: "arcade-1", provider: "netease", account: "ann\n5:s1", session: "x", copy: "c", receivedMS: 1, price: 2)
        #expect(!a.isValid(key: Self.key, site: "arcade-1", provider: "netease", account: "ann", session: "s1\n1:x"))
        #expect(a.isValid(key: Self.key, site: "arcade-1", provider: "netease", account: "ann\n5:s1", session: "x"))
        let encoded = ChainCopy(id: "c", provider: "netease", received: Self.now, headers: [:], body: [1], voucher: a).payload
        #expect(ChainCopy.decode(encoded)?.voucher == a, "it travels with the copy")
    }

    /// One site's flood delays no other site's ask beyond the group it
    /// comes in: the sites are served in turn, each line is bounded.
    @Test func theSitesAreServedInTurnAndAFloodIsItsSitesOwnLoss() {
        var queues = SiteAskQueues<Int>(perSite: 100)
        for index in 0..<150 { _ = queues.append(index, site: "flood") }
        #expect(queues.waiting("flood") == 100, "a site's line is bounded")
        #expect(queues.append(1000, site: "honest") && queues.append(1001, site: "honest"))
        let first = queues.take(4)
        #expect(first.map(\.site) == ["flood", "honest", "flood", "honest"], "in turn, from the next group on")
        #expect(first.filter { $0.site == "honest" }.map(\.ask) == [1000, 1001], "each site's in the order they came")
        #expect(first.filter { $0.site == "flood" }.map(\.ask) == [0, 1])
        let rest = queues.take(1000)
        #expect(rest.count == 98 && rest.allSatisfy { $0.site == "flood" } && queues.count == 0)
        #expect(queues.take(10).isEmpty)
    }
}
