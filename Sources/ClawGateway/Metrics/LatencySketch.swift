import Foundation

/// Latencies of one interval in fixed, logarithmic buckets: recording is one
/// logarithm and one increment whatever the number of samples, and the
/// quantiles it gives are within one bucket (10 %) of the true ones. The
/// smallest and largest samples are kept exactly.
struct LatencySketch: Sendable {
    /// Bucket `i` holds samples up to `base · growth^i` milliseconds.
    static let base = 0.01
    static let growth = 1.1
    static let bucketCount = 160  // up to 0.01 ms · 1.1^159 ≈ 38 s; longer ones count in the last bucket
    private static let logGrowth = log(growth)

    private var counts = [Int](repeating: 0, count: bucketCount)
    private(set) var count = 0
    private var smallest = Double.infinity
    private var largest = 0.0

    mutating func record(milliseconds value: Double) {
        guard value.isFinite, value >= 0 else { return }
        let index = value <= Self.base ? 0 : Swift.min(Self.bucketCount - 1, Int((log(value / Self.base) / Self.logGrowth).rounded(.up)))
        counts[index] += 1
        count += 1
        smallest = Swift.min(smallest, value)
        largest = Swift.max(largest, value)
    }

    /// The `q` quantile (0 < q ≤ 1): the upper bound of the bucket holding
    /// it, kept between the smallest and largest sample. Zero with no samples.
    func quantile(_ q: Double) -> Double {
        guard count > 0 else { return 0 }
        let rank = Swift.max(1, Int((q * Double(count)).rounded(.up)))
        var seen = 0
        for (index, bucket) in counts.enumerated() where bucket > 0 {
            seen += bucket
            if seen >= rank {
                let upper = Self.base * pow(Self.growth, Double(index))
                return Swift.min(Swift.max(upper, smallest), largest)
            }
        }
        return largest
    }

    var max: Double { count > 0 ? largest : 0 }

    mutating func reset() {
        guard count > 0 else { return }
        for index in counts.indices { counts[index] = 0 }
        count = 0
        smallest = .infinity
        largest = 0
    }
}
