import Foundation
import Protocol
import Testing

@testable import ClawGateway

/// SPEC §10: every field of a record has a limit; §14's clip metadata too.
/// A record over one is refused as data (and set aside), never retried.
@Suite struct ValidRecordTests {
    static func record(evidence: [EvidenceClip]? = nil, missing: [EvidenceGap]? = nil) -> ChainRecord {
        var record = ChainRecord(
            site: "arcade-1", epoch: "e1", seq: 1,
            game: GameRecord(
                id: "g-1", machine: "m1", player: "alice", provider: "netease", nick: "Alice", outcome: .won,
                offeredAt: "2026-11-28T10:00:00.000Z", startedAt: "2026-11-28T10:00:02.000Z", endedAt: "2026-11-28T10:00:30.000Z",
                commands: 7))
        record.game.evidence = evidence
        record.game.evidenceMissing = missing
        return record
    }

    static func problem(_ record: ChainRecord) -> String? {
        if case .failure(let problem) = ValidRecord.check(record) { return problem.description }
        return nil
    }

    @Test func clipsWithinTheLimitsPass() {
        let clips = (1...ValidRecord.maxClips).map { EvidenceClip(camera: "c\($0)", path: "/e/m1/g-1-c\($0).mp4", durationSeconds: 31.2) }
        #expect(Self.problem(Self.record(evidence: clips, missing: [EvidenceGap(camera: "side", reason: "the recording was down")])) == nil)
    }

    @Test func hostileClipMetadataIsRefusedNamingTheField() {
        let long = String(repeating: "x", count: 2000)
        let cases: [(ChainRecord, String)] = [
            (Self.record(evidence: (0...ValidRecord.maxClips).map { EvidenceClip(camera: "c\($0)", path: "/p", durationSeconds: 1) }), "more than"),
            (Self.record(evidence: [EvidenceClip(camera: "", path: "/p", durationSeconds: 1)]), "evidence.camera"),
            (Self.record(evidence: [EvidenceClip(camera: long, path: "/p", durationSeconds: 1)]), "evidence.camera"),
            (Self.record(evidence: [EvidenceClip(camera: "1", path: long, durationSeconds: 1)]), "evidence.path"),
            (Self.record(evidence: [EvidenceClip(camera: "1", path: "/p", durationSeconds: -3)]), "evidence.duration_s"),
            (Self.record(evidence: [EvidenceClip(camera: "1", path: "/p", durationSeconds: .nan)]), "evidence.duration_s"),
            (Self.record(missing: [EvidenceGap(camera: "1", reason: long)]), "evidence_missing.reason"),
            (Self.record(missing: [EvidenceGap(camera: long, reason: "down")]), "evidence_missing.camera"),
        ]
        for (record, field) in cases {
            let problem = Self.problem(record)
            #expect(problem?.contains(field) == true, "\(field): \(problem ?? "accepted")")
        }
    }
}

extension ValidRecordTests {
    /// The clips travel in the record as the site's `GET …/games` shows them.
    @Test func aRecordsClipsSurviveTheWire() throws {
        let record = Self.record(
            evidence: [EvidenceClip(camera: "1", path: "/e/m1/g-1-1.mp4", durationSeconds: 34.25)],
            missing: [EvidenceGap(camera: "2", reason: "the recording was down")])
        let text = String(decoding: record.payload, as: UTF8.self)
        #expect(text.contains(#""evidence":[{"#) && text.contains(#""duration_s":34.25"#), "\(text)")
        #expect(text.contains(#""evidence_missing":[{"camera":"2","reason":"the recording was down"}]"#))
        #expect(ChainRecord.decode(record.payload) == record)
        #expect(ChainRecord.decode(Self.record().payload)?.game.evidence == nil)
    }
}
