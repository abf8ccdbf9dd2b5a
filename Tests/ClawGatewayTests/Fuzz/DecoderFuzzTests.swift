import Foundation
import Logging
import Protocol
import Testing

@testable import ClawGateway
extension HeavySuites {
    /// Property tests over everything that reads untrusted bytes: every input is
    /// accepted or refused with a code, nothing crashes or hangs. The budget is
    /// `CLAW_FUZZ_INPUTS` per target (CI: 150 000; docs/RELIABILITY.md has a
    /// longer run).
    @Suite struct DecoderFuzzTests {
        static let wireSeeds: [[UInt8]] = [
            #"{"command":1,"data":"left","serial":7}"#, #"{"command":"2","serial":"8"}"#, #"{"command":3,"data":2,"serial":9}"#,
            #"{"command":6,"data":"Zoë"}"#, #"{"command":7}"#, #"{"command":12,"data":"9f0c-1","serial":1}"#,
            #"{"command":13,"data":"x"}"#, #"{"command":4,"data":"true"}"#, #"{"command":5,"data":"ok","serial":3}"#,
            #"{"command":1,"data":"up","serial":1,"extra":{"nested":[1,2,{"a":null}]}}"#,
        ].map { Array($0.utf8) }

        @Test func wireDecoderAndPlayerValidation() {
            var mutator = Mutator(seed: FuzzBudget.seed)
            var accepted = 0, refused: [ErrorCode: Int] = [:]
            for _ in 0..<FuzzBudget.inputs {
                let input = mutator.input(from: Self.wireSeeds)
                do throws(WireError) {
                    let message = try WireMessage.decode(input)
                    let request = try PlayerRequest(message)
                    try request.validate(cameras: ["1", "2"])
                    // What decodes must encode to something that decodes to the same message.
                    let again = try WireMessage.decode(message.encoded())
                    if again != message { Issue.record("re-encoding changed \(String(decoding: input, as: UTF8.self))") }
                    accepted += 1
                } catch {
                    refused[error.code, default: 0] += 1
                    if error.message.isEmpty { Issue.record("a refusal without a message") }
                }
            }
            #expect(accepted > 0 && !refused.isEmpty, "the mutator reaches both sides")
            #expect(Set(refused.keys).isSubset(of: [.invalidPayload, .unknownCommand]))
        }

        @Test func netEaseCopyParser() {
            let settings = NetEaseSettings(
                appKey: "k", appSecret: "s", apiBase: "", callbackPath: "/im/netease", maxClockSkew: .seconds(300),
                replyTimeout: .seconds(1), replyConcurrency: 1)
            let bodies: [[UInt8]] = [
                NetEaseCopyBody.encode(from: "alice", to: "claw_m1", attach: #"{"command":1,"data":"left","serial":7}"#),
                Array("{}".utf8), Array(#"{"eventType":2,"accid":"a"}"#.utf8),
                Array(#"{"eventType":"1","convType":"PERSON","msgType":"TEXT","body":"hi"}"#.utf8),
            ]
            let now = Date(timeIntervalSince1970: 1_795_000_000)
            var mutator = Mutator(seed: FuzzBudget.seed ^ 0xFEED)
            var outcomes: [String: Int] = [:]
            for index in 0..<FuzzBudget.inputs {
                let body = mutator.input(from: bodies)
                var headers = NetEaseCopyBody.headers(body: body, settings: settings, now: now)
                // Most inputs are signed correctly, to reach the parser; the rest have mangled headers.
                if index % 4 == 0 {
                    let victim = mutator.below(headers.count)
                    let value = Array(headers[victim].1.utf8)
                    headers[victim].1 = String(decoding: mutator.input(from: [value]), as: UTF8.self)
                }
                let lookup: (String) -> String? = { name in headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
                do throws(NetEaseCopy.Refusal) {
                    switch try NetEaseCopy.read(body: body, header: lookup, settings: settings, now: now).copy {
                    case .addressCheck: outcomes["address_check", default: 0] += 1
                    case .notification: outcomes["notification", default: 0] += 1
                    case .other: outcomes["other", default: 0] += 1
                    }
                } catch {
                    outcomes[error.kind == .unauthorized ? "unauthorized" : "malformed", default: 0] += 1
                    if error.message.isEmpty { Issue.record("a refusal without a message") }
                }
            }
            #expect(outcomes.values.reduce(0, +) == FuzzBudget.inputs)
            #expect(outcomes.count >= 4, "the fuzzer reached most outcomes: \(outcomes)")
        }

        @Test func wholeIngressThroughTheArcade() async throws {
            let game = try await GameHarness.online()
            await game.join("alice")
            await game.send("alice", #"{"command":12,"data":"s-m1-1"}"#)
            var mutator = Mutator(seed: FuzzBudget.seed ^ 0xA11CE)
            let budget = FuzzBudget.inputs / 10
            for _ in 0..<budget {
                let attach = mutator.input(from: Self.wireSeeds)
                let player = ["alice", "bob", "", "x\u{1}"][mutator.below(4)]
                let (outcome, _) = game.arcade.handleNow(PlayerNotification(from: player, to: "m1", attach: attach, provider: "fuzz"))
                if case .rejected(let error) = outcome, error.message.isEmpty { Issue.record("a refusal without a message") }
                game.publisher.publications.removeAll()
                game.players.replies.removeAll()
            }
            await game.settle()
            #expect([.playing, .awaitingResult, .offered, .idle].contains(game.status))
            await game.stop()
        }
    }
}
