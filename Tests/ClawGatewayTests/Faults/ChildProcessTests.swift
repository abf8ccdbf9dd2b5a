import Foundation
import Testing

/// The processes tests start inherit nothing of the test runner but their
/// output: a socket one test holds (and closes) never stays open in a
/// broker or gateway another test started meanwhile.
@Suite struct ChildProcessTests {
    @Test func aChildInheritsNoDescriptorOfTheRunner() async throws {
        var pipeEnds: [Int32] = [0, 0]
        #expect(pipe(&pipeEnds) == 0, "a descriptor without close-on-exec, as many libraries open them")
        defer { pipeEnds.forEach { close($0) } }
        let directory = try TemporaryDirectory.make(prefix: "spawn")
        let listing = directory.appendingPathComponent("fds")
        let child = try ChildProcess("/bin/sh", ["-c", "ls /proc/$$/fd"], output: listing)
        #expect(await child.wait(timeout: 10) == 0)
        let descriptors = try String(contentsOf: listing, encoding: .utf8).split(whereSeparator: \.isWhitespace).compactMap { Int32($0) }
        #expect(!descriptors.contains(pipeEnds[0]) && !descriptors.contains(pipeEnds[1]), "the child holds \(descriptors)")
        #expect(descriptors.allSatisfy { $0 <= 3 }, "stdin, stdout, stderr and ls's own: \(descriptors)")
    }
}
