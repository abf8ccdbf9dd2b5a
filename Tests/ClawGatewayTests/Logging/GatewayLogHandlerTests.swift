import Foundation
import Logging
import Synchronization
import Testing

@testable import ClawGateway

/// Log lines as journald and a terminal read them.
@Suite struct GatewayLogHandlerTests {
    static func logger(journald: Bool, level: Logger.Level = .trace) -> (Logger, Recorder<String>) {
        let lines = Recorder<String>()
        let output = GatewayLogHandler.Output(journald: journald) { lines.append($0) }
        return (Logger(label: "claw-gateway") { GatewayLogHandler(label: $0, level: level, output: output) }, lines)
    }

    @Test(arguments: [
        (Logger.Level.trace, 7), (.debug, 7), (.info, 6), (.notice, 5), (.warning, 4), (.error, 3), (.critical, 2),
    ])
    func underJournaldEachLineCarriesItsSyslogPriority(level: Logger.Level, priority: Int) {
        let (logger, lines) = Self.logger(journald: true)
        logger.log(level: level, "Something happened", metadata: ["machine.id": "m1"])
        #expect(lines.items == ["<\(priority)>\(level) claw-gateway: machine.id=m1 [ClawGatewayTests] Something happened\n"])
    }

    @Test func onATerminalLinesStartWithTheTime() throws {
        let (logger, lines) = Self.logger(journald: false)
        logger.warning("Machine offline")
        let line = try #require(lines.items.first)
        #expect(line.range(of: #"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0000 warning claw-gateway: \[ClawGatewayTests\] Machine offline\n$"#, options: .regularExpression) != nil)
    }

    @Test func metadataValuesAreEscapedSoNoValueCanForgeALine() {
        let (logger, lines) = Self.logger(journald: true)
        logger.warning(
            "Undecodable message on machine topic ignored",
            metadata: ["mqtt.payload": "x\n<3>error forged line", "plain": "ok", "quote": "say \"hi\"", "bidi": "\u{202E}evil"])
        let line = lines.items.first ?? ""
        #expect(line.filter { $0 == "\n" }.count == 1, "one line, ended once")
        #expect(line.contains(#"mqtt.payload="x\n<3>error forged line""#))
        #expect(line.contains(#"quote="say \"hi\"""#))
        #expect(line.contains(#"bidi="\u{202e}evil""#))
        #expect(line.contains("plain=ok"))
    }

    @Test func levelsBelowTheLoggersAreNotWritten() {
        let (logger, lines) = Self.logger(journald: true, level: .warning)
        logger.info("quiet")
        logger.error("loud")
        #expect(lines.items.count == 1)
    }

    @Test func journaldIsStandardErrorOnlyWhenJournalStreamNamesIt() {
        #expect(!GatewayLogHandler.Output.stderrIsJournal(environment: [:]))
        #expect(!GatewayLogHandler.Output.stderrIsJournal(environment: ["JOURNAL_STREAM": "garbage"]))
        var info = stat()
        fstat(2, &info)
        let mine = "\(info.st_dev):\(info.st_ino)"
        #expect(GatewayLogHandler.Output.stderrIsJournal(environment: ["JOURNAL_STREAM": mine]))
        #expect(!GatewayLogHandler.Output.stderrIsJournal(environment: ["JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino + 1)"]))
    }
}

/// Warnings about what others send, at most one of a kind per period.
@Suite struct LogLimiterTests {
    @Test func oneLineOfAKindPerPeriodSayingHowManyWereHeldBack() {
        let start = ContinuousClock.now
        let time = Mutex(start)
        let limiter = LogLimiter(period: .seconds(10)) { time.withLock { $0 } }
        let lines = Recorder<Int>()
        for _ in 0..<50 { limiter.log("bad payload") { lines.append($0) } }
        limiter.log("other kind") { lines.append($0) }
        #expect(lines.items == [0, 0], "the first of each kind")
        time.withLock { $0 = start + .seconds(9) }
        limiter.log("bad payload") { lines.append($0) }
        #expect(lines.items == [0, 0], "still within the period")
        time.withLock { $0 = start + .seconds(10) }
        limiter.log("bad payload") { lines.append($0) }
        #expect(lines.items == [0, 0, 50], "the next line says how many were held back")
        limiter.log("other kind") { lines.append($0) }
        #expect(lines.items == [0, 0, 50, 0])
    }
}
