import Foundation
import Testing

struct TimedOut: Error, CustomStringConvertible {
    let description: String
}

/// Polls `condition` until it holds or `timeout` passes. For waiting on real
/// processes (a broker, a socket); timers under test use an injected clock.
func eventually(
    _ what: String, timeout: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation,
    _ condition: () async throws -> Bool
) async throws {
    let clock = ContinuousClock()
    let deadline = clock.now.advanced(by: timeout)
    while clock.now < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(10))
    }
    Issue.record("timed out waiting for \(what)", sourceLocation: sourceLocation)
    throw TimedOut(description: "timed out waiting for \(what)")
}
