import Clocks
import Foundation
import Logging
import Testing

@testable import ClawGateway

/// The dashboard's feed on its own: what one tick sends, and how it bounds
/// its clients. End to end over HTTP: `StreamTests`.
@Suite struct ArcadeFeedTests {
    static func feed(machines: Int = 2) -> ArcadeFeed {
        ArcadeFeed(machines: machines, clock: .following(TestClock<Duration>(), from: Date()), logger: Logger(label: "test")) {
            ArcadeFeed.GatewayStatus(brokerConnected: true, storageWritable: true, repliesFailed: 0)
        }
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
        let client = try #require(feed.connect())
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
        let client = try #require(feed.connect())
        for seq in 1...(ArcadeFeed.maxEventsPerTick + 7) { feed.event(0, Self.bytes(#"{"seq":\#(seq)}"#)) }
        feed.flush()
        let chunk = try #require(await Self.next(client))
        #expect(chunk.components(separatedBy: "event: event\n").count - 1 == ArcadeFeed.maxEventsPerTick)
        #expect(chunk.contains("event: overflow\ndata: {\"events_dropped\":7}"))
    }

    @Test func withNoClientNothingIsKeptButTheLatestStats() async throws {
        let feed = Self.feed()
        feed.snapshot(0, Self.bytes("{}"))
        feed.event(0, Self.bytes("{}"))
        feed.stats(0, Self.bytes(#"{"machine":"m1","acks":3}"#))
        #expect(!feed.flush())
        let welcome = String(decoding: feed.welcome(hello: Self.bytes(#"{"gateway":"g"}"#), snapshots: [Self.bytes("{1}"), Self.bytes("{2}")]), as: UTF8.self)
        #expect(welcome.hasPrefix("event: hello\ndata: {\"gateway\":\"g\"}\n\nevent: gateway\n"))
        #expect(welcome.contains("event: snapshot\ndata: {1}\n\nevent: stats\ndata: {\"machine\":\"m1\",\"acks\":3}\n\nevent: snapshot\ndata: {2}"))
    }

    @Test func aClientThatDoesNotReadIsDroppedNotBufferedForEver() async throws {
        let feed = Self.feed()
        let slow = try #require(feed.connect())
        let reader = try #require(feed.connect())
        for seq in 1...(ArcadeFeed.maxPendingChunks + 1) {
            feed.snapshot(0, Self.bytes(#"{"seq":\#(seq)}"#))
            feed.flush()
            _ = await Self.next(reader)
        }
        var received = 0
        for await chunk in slow.chunks {
            received += 1
            slow.written(chunk)
        }
        #expect(received == ArcadeFeed.maxPendingChunks, "the stream ended after what it had buffered")
        feed.snapshot(0, Self.bytes(#"{"seq":0}"#))
        feed.flush()
        #expect(await Self.next(reader) != nil, "the reader goes on")
    }

    @Test func aClientFarBehindInBytesIsDropped() async throws {
        let feed = Self.feed()
        let slow = try #require(feed.connect())
        let big = [UInt8](repeating: UInt8(ascii: "x"), count: 1 << 20)
        for _ in 0..<5 {
            feed.snapshot(0, big)
            feed.flush()
        }
        var received = 0
        for await _ in slow.chunks { received += 1 }
        #expect(received == 3, "the fourth mebibyte (with its framing) would put it over 4 MiB behind: dropped there")
    }

    @Test func clientsAreLimitedAndAStopEndsThemAll() async throws {
        let feed = Self.feed()
        var clients: [ArcadeFeed.Client] = []
        for _ in 0..<ArcadeFeed.maxClients { clients.append(try #require(feed.connect())) }
        #expect(feed.connect() == nil)
        feed.disconnect(clients.removeLast())
        clients.append(try #require(feed.connect(), "a slot came free"))
        feed.stop()
        #expect(feed.connect() == nil)
        for client in clients {
            var iterator = client.chunks.makeAsyncIterator()
            #expect(await iterator.next() == nil)
        }
    }
}
