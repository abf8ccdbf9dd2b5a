import Foundation
import Protocol
import Testing

@testable import ClawGateway

extension HeavySuites {
    /// SPEC §12, "The PC side, real": a signed NetEase copy → the gateway →
    /// MQTT → examples/reference-pc/claw_pc.py → serial frames on a
    /// pseudo-terminal → sim_board.py, and the board's result and faults back
    /// the same way. Debian's python3 with python3-paho-mqtt and python3-serial.
    @Suite(.serialized) struct BoardEndToEndTests {
        static let token = "board-admin-token"
        static let python = ReferencePCTests.python

        static var examples: URL { ReferencePCTests.script.deletingLastPathComponent() }

        static func requireSerial() async throws {
            try await ReferencePCTests.requirePython()
            let check = try ChildProcess(python, ["-c", "import serial"])
            let status = await check.wait(timeout: 30)
            try #require(
                status == 0,
                "\(python) cannot import serial (exit status \(status.map(String.init) ?? "none")): run ./scripts/test (it installs python3-serial), or: sudo apt-get install -y python3-serial"
            )
        }

        /// The text of a log file so far.
        static func log(_ file: URL) -> String {
            (try? String(contentsOf: file, encoding: .utf8)) ?? ""
        }

        /// Waits until `file` has a line containing `text`.
        static func waitLog(_ file: URL, _ text: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            try await eventually("\(file.lastPathComponent) to say \(text)", timeout: .seconds(20), sourceLocation: sourceLocation) {
                log(file).contains(text)
            }
        }

        /// The board's codec and conversation tests (examples/reference-pc/test_board.py).
        @Test func theBoardProtocolTests() async throws {
            try await Self.requireSerial()
            let directory = try TemporaryDirectory.make(prefix: "board-tests")
            let output = directory.appendingPathComponent("unittest.log")
            let tests = try ChildProcess(
                Self.python, ["-m", "unittest", Self.examples.appendingPathComponent("test_board.py").path], output: output)
            let status = await tests.wait(timeout: 120)
            #expect(status == 0, "test_board.py: \(Self.log(output))")
            #expect(!Self.log(output).contains("skipped"), "no board test may be skipped: \(Self.log(output))")
        }

        @Test func aGameAFaultAndAResetThroughARealSerialBoard() async throws {
            try await Self.requireSerial()
            let site = try await E2ESite(simulate: false, adminToken: Self.token, machines: ["m1"])
            let directory = site.site.directory
            let port = directory.appendingPathComponent("board"), control = directory.appendingPathComponent("board.ctl")
            let boardLog = directory.appendingPathComponent("board.log"), pcLog = directory.appendingPathComponent("pc.log")
            var board: ChildProcess?
            var pc: ChildProcess?
            do {
                board = try ChildProcess(
                    Self.python,
                    [Self.examples.appendingPathComponent("sim_board.py").path, "--link", port.path, "--control", control.path, "--home-time", "0.1"],
                    output: boardLog)
                try await Self.waitLog(boardLog, "pty /dev/")
                pc = try ChildProcess(
                    Self.python,
                    [ReferencePCTests.script.path, "--host", "127.0.0.1", "--port", String(site.broker.port), "--machine", "m1", "--serial", port.path],
                    output: pcLog)
                try await Self.waitLog(pcLog, "board: opened")
                try await ReferencePCTests.waitOnline(site, true)
                let watcher = try await TestSubscriber(broker: site.broker, topics: ["claw/m1/queue", "claw/m1/result", "claw/m1/fault"])

                // Alice's game: the coin starts the board with the file's settings; her moves
                // and grab are frames; a grab at power 30 (the default prize power) wins.
                try await site.copy(from: "alice", #"{"command":6}"#)
                let alice = try await site.offeredSession(to: "alice")
                try await site.copy(from: "alice", #"{"command":12,"data":"\#(alice)"}"#)
                try await Self.waitLog(boardLog, "rx start time=30 strong=0 grab=30 top=20 move=10 max=48 height=5")
                try await site.copy(from: "alice", #"{"command":1,"data":"left","serial":1}"#)
                try await Self.waitLog(boardLog, "rx move left")
                try await site.copy(from: "alice", #"{"command":2,"serial":2}"#)
                try await Self.waitLog(boardLog, "grab power=30 strong=0")
                try await eventually("alice to be told she won") {
                    site.told("alice").contains { $0.code == .result && $0.data == "true" && $0.session == alice }
                }
                let result = try await watcher.waitFor("claw/m1/result")
                #expect(result.contains(#""session":"\#(alice)""#), "\(result)")

                // A frame with a bad checksum is dropped and counted; the PC reads on.
                try Self.send("corrupt", to: control)
                try await Self.waitLog(pcLog, "board: dropped 1 broken frame(s)")

                // Bob's game: the board faults mid-game. His game ends machine_fault; m1 is in maintenance.
                try await site.copy(from: "bob", #"{"command":6}"#)
                let bob = try await site.offeredSession(to: "bob")
                try await site.copy(from: "bob", #"{"command":12,"data":"\#(bob)"}"#)
                try await Self.waitLog(boardLog, "grab=30 top=20 move=10 max=48 height=5", after: "tx result 1")
                try Self.send("fault 101", to: control)
                let fault = try await watcher.waitFor("claw/m1/fault")
                #expect(fault.contains(#""code":"claw_rise_timeout""#), "\(fault)")
                try await eventually("bob to be told of the fault") {
                    site.told("bob").contains { $0.code == .error && $0.data == "machine_fault" }
                }
                let out = try await watcher.waitFor("claw/m1/queue") { $0.contains(#""state":"maintenance""#) }
                #expect(out.contains(#""fault":{"code":"claw_rise_timeout""#), "\(out)")
                let games = try await HTTP.get("\(site.base)/v1/machines/m1/games").json["games"] as? [[String: Any]] ?? []
                #expect(games.first { $0["id"] as? String == bob }?["outcome"] as? String == "machine_fault")

                // Carol waits; the reset homes the board and m1 is back: she is offered the turn.
                try await site.copy(from: "carol", #"{"command":6}"#)
                let reset = try await HTTP.request(
                    .POST, "\(site.base)/v1/machines/m1/reset", headers: [("Authorization", "Bearer \(Self.token)")])
                #expect(reset.status == 200, "\(reset.body)")
                try await Self.waitLog(boardLog, "homed")
                try await Self.waitLog(pcLog, "online again")
                let carol = try await site.offeredSession(to: "carol")
                let back = try await HTTP.get("\(site.base)/v1/machines/m1").json
                #expect(back["state"] as? String == "offered" && back["fault"] == nil, "\(back)")
                #expect((back["player"] as? [String: Any])?["session"] as? String == carol)
                await watcher.stop()
            } catch {
                await Self.stop(pc, board, site)
                throw error
            }
            await Self.stop(pc, board, site)
        }

        /// Waits until `file` says `text` somewhere after the last `mark`.
        static func waitLog(_ file: URL, _ text: String, after mark: String, sourceLocation: SourceLocation = #_sourceLocation) async throws {
            try await eventually("\(file.lastPathComponent) to say \(text) after \(mark)", timeout: .seconds(20), sourceLocation: sourceLocation) {
                let all = log(file)
                guard let range = all.range(of: mark, options: .backwards) else { return false }
                return all[range.upperBound...].contains(text)
            }
        }

        /// One control line to the simulated board, through its FIFO.
        static func send(_ line: String, to fifo: URL) throws {
            let handle = try #require(FileHandle(forWritingAtPath: fifo.path), "the board's control FIFO \(fifo.path)")
            try handle.write(contentsOf: Data((line + "\n").utf8))
            try handle.close()
        }

        static func stop(_ pc: ChildProcess?, _ board: ChildProcess?, _ site: E2ESite) async {
            for process in [pc, board].compactMap({ $0 }) {
                process.signal(SIGTERM)
                if await process.wait(timeout: 10) == nil {
                    process.signal(SIGKILL)
                    _ = await process.wait(timeout: 10)
                }
            }
            await site.stop()
        }
    }
}
