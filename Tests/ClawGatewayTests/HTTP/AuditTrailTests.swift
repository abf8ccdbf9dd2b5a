import Foundation
import GRDB
import Logging
import Protocol
import Testing

@testable import ClawGateway

/// The audit trail (SPEC §16) below HTTP: every admin route that changes
/// something is known to write it, the store keeps it append-only, and each
/// change's entry is written in the change's own transaction.
@Suite struct AuditTrailTests {
    static let prize = MachinePrize(id: "plush", name: "Plush", cost: 4, exchange: 2)

    /// Every admin route that changes something, and the action its entry
    /// names. A route added behind the admin token without a line here fails
    /// ``everyAdminRouteThatChangesSomethingIsKnownToWriteTheTrail()``; each
    /// line is exercised for its entry by AuditEndToEndTests (machine,
    /// stock, ship, correct), the tests below (hold, shipped, delivered,
    /// adjust, exchange, settings, reset, skip, remove).
    static let changes: [String: AuditAction] = [
        "POST /v1/machines/{id}/pause": .pause,
        "POST /v1/machines/{id}/resume": .resume,
        "POST /v1/machines/{id}/skip": .skip,
        "POST /v1/machines/{id}/reset": .reset,
        "POST /v1/machines/{id}/maintenance": .maintenance,
        "PUT /v1/machines/{id}/settings": .settings,
        "DELETE /v1/machines/{id}/settings": .settings,
        "DELETE /v1/machines/{id}/queue/{accid}": .remove,
        "POST /v1/machines/{id}/stock": .stock,
        "POST /v1/machines/{id}/games/{game}/evidence/hold": .hold,
        "POST /v1/machines/{id}/games/{game}/correct": .correct,
        "POST /v1/players/{provider}/{account}/adjust": .adjust,
        "POST /v1/players/{provider}/{account}/prizes/ship": .ship,
        "POST /v1/players/{provider}/{account}/prizes/exchange": .exchange,
        "POST /v1/parcels/{parcel}/shipped": .shipped,
        "POST /v1/parcels/{parcel}/delivered": .delivered,
    ]

    /// The routes that change something and are not an operator's: the IM
    /// copies and the payment service's signed top-up.
    static let notOperators: Set<String> = ["POST /im/netease", "POST /v1/notifications", "POST /v1/credits/topups"]

    @Test func everyAdminRouteThatChangesSomethingIsKnownToWriteTheTrail() async throws {
        let game = try await GameHarness.online(prize: Self.prize)
        var config = GameHarness.config(settings: GameSettings(), prize: Self.prize)
        config.http.adminToken = "admin-token-0123456789"
        config.http.readToken = "read-token-0123456789"
        config.im = IMSettings(
            netease: NetEaseSettings(
                appKey: "k", appSecret: "s", apiBase: "http://127.0.0.1:1", callbackPath: "/im/netease", maxClockSkew: .seconds(300),
                replyTimeout: .seconds(5), replyConcurrency: 4),
            generic: GenericSettings(
                secret: "generic-secret-0123456789", outboundURL: nil, maxClockSkew: .seconds(300), replyTimeout: .seconds(5), replyConcurrency: 4))
        config.credits = CreditsSettings(topupSecret: "top-up-secret-0123456789")
        config.prizes = PrizeSettings()
        config.evidence = EvidenceSettings(dir: game.directory.appendingPathComponent("evidence").path)
        let logger = Logger(label: "test")
        let wallets = try Wallets(settings: config.credits!, writer: game.writer, logger: logger)
        let parts = HTTPServer.Dependencies(
            config: config, arcade: game.arcade, ingress: Ingress(arcade: game.arcade, im: config.im, logger: logger, now: { Date() }),
            isBrokerConnected: { true }, metrics: nil, feed: nil, uptime: { .zero }, now: { Date() }, chainProblem: { nil }, appServer: nil,
            wallets: wallets,
            evidence: EvidenceKeeper(settings: config.evidence!, machines: config.machines, store: game.writer.store, clock: game.gameClock, logger: logger),
            prizes: PrizeDesk(settings: PrizeSettings(), writer: game.writer, wallets: wallets, clock: game.gameClock, logger: logger, tell: { _ in }),
            logger: logger)
        let router = HTTPServer.router(parts)
        let changing = Set(router.routes.filter { $0.method != .get && $0.method != .head }.map(\.description))
        let unknown = changing.subtracting(Self.changes.keys).subtracting(Self.notOperators)
        #expect(unknown.isEmpty, "admin routes that change something with no audit entry known: \(unknown.sorted())")
        let gone = Set(Self.changes.keys).subtracting(changing)
        #expect(gone.isEmpty, "listed here, not in the router: \(gone.sorted())")
        let routes = Set(router.routes.map(\.description))
        #expect(routes.contains("GET /v1/audit"))
        await game.stop()
    }

    @Test func theTrailIsNeverChangedNorDeleted() async throws {
        let game = try await GameHarness.online()
        let entry = AuditDraft.byTest(.pause).entry(before: AuditValue(["paused": false]), after: AuditValue(["paused": true]), at: Date())
        let ticket = game.writer.submit([.audit(entry)], machine: -1)
        #expect(await game.writer.waitDurable(ticket, timeout: .seconds(5)))
        let store = game.writer.store
        let kept = try await store.audit(AuditQuery())
        #expect(kept.count == 1 && kept.first?.operatorName == "tester" && kept.first?.after == .object(["paused": .bool(true)]))
        #expect(throws: (any Error).self) { try store.pool.write { db in try db.execute(sql: "UPDATE audit SET operator = 'nobody'") } }
        #expect(throws: (any Error).self) { try store.pool.write { db in try db.execute(sql: "DELETE FROM audit") } }
        #expect(try await store.audit(AuditQuery()).count == 1)
        await game.stop()
    }

    /// Each machine change's entry is in the writes of the change itself, so
    /// they are committed together or not at all; a refused change is none.
    @Test func aMachineChangeCarriesItsEntryInItsOwnWrite() async throws {
        let game = try await GameHarness.online(prize: Self.prize)
        let store = game.writer.store
        var five = MachineSettings()
        five.guaranteeAfter = 5
        let (changed, ticket) = game.machine.setSettings(five, .byTest(.settings, reason: "promotion"))
        #expect(changed)
        #expect(await game.writer.waitDurable(try #require(ticket), timeout: .seconds(5)))
        let (refused, none) = game.machine.restock(.add(1), reason: "x", .byTest(.stock))
        #expect(refused == .notCounted && none == nil, "a refused restock writes nothing, no entry either")
        _ = game.machine.skip(.byTest(.skip))
        _ = game.machine.remove(accid: "nobody", provider: nil, .byTest(.remove))
        await game.settle()
        let entries = try await store.audit(AuditQuery())
        #expect(entries.map(\.action).contains(.settings) && !entries.map(\.action).contains(.stock) && !entries.map(\.action).contains(.remove))
        let settings = try #require(entries.first { $0.action == .settings })
        #expect(settings.reason == "promotion")
        if case .object(let after) = settings.after, case .object(let board) = after["settings"] {
            #expect(board["guarantee_after"] == .number(5))
        } else {
            Issue.record("the settings after the change: \(settings.after)")
        }
        #expect(entries.contains { $0.action == .skip }, "a skip with nobody to skip is still the operator's action")
        await game.stop()
    }

    @Test func aHoldIsWrittenWithItsEntry() async throws {
        let game = try await GameHarness.online()
        let store = game.writer.store
        try await store.keep([EvidenceRow(game: "g1", machine: "m1", camera: "1", path: nil, durationSeconds: nil, missing: "test", endedAt: Date())])
        #expect(try await store.hold(machine: "m1", game: "g1", held: true, reason: "dispute 7", audit: .byTest(.hold, target: "game/m1/g1", reason: "dispute 7")) == 1)
        #expect(try await store.hold(machine: "m1", game: "none", held: true, reason: "x", audit: .byTest(.hold)) == 0)
        let entries = try await store.audit(AuditQuery(action: .hold))
        #expect(entries.count == 1 && entries.first?.target == "game/m1/g1", "no entry for a hold that touched nothing")
        #expect(entries.first?.before == .object(["held": .bool(false)]))
        #expect(entries.first?.after == .object(["held": .bool(true), "reason": .string("dispute 7")]))
        await game.stop()
    }

    /// `plays_until_guarantee` wherever a machine is shown to players (SPEC §16).
    @Test func theOddsAreShownWhereverAMachineIsShown() throws {
        let snapshot = QueueSnapshot(
            machine: "m1", seq: 1, state: .idle, online: true, paused: false, player: nil, waiting: [], playsUntilGuarantee: 2)
        let config = GameHarness.config(settings: GameSettings()).machines[0]
        for encoded in [
            JSONCoding.encode(snapshot), JSONCoding.encode(MachineObject(config, snapshot)),
            JSONCoding.encode(RoomInfo(config, snapshot, onlineUserCount: 0)),
        ] {
            #expect(String(decoding: encoded, as: UTF8.self).contains(#""plays_until_guarantee":2"#))
        }
        var none = snapshot
        none.playsUntilGuarantee = nil
        #expect(!String(decoding: JSONCoding.encode(RoomInfo(config, none, onlineUserCount: 0)), as: UTF8.self).contains("plays_until"))
    }

    @Test func theOddsCountDownToTheStrongGameAndStayAtZeroUntilAWin() async throws {
        let game = try await GameHarness.online(prize: Self.prize)
        var two = MachineSettings()
        two.guaranteeAfter = 2
        _ = game.machine.setSettings(two, .byTest(.settings, reason: "odds"))
        await game.settle()
        func play(_ won: Bool) async throws -> String {
            try await game.play("alice")
            let session = try #require(game.offer(to: "alice"))
            let coin = try #require(game.commands.last { $0.code == .addCoins && $0.session == session })
            await game.ack(try #require(coin.serial))
            await game.result(won, session: session)
            return session
        }
        #expect(game.machine.currentSnapshot().playsUntilGuarantee == 2)
        _ = try await play(false)
        #expect(game.machine.currentSnapshot().playsUntilGuarantee == 1)
        _ = try await play(false)
        #expect(game.machine.currentSnapshot().playsUntilGuarantee == 0)
        let strong = try await play(false)
        #expect(game.machine.currentSnapshot().playsUntilGuarantee == 0, "0 after a strong game lost, until a win")
        #expect(try game.games().first { $0.id == strong } != nil)
        // A correction moves the figures, not the count (SPEC §16).
        let corrections = GameCorrections(arcade: game.arcade, prizes: nil)
        let record = try await corrections.correct(machine: game.machine, game: strong, to: .won, reason: "replay", audit: .byTest(.correct))
        #expect(record.corrected?.outcome == .won && record.outcome == .lost)
        #expect(game.machine.currentSnapshot().playsUntilGuarantee == 0)
        let report = try await game.writer.store.fairness(
            machine: "m1", from: GameHarness.epoch.addingTimeInterval(-1), to: GameHarness.epoch.addingTimeInterval(86400), credits: false)
        let figures = report.figures
        #expect(figures.games == 3 && figures.wins == 1 && figures.strongGames == 1 && figures.strongWins == 1, "\(report)")
        #expect(figures.prizeCost == Self.prize.cost && figures.payout == nil)
        _ = try await play(true)
        #expect(game.machine.currentSnapshot().playsUntilGuarantee == 2)
        await game.stop()
    }

    /// A win taken back while its player exchanges the prize, both at once
    /// (SPEC §16, the done-when's race): one of the two happens, never both;
    /// whichever loses is refused naming what the other did, and the stock
    /// and the ledger follow the one that happened.
    @Test(arguments: 0..<4) func aCorrectionRacingTheExchangeOfItsPrizeNeverBothHappen(_ round: Int) async throws {
        let game = try await GameHarness.online(prize: PrizeDeskTests.prize)
        _ = game.machine.restock(.set(5), reason: "opening", .byTest(.stock))
        let wallets = try Wallets(settings: CreditsSettings(price: 0, topupSecret: ""), writer: game.writer, logger: Logger(label: "test"))
        let desk = PrizeDesk(
            settings: PrizeSettings(), writer: game.writer, wallets: wallets, clock: game.gameClock, logger: Logger(label: "test"), tell: { _ in })
        let corrections = GameCorrections(arcade: game.arcade, prizes: desk)
        let id = try await PrizeDeskTests.win(game, "alice")
        let session = String(id.dropFirst(2))
        let alice = PlayerAddress(accid: "alice", provider: "test")
        async let exchanged: PrizeRefusal? = {
            do throws(PrizeRefusal) {
                _ = try await desk.exchange(id, of: alice, audit: nil)
                return nil
            } catch {
                return error
            }
        }()
        async let corrected: String? = {
            do {
                _ = try await corrections.correct(machine: game.machine, game: session, to: .lost, reason: "race \(round)", audit: .byTest(.correct))
                return nil
            } catch let refusal as Refusal {
                return refusal.code
            } catch {
                return "\(error)"
            }
        }()
        let (exchange, correction) = await (exchanged, corrected)
        if exchange == nil {
            #expect(correction == "prize_gone", "exchanged first: the win stays")
            #expect(wallets.balance(of: alice) == PrizeDeskTests.prize.exchange)
            #expect(game.machine.prizeStock.stock == 4)
        } else {
            #expect(exchange == .notHeld(id, .voided), "voided first: nothing to exchange")
            #expect(correction == nil)
            #expect(wallets.balance(of: alice) == 0)
            #expect(game.machine.prizeStock.stock == 5, "the prize back in the machine")
        }
        let corrections_ = try await game.writer.store.audit(AuditQuery(action: .correct))
        #expect(corrections_.count == (correction == nil ? 1 : 0))
        await game.stop()
    }

    /// Refusals change nothing and are no entries: a game in progress, one
    /// the machine did not decide, the outcome it already has, an unknown one.
    @Test func aCorrectionOfAGameInProgressOrUnknownIsRefused() async throws {
        let game = try await GameHarness.online()
        let corrections = GameCorrections(arcade: game.arcade, prizes: nil)
        func refusal(_ session: String, _ outcome: GameOutcome) async -> String? {
            do {
                _ = try await corrections.correct(machine: game.machine, game: session, to: outcome, reason: "x", audit: .byTest(.correct))
                return nil
            } catch {
                return (error as? Refusal)?.code ?? "\(error)"
            }
        }
        try await game.play("alice")
        let playing = try #require(game.offer(to: "alice"))
        await game.settle()
        #expect(await refusal(playing, .won) == "game_in_progress")
        #expect(await refusal("s-none", .won) == "unknown_game")
        let coin = try #require(game.commands.last { $0.code == .addCoins && $0.session == playing })
        await game.ack(try #require(coin.serial))
        await game.result(false, session: playing)
        #expect(await refusal(playing, .lost) == "no_change")
        _ = await game.join("bob")
        let declined = try #require(game.offer(to: "bob"))
        await game.advance(by: .seconds(11))
        #expect(try game.games().first { $0.id == declined }?.outcome == .expired)
        #expect(await refusal(declined, .won) == "not_correctable")
        #expect(try await game.writer.store.audit(AuditQuery()).isEmpty)
        #expect(game.players.to("alice").filter { $0.corrected == true }.isEmpty, "no one told of a correction that was not made")
        await game.stop()
    }
}
