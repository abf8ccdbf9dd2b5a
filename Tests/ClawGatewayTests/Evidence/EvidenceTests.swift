import Foundation
import Testing

@testable import ClawGateway

/// The plain parts of the evidence (SPEC §14): which segments make a clip,
/// the Range header a browser sends, an operator's hold.
@Suite struct EvidenceTests {
    static func segments(_ starts: [Double]) -> [(start: Date, url: URL)] {
        starts.map { (Date(timeIntervalSince1970: $0), URL(fileURLWithPath: "/ring/\(Int($0)).ts")) }
    }

    static func at(_ seconds: Double) -> Date { Date(timeIntervalSince1970: seconds) }

    @Test func aClipTakesTheSegmentsItsWindowOverlaps() throws {
        let ring = Self.segments([100, 102, 104, 106, 108])
        let plan = try #require(ClipPlan.make(segments: ring, from: Self.at(103), to: Self.at(107), segmentSeconds: 2))
        #expect(plan.files.map(\.lastPathComponent) == ["102.ts", "104.ts", "106.ts"])
        #expect(plan.offset == 1 && plan.duration == 4)
        // The window begins before the ring: from its first segment.
        let early = try #require(ClipPlan.make(segments: ring, from: Self.at(90), to: Self.at(101), segmentSeconds: 2))
        #expect(early.files.map(\.lastPathComponent) == ["100.ts"] && early.offset == 0 && early.duration == 1)
        // The last segment runs for a segment's length.
        let late = try #require(ClipPlan.make(segments: ring, from: Self.at(109), to: Self.at(112), segmentSeconds: 2))
        #expect(late.files.map(\.lastPathComponent) == ["108.ts"] && late.offset == 1)
    }

    @Test func noSegmentOfTheWindowIsNoClip() {
        #expect(ClipPlan.make(segments: [], from: Self.at(0), to: Self.at(10), segmentSeconds: 2) == nil)
        let ring = Self.segments([100, 102])
        #expect(ClipPlan.make(segments: ring, from: Self.at(80), to: Self.at(99), segmentSeconds: 2) == nil)
        #expect(ClipPlan.make(segments: ring, from: Self.at(104), to: Self.at(110), segmentSeconds: 2) == nil)
    }

    @Test func rangesAsBrowsersSendThem() {
        #expect(ByteRange.parse("bytes=0-99", size: 1000).map { [$0.0, $0.1] } == [0, 99])
        #expect(ByteRange.parse("bytes=900-", size: 1000).map { [$0.0, $0.1] } == [900, 999])
        #expect(ByteRange.parse("bytes=-10", size: 1000).map { [$0.0, $0.1] } == [990, 999])
        #expect(ByteRange.parse("bytes=-5000", size: 1000).map { [$0.0, $0.1] } == [0, 999])
        #expect(ByteRange.parse("bytes=990-5000", size: 1000).map { [$0.0, $0.1] } == [990, 999])
        for bad in ["bytes=1000-", "bytes=5-2", "bytes=0-1,5-6", "items=0-1", "bytes=a-b", "bytes=-0", "bytes=-", ""] {
            #expect(ByteRange.parse(bad, size: 1000) == nil, "\(bad)")
        }
        #expect(ByteRange.parse("bytes=0-", size: 0) == nil)
    }

    @Test func aHoldNeedsAReasonAndReleasingNone() throws {
        typealias Routes = EvidenceRoutes<GatewayRequestContext>
        #expect(try Routes.holdBody(Array(#"{"hold":true,"reason":" ticket 42 "}"#.utf8)) == (true, "ticket 42"))
        #expect(try Routes.holdBody(Array(#"{"hold":false}"#.utf8)) == (false, nil))
        for bad in [#"{"hold":true}"#, #"{"hold":true,"reason":"  "}"#, #"{"reason":"x"}"#, #"{"hold":"yes"}"#, #"{"hold":true,"reason":"x","why":1}"#, "[]", "nope"] {
            #expect(throws: Refusal.self, "\(bad)") { try Routes.holdBody(Array(bad.utf8)) }
        }
    }
}
