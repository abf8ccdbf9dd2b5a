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
        #expect(Topics().machine("m1", .resultAck) == "claw/m1/result/ack")
        #expect(Topics().parse("claw/m1/result/ack")?.kind == .resultAck && Topics().parse("claw/m1/result/ack")?.machine == "m1")
        #expect(Topics(prefix: "site/claw").parse("site/claw/m2/result/ack")?.machine == "m2")
        #expect(Topics().parse("claw/m1/x/result/ack") == nil)
        // A machine named `result` keeps its own ack topic.
        #expect(Topics().parse("claw/result/ack")?.kind == .ack && Topics().parse("claw/result/ack")?.machine == "result")
    }
}

@Suite("The chain's topic names (SPEC §9–§11)")
struct ChainTopicsTests {
    @Test("a site's topics, and every site's for subscribing")
    func names() {
        let site = ChainTopics(prefix: "claw", site: "arcade-1")
        #expect(site.inboxAck == "claw/arcade-1/inbox/ack" && site.records == "claw/arcade-1/records" && site.walletAck == "claw/arcade-1/wallet/ack")
        let every = ChainTopics.everySite(prefix: "chain/claw")
        #expect(every.directory == "chain/claw/+/gateway/directory" && every.machine("+", .queue) == "chain/claw/+/+/queue")
    }

    @Test("a topic read back to its site, and anything else refused")
    func parse() {
        #expect(ChainTopics.site(of: "claw/arcade-1/records", prefix: "claw", level: .records) == "arcade-1")
        #expect(ChainTopics.site(of: "claw/arcade-1/wallet", prefix: "claw", level: .wallet) == "arcade-1")
        #expect(ChainTopics.site(of: "chain/claw/a/gateway/heartbeat", prefix: "chain/claw", level: .heartbeat) == "a")
        for topic in ["claw/arcade-1/wallet/ack", "claw//records", "claw/a/b/records", "other/a/records", "claw/records", "clawx/a/records"] {
            #expect(ChainTopics.site(of: topic, prefix: "claw", level: .records) == nil && ChainTopics.site(of: topic, prefix: "claw", level: .wallet) == nil, "\(topic)")
        }
        #expect(ChainTopics.split("claw/a/m1/queue", prefix: "claw").map { [$0.site, $0.rest] } == ["a", "m1/queue"])
    }

    @Test("a result's confirmation is {\"serial\":N}, and nothing else reads as one")
    func resultConfirmation() {
        #expect(String(decoding: ResultConfirmation(serial: 1_763_719_200_000_001).encoded(), as: UTF8.self) == #"{"serial":1763719200000001}"#)
        #expect(ResultConfirmation.decode(Array(#"{"serial":42}"#.utf8)) == ResultConfirmation(serial: 42))
        for bad in [#"{"serial":"42"}"#, #"{"serial":4.5}"#, #"{"id":42}"#, "[42]", "42", "", #"{"serial":null}"#] {
            #expect(ResultConfirmation.decode(Array(bad.utf8)) == nil, "\(bad)")
        }
    }
}
