import Foundation
import Logging
import PostgresNIO
import Testing

@testable import ClawGateway

extension DatabaseSuites {
    /// The recorder's store against a real PostgreSQL 15: what the history's
    /// readers may take of the database.
    @Suite struct RecorderStoreTests {
        /// SPEC §10: reads cannot starve writes. Before, every read took a
        /// connection of the writer's pool for as long as PostgreSQL ran it
        /// (a huge `offset` scans and skips every row before it): eight slow
        /// readers held all eight, and the chain's records waited behind them.
        @Test func slowReadersLeaveTheWriterItsConnections() async throws {
            let database = try PostgresServer.start()
            defer { database.stop() }
            let url = try DatabaseURL.parse(database.url).get()
            let store = RecorderStore(url: url, logger: Logger(label: "store-test"))
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { await store.client.run() }
                try await eventually("the schema in place") { await store.probe() }
                // More readers than the pool has connections, each 2 s in the database.
                let readers = Task {
                    try await withThrowingTaskGroup(of: Void.self) { readers in
                        for _ in 0...RecorderStore.maxConnections {
                            readers.addTask { _ = try await store.read("SELECT pg_sleep(2)") { rows in try await rows.collect().count } }
                        }
                        try await readers.waitForAll()
                    }
                }
                try await eventually("the readers in the database") {
                    (try? database.psql("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%'")) == ["\(RecorderStore.maxReads)"]
                }
                let record = RecorderTests.record("arcade-1", 1)
                let valid = try #require(try? ValidRecord.check(record).get())
                let started = ContinuousClock.now
                let written = try await store.write(valid)
                let took = ContinuousClock.now - started
                #expect(written.upto == 1)
                #expect(took < .milliseconds(1500), "the write waited \(took) behind the readers")
                try await readers.value
                group.cancelAll()
            }
        }
    }
}
