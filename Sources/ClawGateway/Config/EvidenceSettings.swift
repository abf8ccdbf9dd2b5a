import Foundation

/// `evidence:` of `gateway.yaml`: a video of every game (SPEC §14). Each
/// camera with a `stream` is recorded into a ring of short segments; a
/// game's clip is cut from them when it ends.
struct EvidenceSettings: Sendable, Equatable {
    /// Where the clips (`<dir>/<machine>/<game>-<camera>.mp4`) and the
    /// segments (`<dir>/.ring/<machine>/<camera>/`) are kept.
    var dir: String
    /// How much of each camera the ring of segments keeps.
    var buffer: Duration = .seconds(600)
    /// Before the coin and after the result, in each clip.
    var pad: Duration = .seconds(2)
    /// How long a clip is kept from its game's end, unless held for a dispute.
    var keep: Duration = .seconds(30 * 86400)
    /// The most the clips may take on disk: the oldest unheld go first.
    var maxDisk: Int64 = 20 << 30
    /// Kept free on the evidence folder's file system, which is usually the
    /// database's too: the oldest unheld clips go first, and below it even
    /// then, recording stops until there is room (SPEC §14).
    var minFree: Int64 = 2 << 30
    /// A clip not cut within this (a hung ffmpeg, a write that never ends)
    /// is given up with its reason: no game's record waits for it.
    var cutTimeout: Duration = .seconds(60)

    static let keys = ["dir", "buffer", "pad", "keep", "max_disk", "min_free", "cut_timeout"]

    /// Reads the section, reporting every problem under its key's path;
    /// `resolve` makes a relative `dir` relative to the config file.
    static func read(_ section: ConfigReader.Section, resolve: (String) -> String) -> EvidenceSettings? {
        let dir = section.nonEmpty("dir", required: true)
        let buffer = section.duration("buffer", default: .seconds(600), atLeast: .seconds(30))
        let pad = section.duration("pad", default: .seconds(2))
        let keep = section.duration("keep", default: .seconds(30 * 86400), atLeast: .seconds(60))
        let maxDisk = size(section, "max_disk", default: 20 << 30)
        let minFree = size(section, "min_free", default: 2 << 30)
        let cutTimeout = section.duration("cut_timeout", default: .seconds(60), atLeast: .seconds(1))
        guard let dir else { return nil }
        return EvidenceSettings(
            dir: resolve(dir), buffer: buffer, pad: pad, keep: keep, maxDisk: maxDisk, minFree: minFree, cutTimeout: cutTimeout)
    }

    /// The size at `key`, 1 MiB at least; the problem reported under its path.
    private static func size(_ section: ConfigReader.Section, _ key: String, default fallback: Int64) -> Int64 {
        guard let text = section.string(key) else { return fallback }
        guard let bytes = size(text), bytes >= 1 << 20 else {
            section.reader.report(section.path(key), "\"\(text)\" is not a size of 1MiB or more; write e.g. 512MiB, 200MiB or 20GiB")
            return fallback
        }
        return bytes
    }

    /// A size as the file writes it: `512KiB`, `200MiB`, `20GiB`, `1TiB`.
    static func size(_ text: String) -> Int64? {
        let units: [(String, Int64)] = [("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("TiB", 1 << 40)]
        for (suffix, factor) in units where text.hasSuffix(suffix) {
            guard let number = Int64(text.dropLast(suffix.count)), number > 0, number <= Int64.max / factor else { return nil }
            return number * factor
        }
        return nil
    }

    /// A size as the file writes it, in its largest whole unit: `2GiB`, `1536MiB`.
    static func format(_ bytes: Int64) -> String {
        let units: [(String, Int64)] = [("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        for (suffix, factor) in units where bytes != 0 && bytes % factor == 0 {
            return "\(bytes / factor)\(suffix)"
        }
        return "\(bytes) bytes"
    }

    /// Why `stream` cannot be recorded, or nil: the gateway pulls RTMP.
    static func streamProblem(_ stream: String) -> String? {
        guard let url = URL(string: stream), let scheme = url.scheme?.lowercased(), ["rtmp", "rtmps"].contains(scheme),
            let host = url.host, !host.isEmpty
        else {
            return "\"\(stream)\" is not an RTMP URL; with evidence: every camera's stream is pulled as rtmp://host[:port]/app/key"
        }
        return nil
    }
}
