import Clocks
import Foundation
import Logging
import NIOCore
import Testing

@testable import ClawGateway

/// The dashboard's feed on its own: what one tick sends, and how it bounds
/// its clients. End to end over HTTP: `StreamTests`.
@Suite struct ArcadeFeedTests {
    static func feed(machines: Int = 2, clock: TestClock<Duration> = TestClock()) -> ArcadeFeed {
        ArcadeFeed(machines: machines, clock: .following(clock, from: Date()), logger: Logger(label: "test")) {
            ArcadeFeed.GatewayStatus(brokerConnected: true, storageWritable: true, repliesFailed: 0)
        }
    }

    static func address(_ ip: String) throws -> ClientAddress? {
        TrustedProxies.none.client(peer: try SocketAddress(ipAddress: ip, port: 40000), headers: [:])
    }

    /// Reads up to `count` chunks the client already has, as the writer does.
    static func drain(_ client: ArcadeFeed.Client, _ count: Int) async -> [String] {
        var chunks: [String] = []
        var iterator = client.chunks.makeAsyncIterator()
        for _ in 0..<count {
            guard let chunk = await iterator.next() else { break }
            client.written(chunk)
            chunks.append(String(decoding: chunk, as: UTF8.self))
        }
        return chunks
    }

    static func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// Reads one chunk the client already has.
    static func next(_ client: ArcadeFeed.Client) async -> String? {
        var iterator = client.chunks.makeAsyncIterator()
        guard let chunk = await iterator.next() else { return nil }
        client.written(chunk)
        return String(decoding: chunk, as: UTF8.self)
    }

    @Test func aTickSendsTheLatestSnapshotEveryEventInOrderAndTheLatestStats() async throws {
        let feed = Self.feed()
        let client = try feed.connect()
        feed.snapshot(0, Self.bytes(#"{"machine":"m1","seq":1}"#))
        feed.event(0, Self.bytes(#"{"type":"joined","seq":1}"#))
        feed.snapshot(0, Self.bytes(#"{"machine":"m1","seq":2}"#))
        feed.event(0, Self.bytes(#"{"type":"offered","seq":2}"#))
        feed.stats(1, Self.bytes(#"{"machine":"m2","commands":1}"#))
        feed.stats(1, Self.bytes(#"{"machine":"m2","commands":2}"#))
        #expect(feed.flush())
        let chunk = try #require(await Self.next(client))
        #expect(!chunk.contains(#""seq":1}"# + "\n\nevent: snapshot"), "the older snapshot is superseded")
        #expect(chunk.components(separatedBy: "event: snapshot").count == 2)
        #expect(chunk.contains("event: snapshot\ndata: {\"machine\":\"m1\",\"seq\":2}\n\n"))
        let joined = try #require(chunk.range(of: "joined"))
        let offered = try #require(chunk.range(of: "offered"))
        #expect(joined.lowerBound < offered.lowerBound)
        #expect(chunk.contains(#"event: stats"# + "\n" + #"data: {"machine":"m2","commands":2}"#))
        #expect(!chunk.contains(#""commands":1"#))
        #expect(chunk.hasPrefix("event: gateway\n"), "the gateway's status once, on the first tick")
        #expect(!feed.flush(), "nothing new: nothing sent")
    }

    @Test func eventsBeyondTheTickLimitAreCountedNotQueued() async throws {
        let feed = Self.feed()
        let client = try feed.connect()
        for seq in 1...(ArcadeFeed.maxEventsPerTick + 7) { feed.event(0, Self.bytes(#"{"seq":\#(seq)}"#)) }
        feed.flush()
        let chunk = try #require(await Self.next(client))
        #expect(chunk.components(separatedBy: "event: event\n").count - 1 == ArcadeFeed.maxEventsPerTick)
        #expect(chunk.hasSuffix("event: gap\ndata: {\"events_missed\":7}\n\n"), "the reader is told, after the events it got")
    }

    @Test func withNoClientNothingIsKeptButTheLatestStats() async throws {
        let feed = Self.feed()
        feed.snapshot(0, Self.bytes("{}"))
        feed.event(0, Self.bytes("{}"))
        feed.stats(0, Self.bytes(#"{"machine":"m1","acks":3}"#))
        #expect(!feed.flush())
        let welcome = String(decoding: feed.welcome(hello: Self.bytes(#"{"gateway":"g"}"#), snapshots: [(0, Self.bytes("{1}")), (1, Self.bytes("{2}"))]), as: UTF8.self)
        #expect(welcome.hasPrefix("event: hello\ndata: {\"gateway\":\"g\"}\n\nevent: gateway\n"))
        #expect(welcome.contains("event: snapshot\ndata: {1}\n\nevent: stats\ndata: {\"machine\":\"m1\",\"acks\":3}\n\nevent: snapshot\ndata: {2}"))
    }

    @Test func aClientThatFallsBehindGetsOneGapWithWhatItMissedThenTheWholeArcade() async throws {
        let feed = Self.feed()
        let slow = try feed.connect()
        let reader = try feed.connect()
        let skipped = 3
        for seq in 1...(ArcadeFeed.maxPendingChunks + skipped) {
            feed.event(0, Self.bytes(#"{"seq":\#(seq)}"#))
            feed.snapshot(0, Self.bytes(#"{"machine":"m1","seq":\#(seq)}"#))
            feed.flush()
            #expect(await Self.next(reader) != nil, "the reader gets every tick")
        }
        feed.stats(1, Self.bytes(#"{"machine":"m2","acks":1}"#))
        feed.flush()
        _ = await Self.next(reader)
        // What the slow client had buffered comes whole and in order; then it is behind.
        let buffered = await Self.drain(slow, ArcadeFeed.maxPendingChunks)
        #expect(buffered.count == ArcadeFeed.maxPendingChunks)
        #expect(buffered.last?.contains(#"{"seq":\#(ArcadeFeed.maxPendingChunks)}"#) == true)
        #expect(!buffered.joined().contains("event: gap"))

        // Written all it had: the next tick, even with nothing new, brings it back in step.
        #expect(!feed.flush(), "nothing new for anyone else")
        let back = try #require(await Self.drain(slow, 1).first)
        #expect(back.hasPrefix("event: gap\ndata: {\"events_missed\":\(skipped)}\n\n"), "\(back.prefix(80))")
        #expect(back.components(separatedBy: "event: gap").count == 2, "one gap record")
        #expect(back.contains(#"data: {"machine":"m1","seq":\#(ArcadeFeed.maxPendingChunks + skipped)}"#), "m1 as it is now")
        #expect(back.contains(#"data: {"machine":"m2","acks":1}"#), "the latest stats too")
        #expect(back.contains("event: gateway\n"))

        feed.event(0, Self.bytes(#"{"seq":1000}"#))
        feed.flush()
        let next = try #require(await Self.drain(slow, 1).first)
        #expect(next.contains(#"{"seq":1000}"#) && !next.contains("event: gap"), "in step again: plain ticks")
        _ = await Self.next(reader)
    }

    @Test func aClientFarBehindInBytesSkipsToAGap() async throws {
        let feed = Self.feed()
        let slow = try feed.connect()
        let big = [UInt8](repeating: UInt8(ascii: "x"), count: 1 << 20)
        for _ in 0..<5 {
            feed.snapshot(0, big)
            feed.event(0, Self.bytes("{}"))
            feed.flush()
        }
        // The fourth mebibyte (with its framing) would put it over 4 MiB behind: skipped from there.
        let buffered = await Self.drain(slow, 3)
        #expect(buffered.count == 3)
        feed.flush()
        let back = try #require(await Self.drain(slow, 1).first)
        #expect(back.hasPrefix("event: gap\ndata: {\"events_missed\":2}\n\n"))
    }

    @Test func aClientBehindForTooLongIsDroppedAndItsSlotFreed() async throws {
        let clock = TestClock<Duration>()
        let feed = Self.feed(clock: clock)
        let address = try Self.address("127.0.0.2")
        let stalled = try feed.connect(from: address)
        for seq in 1...(ArcadeFeed.maxPendingChunks + 1) {
            feed.event(0, Self.bytes(#"{"seq":\#(seq)}"#))
            feed.flush()
        }
        await clock.advance(by: ArcadeFeed.maxBehind)
        feed.flush()
        #expect(feed.count() == 1, "behind, not yet for too long")
        await clock.advance(by: .seconds(1))
        feed.flush()
        #expect(feed.count() == 0 && feed.count(from: address) == 0, "dropped, its slot free")
        var received = 0
        for await _ in stalled.chunks { received += 1 }
        #expect(received == ArcadeFeed.maxPendingChunks, "the stream ends after what it had buffered")
    }

    @Test func fourStreamsPerAddressAndADisconnectGivesItsSlotBackOnce() async throws {
        let feed = Self.feed()
        let one = try #require(try Self.address("127.0.0.2")), other = try #require(try Self.address("127.0.0.3"))
        var mine: [ArcadeFeed.Client] = []
        for _ in 0..<ArcadeFeed.maxClientsPerAddress { mine.append(try feed.connect(from: one)) }
        #expect(throws: ArcadeFeed.Refusal.overShare) { try feed.connect(from: one) }
        let theirs = try feed.connect(from: other)
        let gone = mine.removeLast()
        feed.disconnect(gone)
        feed.disconnect(gone)  // the connection's close and the writer's end both say so
        #expect(feed.count(from: one) == ArcadeFeed.maxClientsPerAddress - 1)
        mine.append(try feed.connect(from: one))
        #expect(throws: ArcadeFeed.Refusal.overShare) { try feed.connect(from: one) }
        #expect(feed.count(from: other) == 1 && theirs.address == other)
    }

    @Test func clientsAreLimitedAndAStopEndsThemAll() async throws {
        let feed = Self.feed()
        var clients: [ArcadeFeed.Client] = []
        for _ in 0..<ArcadeFeed.maxClients { clients.append(try feed.connect()) }
        #expect(throws: ArcadeFeed.Refusal.full) { try feed.connect() }
        feed.disconnect(clients.removeLast())
        clients.append(try feed.connect())  // a slot came free
        feed.stop()
        #expect(throws: ArcadeFeed.Refusal.stopped) { try feed.connect() }
        for client in clients {
            var iterator = client.chunks.makeAsyncIterator()
            #expect(await iterator.next() == nil)
        }
    }

    /// A reload (SPEC §13): a machine's slot comes with its first message,
    /// and a changed arcade ends every stream so that the pages connect
    /// again and get the new `hello`.
    @Test func machinesComeAndGoAndAChangedArcadeEndsEveryStreamButNotTheFeed() async throws {
        let feed = Self.feed(machines: 1)
        let client = try feed.connect()
        feed.snapshot(4, Self.bytes(#"{"machine":"m5","seq":1}"#))
        feed.stats(4, Self.bytes(#"{"machine":"m5","acks":1}"#))
        #expect(feed.flush())
        let chunk = try #require(await Self.next(client))
        #expect(chunk.contains(#"{"machine":"m5","seq":1}"#) && chunk.contains(#"{"machine":"m5","acks":1}"#))

        feed.gone(4)
        feed.arcadeChanged()
        var iterator = client.chunks.makeAsyncIterator()
        #expect(await iterator.next() == nil, "the stream ended")
        #expect(feed.count() == 0)
        let again = try feed.connect()
        feed.snapshot(0, Self.bytes(#"{"machine":"m1","seq":2}"#))
        #expect(feed.flush())
        #expect(try #require(await Self.next(again)).contains(#""seq":2"#), "the feed goes on")
    }
}
