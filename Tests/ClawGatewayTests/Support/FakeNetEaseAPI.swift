import Crypto
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle
import Synchronization
import Testing

@testable import ClawGateway

/// A local stand-in for NetEase's server API: `POST /msg/sendAttachMsg.action`
/// with the headers and form of the real one. It checks AppKey, Nonce,
/// CurTime and CheckSum like NetEase does, records every message, and can be
/// told to fail or to hang.
final class FakeNetEaseAPI: Sendable {
    enum Mode: Sendable {
        case ok, failing, hanging
        /// Answers as `ok` does after taking this long over each call, like a
        /// busy API: `sent.at` is when the call arrived, before the delay.
        case slow(Duration)
    }

    struct Sent: Sendable {
        var fields: [String: String]
        var headerProblem: String?
        /// When the call arrived.
        var at = ContinuousClock.now
        var from: String { fields["from"] ?? "" }
        var to: String { fields["to"] ?? "" }
        var attach: String { fields["attach"] ?? "" }
    }

    static let appKey = "test-app-key"
    static let appSecret = "test-app-secret"

    let port: Int
    let sent = Recorder<Sent>()
    private let mode = Recorder<Mode>()
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    var baseURL: String { "http://127.0.0.1:\(port)" }

    init() async throws {
        port = try FreePort.next()
        let router = Router()
        let sent = sent, mode = mode
        router.post("/msg/sendAttachMsg.action") { request, _ -> Response in
            var request = request
            let body = try await request.collectBody(upTo: 1 << 20)
            let form = FormEncoding.decode(String(buffer: body))
            let problem = Self.checkHeaders(request)
            sent.append(Sent(fields: form, headerProblem: problem))
            let code = problem == nil ? 200 : 414
            let answer = Response(status: .ok, body: ResponseBody(byteBuffer: ByteBuffer(string: #"{"code":\#(code)}"#)))
            switch mode.items.last ?? .ok {
            case .ok:
                return answer
            case .failing:
                return Response(status: .internalServerError, body: ResponseBody(byteBuffer: ByteBuffer(string: "{}")))
            case .hanging:
                try await Task.sleep(for: .seconds(3600))
                return Response(status: .ok)
            case .slow(let delay):
                // The delay is the API's work, not a wait of the test's.
                try await Task.sleep(for: delay)
                return answer
            }
        }
        let app = Application(
            router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: port)),
            logger: Logger(label: "fake-netease"))
        group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [app], logger: Logger(label: "fake-netease")))
        let group = group
        task = Task { try await group.run() }
        try await eventually("the fake NetEase API to listen") { await HTTP.reachable(port: port) }
    }

    func set(_ newMode: Mode) { mode.append(newMode) }

    /// Messages sent to `player`, decoded.
    func attachments(to player: String) -> [String] {
        sent.items.filter { $0.to == player }.map(\.attach)
    }

    func stop() async {
        await group.triggerGracefulShutdown()
        task.cancel()
        _ = try? await task.value
    }

    /// What NetEase would refuse: the checks of its server API.
    private static func checkHeaders(_ request: Request) -> String? {
        guard request.header("AppKey") == appKey else { return "AppKey" }
        guard let nonce = request.header("Nonce"), !nonce.isEmpty, nonce.count <= 128 else { return "Nonce" }
        guard let curTime = request.header("CurTime"), let seconds = Double(curTime),
            abs(seconds - Date().timeIntervalSince1970) < 300
        else { return "CurTime (seconds)" }
        let digest = Insecure.SHA1.hash(data: Array((appSecret + nonce + curTime).utf8))
        let expected = digest.map { String(format: "%02x", $0) }.joined()
        guard request.header("CheckSum") == expected else { return "CheckSum" }
        guard request.header("Content-Type")?.hasPrefix("application/x-www-form-urlencoded") == true else { return "Content-Type" }
        return nil
    }
}
