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

    static let keys = ["dir", "buffer", "pad", "keep", "max_disk"]

    /// Reads the section, reporting every problem under its key's path;
    /// `resolve` makes a relative `dir` relative to the config file.
    static func read(_ section: ConfigReader.Section, resolve: (String) -> String) -> EvidenceSettings? {
        let dir = section.nonEmpty("dir", required: true)
        let buffer = section.duration("buffer", default: .seconds(600), atLeast: .seconds(30))
        let pad = section.duration("pad", default: .seconds(2))
        let keep = section.duration("keep", default: .seconds(30 * 86400), atLeast: .seconds(60))
        var maxDisk: Int64 = 20 << 30
        if let text = section.string("max_disk") {
            if let bytes = size(text), bytes >= 1 << 20 {
                maxDisk = bytes
            } else {
                section.reader.report(section.path("max_disk"), "\"\(text)\" is not a size of 1MiB or more; write e.g. 512MiB, 200MiB or 20GiB")
            }
        }
        guard let dir else { return nil }
        return EvidenceSettings(dir: resolve(dir), buffer: buffer, pad: pad, keep: keep, maxDisk: maxDisk)
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
