import Foundation
import Testing

/// A power cut for the gateway's SQLite file (Tests/PowerCut/powercut.c):
/// the gateway runs with the shim preloaded, which journals what each write
/// to the file overwrites and when the file is synced; after a `kill -9`,
/// ``cut()`` undoes every write made since the file's last sync, as a
/// file system that loses what was not synced does when the power goes.
struct PowerCut {
    let directory: URL
    let journal: URL
    private let shim: URL
    private let undo: URL

    /// Builds the shim and the cut with the C compiler (`cc`): missing, the test fails and says so.
    static func build() throws -> PowerCut {
        let directory = try TemporaryDirectory.make(prefix: "powercut")
        let source = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("PowerCut/powercut.c")
        let cut = PowerCut(
            directory: directory, journal: directory.appendingPathComponent("journal"), shim: directory.appendingPathComponent("powercut.so"),
            undo: directory.appendingPathComponent("powercut-undo"))
        guard let cc = ["/usr/bin/cc", "/usr/bin/gcc"].first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw BrokerError("no C compiler (cc): the power-cut test builds its shim with it. Run ./scripts/test, which installs gcc.")
        }
        for arguments in [
            ["-O1", "-shared", "-fPIC", "-o", cut.shim.path, source.path, "-ldl", "-lpthread"],
            ["-O1", "-DPOWERCUT_UNDO", "-o", cut.undo.path, source.path],
        ] {
            let compiler = try ChildProcess(cc, arguments, output: directory.appendingPathComponent("cc.log"))
            guard compiler.wait() == 0 else {
                throw BrokerError("cc \(arguments.joined(separator: " ")) failed: \((try? String(contentsOf: directory.appendingPathComponent("cc.log"), encoding: .utf8)) ?? "")")
            }
        }
        return cut
    }

    /// What the gateway is started through: the shim preloaded, watching the files whose path contains `match`.
    func launcher(watching match: String) -> [String] {
        ["/usr/bin/env", "LD_PRELOAD=\(shim.path)", "POWERCUT_JOURNAL=\(journal.path)", "POWERCUT_MATCH=\(match)"]
    }

    /// The power goes: every write not synced is undone. The gateway must be dead already.
    /// - Returns: how many writes were undone.
    @discardableResult
    func cut() throws -> Int {
        let log = directory.appendingPathComponent("undo.log")
        try? FileManager.default.removeItem(at: log)
        let status = try ChildProcess(undo.path, [journal.path], output: log).wait()
        let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        guard status == 0 else { throw BrokerError("the power cut failed: \(output)") }
        // Every record of the journal is spent; the next run journals afresh.
        try Data().write(to: journal)
        return Int(output.split(separator: " ").first ?? "") ?? 0
    }

    func remove() {
        try? FileManager.default.removeItem(at: directory)
    }
}
