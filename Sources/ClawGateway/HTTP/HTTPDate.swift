import Foundation
import Synchronization

/// The `Date` header's value, made at most once a second.
enum HTTPDate {
    private static let cache = Mutex<(second: Int, text: String)>((-1, ""))

    static func now() -> String {
        var clock = timespec()
        clock_gettime(CLOCK_REALTIME, &clock)
        let second = Int(clock.tv_sec)
        if let cached = cache.withLock({ $0.second == second ? $0.text : nil }) { return cached }
        var time = time_t(second)
        var parts = tm()
        gmtime_r(&time, &parts)
        var buffer = [CChar](repeating: 0, count: 40)
        let count = strftime(&buffer, buffer.count, "%a, %d %b %Y %H:%M:%S GMT", &parts)
        let text = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        cache.withLock { $0 = (second, text) }
        return text
    }
}
