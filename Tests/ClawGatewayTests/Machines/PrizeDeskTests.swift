import Foundation
import GRDB
import Logging
import Protocol
import Synchronization
import Testing

@testable import ClawGateway

/// Prizes on a machine as the daemon runs it (SPEC §15): the machine's
/// lock, the storage writer and a real SQLite file, on a test clock; the
/// players' choices and the shipping through the site's ``PrizeDesk``.
@Suite struct PrizeDeskTests {
    static let prize = MachinePrize(id: "plush", name: "Plush 20 cm", cost: 4, exchange: 8, lowAt: 2)
    static let address = ShippingAddress(name: "Alice Li", phone: "+86 138 0000 0000", address: "1 Claw Street, Shanghai")

    /// Plays and wins a game for `player`: the prize's id.
    static func win(_ game: GameHarness, _ player: String) async throws -> String {
        try await game.play(player)
        let session = try #require(game.offer(to: player))
        let coin = try #require(game.commands.last { $0.code == .addCoins && $0.session == session }?.serial)
        await game.ack(coin)
        await game.result(true, session: session)
        return PrizeRow.id(ofGame: session)
    }

    /// What the stock log of `machine` adds up to, line by line: nil when a
    /// line does not follow from the one before (or goes below 0).
    static func replayedStock(_ db: Database, machine: String) throws -> Int64? {
        var stock: Int64?
        for row in try Row.fetchAll(db, sql: "SELECT kind, change, stock FROM stock_log WHERE machine = ? ORDER BY n", arguments: [machine]) {
            let (kind, change, after): (String, Int64, Int64) = (row["kind"], row["change"], row["stock"])
            let expected: Int64
            switch kind {
            case "set": expected = after
            case "add": expected = (stock ?? 0) + change
            case "won": expected = (stock ?? 0) - 1
            default: expected = stock ?? 0
            }
            guard expected == after, after >= 0 else { return nil }
            stock = after
        }
        return stock
    }

    /// Restocks from another thread while wins take one each: every change
    /// is one transition of the machine, so the stock is what the log adds
    /// up to, and every won game has its one prize and its one line.
    @Test func restocksRacingWinsLeaveTheStockTheLogAddsUpTo() async throws {
        let game = try await GameHarness.online(prize: Self.prize)
        #expect(game.machine.restock(.set(10), reason: "opening", .byTest(.stock)).0 == .stock(10))
        let adds = Task.detached {
            for _ in 0..<10 { _ = game.machine.restock(.add(1), reason: "topped up while playing", .byTest(.stock)) }
        }
        var prizes: [String] = []
        for index in 0..<10 { prizes.append(try await Self.win(game, "p\(index)")) }
        await adds.value
        await game.settle()
        #expect(game.snapshot.stock == 10)
        try game.writer.store.readNow { (db: Database) throws in
            #expect(try Self.replayedStock(db, machine: "m1") == 10)
            #expect(try Int64.fetchOne(db, sql: "SELECT stock FROM machine_stock WHERE machine = 'm1'") == 10)
            #expect(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM stock_log WHERE kind = 'won'") == 10)
            #expect(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM stock_log WHERE kind = 'add'") == 10)
            let won = try Set(String.fetchAll(db, sql: "SELECT id FROM games WHERE outcome = 'won'"))
            let made = try String.fetchAll(db, sql: "SELECT game FROM prizes")
            #expect(Set(made) == won && made.count == won.count && won.count == 10)
        }
        #expect(prizes.count == 10)
        await game.stop()
    }

    /// A stock line can be neither changed nor deleted; a stock never goes
    /// below 0; a prize moves only forward, into one parcel.
    @Test func theFileRefusesWhatMustNeverHappen() async throws {
        let game = try await GameHarness.online(prize: Self.prize)
        _ = game.machine.restock(.set(3), reason: "opening", .byTest(.stock))
        let id = try await Self.win(game, "alice")
        await game.stop()
        let store = try GameStore(path: GameHarness.databasePath(in: game.directory))
        let refused: [String] = [
            "UPDATE stock_log SET stock = 9",
            "DELETE FROM stock_log",
            "UPDATE machine_stock SET stock = -1",
            "UPDATE prizes SET state = 'shipped' WHERE id = '\(id)'",
            "DELETE FROM prizes",
            "INSERT INTO prizes (id, game, machine, provider, account, prize, name, cost, exchange, won_at) SELECT 'x', game, machine, provider, account, prize, name, cost, exchange, won_at FROM prizes",
        ]
        for sql in refused {
            #expect(throws: (any Error).self, "\(sql)") { try store.pool.write { db in try db.execute(sql: sql) } }
        }
        try store.writeNow { (db: Database) throws in
            try db.execute(sql: "INSERT INTO parcels (id, provider, account, state, created_at) VALUES ('a', 'test', 'alice', 'to_ship', 'now')")
            try db.execute(sql: "INSERT INTO parcels (id, provider, account, state, created_at) VALUES ('b', 'test', 'alice', 'to_ship', 'now')")
            try db.execute(sql: "UPDATE prizes SET state = 'to_ship', parcel = 'a' WHERE id = ?", arguments: [id])
        }
        #expect(throws: (any Error).self, "into a second parcel") {
            try store.pool.write { db in try db.execute(sql: "UPDATE prizes SET parcel = 'b' WHERE id = ?", arguments: [id]) }
        }
        #expect(throws: (any Error).self, "shipped and exchanged") {
            try store.pool.write { db in try db.execute(sql: "UPDATE prizes SET state = 'exchanged', parcel = NULL WHERE id = ?", arguments: [id]) }
        }
        #expect(throws: (any Error).self, "a parcel skipping shipped") {
            try store.pool.write { db in try db.execute(sql: "UPDATE parcels SET state = 'delivered' WHERE id = 'b'") }
        }
        try store.writeNow { (db: Database) throws in
            try db.execute(sql: "UPDATE parcels SET state = 'shipped' WHERE id = 'a'")
            try db.execute(sql: "UPDATE parcels SET state = 'delivered' WHERE id = 'a'")
        }
        #expect(throws: (any Error).self, "a parcel backwards") {
            try store.pool.write { db in try db.execute(sql: "UPDATE parcels SET state = 'shipped' WHERE id = 'a'") }
        }
        try store.close()
    }

    /// Ship, shipped, delivered: each a step forward, told to the player; a
    /// refusal changes nothing; the address is forgotten `forget_address`
    /// after delivery, as the desk's (test) clock has it.
    @Test func aParcelGoesForwardIsToldAndItsAddressIsForgottenAfterDelivery() async throws {
        let told = Mutex<[PlayerReply]>([])
        let game = try await GameHarness.online(prize: Self.prize)
        let desk = PrizeDesk(
            settings: PrizeSettings(forgetAddress: .seconds(90 * 86400)), writer: game.writer, wallets: nil, clock: game.gameClock,
            logger: Logger(label: "test"), tell: { reply in told.withLock { $0.append(reply) } })
        let alice = PlayerAddress(accid: "alice", provider: "test")
        let first = try await Self.win(game, "alice")
        let second = try await Self.win(game, "alice")
        let bobs = try await Self.win(game, "bob")

        await #expect(throws: PrizeRefusal.unknownPrize(bobs)) { try await desk.ship([first, bobs], of: alice, to: Self.address, audit: nil) }
        await #expect(throws: PrizeRefusal.unknownPrize("p-none")) { try await desk.ship(["p-none"], of: alice, to: Self.address, audit: nil) }
        await #expect(throws: PrizeRefusal.notExchangeable(first), "free games: nothing to exchange for") {
            try await desk.exchange(first, of: alice, audit: nil)
        }
        let parcel = try await desk.ship([first], of: alice, to: Self.address, audit: nil)
        #expect(parcel.state == .toShip && parcel.prizes == [first] && parcel.address == Self.address)
        await #expect(throws: PrizeRefusal.notHeld(first, .toShip), "never in two parcels") {
            try await desk.ship([second, first], of: alice, to: Self.address, audit: nil)
        }
        await #expect(throws: PrizeRefusal.parcelState(parcel.id, .toShip)) { try await desk.delivered(parcel.id, audit: .byTest(.delivered)) }
        let shipped = try await desk.shipped(parcel.id, carrier: "SF Express", tracking: "SF1234567890", audit: .byTest(.shipped))
        #expect(shipped.state == .shipped && shipped.tracking == "SF1234567890")
        await #expect(throws: PrizeRefusal.parcelState(parcel.id, .shipped)) {
            try await desk.shipped(parcel.id, carrier: "Other", tracking: "X1", audit: .byTest(.shipped))
        }
        let delivered = try await desk.delivered(parcel.id, audit: .byTest(.delivered))
        #expect(delivered.state == .delivered)
        await #expect(throws: PrizeRefusal.unknownParcel("parcel-none")) { try await desk.delivered("parcel-none", audit: .byTest(.delivered)) }

        let list = try await desk.prizes(of: alice, limit: 10, offset: 0)
        #expect(list.map(\.prize.id) == [second, first])
        #expect(list.map(\.prize.state) == [.held, .delivered])
        #expect(list.last?.parcel?.tracking == "SF1234567890")
        let states = told.withLock { $0 }.filter { $0.message.code == .prizeChanged && $0.message.data == first }.map(\.message.state)
        #expect(states == ["to_ship", "shipped", "delivered"])
        #expect(told.withLock { $0 }.last { $0.message.data == first }?.message.tracking == "SF1234567890")

        // Kept for 90 days after the delivery, to the second.
        await game.advance(by: .seconds(90 * 86400 - 1))
        #expect(await desk.forgetAddresses() == 0)
        #expect(try await desk.parcels(state: .delivered, limit: 10, offset: 0).first?.address == Self.address)
        await game.advance(by: .seconds(1))
        #expect(await desk.forgetAddresses() == 1)
        let forgotten = try await desk.parcels(state: .delivered, limit: 10, offset: 0)
        #expect(forgotten.count == 1 && forgotten.first?.address == nil && forgotten.first?.tracking == "SF1234567890")
        #expect(await desk.forgetAddresses() == 0)
        await game.stop()
    }

    /// One prize exchanged many times at once: one entry in the ledger, one
    /// answer taken, every other one refused naming `exchanged`.
    @Test func aPrizeExchangedManyTimesAtOnceIsCreditedOnce() async throws {
        let game = try await GameHarness.online(prize: Self.prize)
        let wallets = try Wallets(settings: CreditsSettings(price: 0, topupSecret: ""), writer: game.writer, logger: Logger(label: "test"))
        let told = Mutex<[PlayerReply]>([])
        let desk = PrizeDesk(
            settings: PrizeSettings(), writer: game.writer, wallets: wallets, clock: game.gameClock, logger: Logger(label: "test"),
            tell: { reply in told.withLock { $0.append(reply) } })
        let id = try await Self.win(game, "alice")
        let alice = PlayerAddress(accid: "alice", provider: "test")
        let outcomes = await withTaskGroup(of: Result<Int64, PrizeRefusal>.self) { group in
            for _ in 0..<8 {
                group.addTask {
                    do throws(PrizeRefusal) { return .success(try await desk.exchange(id, of: alice, audit: nil).balance) } catch { return .failure(error) }
                }
            }
            var all: [Result<Int64, PrizeRefusal>] = []
            for await outcome in group { all.append(outcome) }
            return all
        }
        #expect(outcomes.filter { (try? $0.get()) == 8 }.count == 1, "\(outcomes)")
        #expect(outcomes.filter { if case .failure(.notHeld(id, .exchanged)) = $0 { true } else { false } }.count == 7, "\(outcomes)")
        #expect(wallets.balance(of: alice) == 8)
        await game.stop()
        let store = try GameStore(path: GameHarness.databasePath(in: game.directory))
        try store.readNow { (db: Database) throws in
            #expect(try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ledger WHERE kind = 'exchange' AND key = ?", arguments: [id]) == 1)
            #expect(try String.fetchOne(db, sql: "SELECT state FROM prizes WHERE id = ?", arguments: [id]) == "exchanged")
        }
        #expect(try store.walletsOutOfBalance().isEmpty)
        try store.close()
        let replies = told.withLock { $0 }
        #expect(replies.filter { $0.message.code == .creditsChanged && $0.message.reason == "exchange" }.map(\.message.data) == ["8"])
        #expect(replies.filter { $0.message.code == .prizeChanged }.map(\.message.state) == ["exchanged"])
    }
}

extension GameStore {
    /// Reads on the caller's thread: in an async test GRDB's async read is the one chosen otherwise.
    func readNow<T>(_ body: (Database) throws -> T) throws -> T { try pool.read(body) }
    func writeNow<T>(_ body: (Database) throws -> T) throws -> T { try pool.write(body) }
}
