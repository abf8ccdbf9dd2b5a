import Foundation

/// A seeded generator of hostile inputs: mutations of valid seeds (bit
/// flips, cuts, duplicated and spliced ranges, interesting tokens) and plain
/// random bytes. Seeded, so a failure is reproduced by its seed and index.
struct Mutator {
    private var state: UInt64

    init(seed: UInt64) {
        state = seed
    }

    /// SplitMix64.
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    mutating func below(_ bound: Int) -> Int {
        Int(next() % UInt64(max(bound, 1)))
    }

    static let tokens: [String] = [
        "{", "}", "[", "]", ":", ",", "\"", "\\", "\\u0000", "\\ud800", "null", "true", "false", "-0", "1e309", "-1",
        "9223372036854775807", "9223372036854775808", "-9223372036854775809", "0.5", "NaN", "\"command\"", "\"data\"",
        "\"serial\"", "\"1\"", "1001", "\u{0}", "\u{7}", "\u{FEFF}", "💥", "\"\"", "{}", "[]", "\"left\"", "\"sideways\"",
    ]

    /// One input derived from `seeds`.
    mutating func input(from seeds: [[UInt8]]) -> [UInt8] {
        if below(10) == 0 {
            return (0..<below(64)).map { _ in UInt8(truncatingIfNeeded: next()) }
        }
        var bytes = seeds[below(seeds.count)]
        for _ in 0...below(4) {
            mutate(&bytes, seeds: seeds)
        }
        return bytes
    }

    private mutating func mutate(_ bytes: inout [UInt8], seeds: [[UInt8]]) {
        let position = below(bytes.count + 1)
        switch below(7) {
        case 0 where !bytes.isEmpty:
            bytes[min(position, bytes.count - 1)] ^= UInt8(1 << below(8))
        case 1:
            bytes.removeSubrange(position..<min(bytes.count, position + below(8) + 1))
        case 2:
            bytes.insert(contentsOf: Array(Self.tokens[below(Self.tokens.count)].utf8), at: position)
        case 3:
            bytes = Array(bytes.prefix(position))
        case 4:
            let other = seeds[below(seeds.count)]
            let cut = below(other.count + 1)
            bytes = Array(bytes.prefix(position)) + Array(other.suffix(from: cut))
        case 5 where !bytes.isEmpty:
            let start = below(bytes.count)
            let slice = bytes[start..<min(bytes.count, start + below(16) + 1)]
            bytes.insert(contentsOf: slice, at: position)
        default:
            bytes.insert(UInt8(truncatingIfNeeded: next()), at: position)
        }
    }
}

/// How many inputs each fuzz target runs: `CLAW_FUZZ_INPUTS`, or the CI budget.
enum FuzzBudget {
    static var inputs: Int {
        ProcessInfo.processInfo.environment["CLAW_FUZZ_INPUTS"].flatMap(Int.init) ?? 150_000
    }

    static var seed: UInt64 {
        ProcessInfo.processInfo.environment["CLAW_FUZZ_SEED"].flatMap(UInt64.init) ?? 0xC1A7_2026
    }
}
