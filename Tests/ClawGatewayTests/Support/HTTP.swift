import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

@testable import ClawGateway

/// A small HTTP client for the tests, on async-http-client.
enum HTTP {
    struct Answer: Sendable {
        var status: Int
        var body: String
        var json: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any]) ?? [:]
        }
    }

    static func request(
        _ method: HTTPMethod, _ url: String, headers: [(String, String)] = [], body: [UInt8]? = nil,
        timeout: Duration = .seconds(10)
    ) async throws -> Answer {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .nanoseconds(Int64(timeout.seconds * 1e9)))
        let collected = try await response.body.collect(upTo: 1 << 22)
        return Answer(status: Int(response.status.code), body: String(buffer: collected))
    }

    /// The status, the headers and the body's bytes as they came (a video clip).
    static func bytes(_ url: String, headers: [(String, String)] = []) async throws -> (status: Int, headers: [String: String], body: [UInt8]) {
        var request = HTTPClientRequest(url: url)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let collected = try await response.body.collect(upTo: 1 << 26)
        var fields: [String: String] = [:]
        for header in response.headers { fields[header.name.lowercased()] = header.value }
        return (Int(response.status.code), fields, Array(buffer: collected))
    }

    static func get(_ url: String) async throws -> Answer {
        try await request(.GET, url)
    }

    /// A GET with `Authorization: Bearer <token>` when there is a token.
    static func get(_ url: String, bearer token: String?) async throws -> Answer {
        try await request(.GET, url, headers: token.map { [("Authorization", "Bearer \($0)")] } ?? [])
    }

    static func reachable(port: Int) async -> Bool {
        (try? await request(.GET, "http://127.0.0.1:\(port)/", timeout: .seconds(1))) != nil
    }
}
