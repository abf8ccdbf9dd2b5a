import Protocol
import Testing

@Suite("Topic names")
struct TopicsTests {
    @Test("machine and gateway topics under the default prefix")
    func names() {
        let topics = Topics()
        #expect(topics.machine("m1", .control) == "claw/m1/control")
        #expect(topics.machine("m1", .camera) == "claw/m1/camera")
        #expect(topics.machine("m1", .ack) == "claw/m1/ack")
        #expect(topics.machine("m1", .result) == "claw/m1/result")
        #expect(topics.machine("m1", .state) == "claw/m1/state")
        #expect(topics.machine("m1", .queue) == "claw/m1/queue")
        #expect(topics.machine("m1", .events) == "claw/m1/events")
        #expect(topics.gatewayState == "claw/gateway/state")
    }

    @Test("parsing finds the machine and the kind, also under a nested prefix")
    func parse() {
        #expect(Topics().parse("claw/m1/ack")?.machine == "m1")
        #expect(Topics().parse("claw/m1/ack")?.kind == .ack)
        #expect(Topics(prefix: "site/claw").parse("site/claw/m2/state")?.kind == .state)
        #expect(Topics(prefix: "site/claw").parse("site/claw/m2/state")?.machine == "m2")
        #expect(Topics().parse("other/m1/ack") == nil)
        #expect(Topics().parse("claw/m1/nope") == nil)
        #expect(Topics().parse("claw/ack") == nil)
        #expect(Topics().parse("claw/x/m1/ack") == nil)
    }
}
