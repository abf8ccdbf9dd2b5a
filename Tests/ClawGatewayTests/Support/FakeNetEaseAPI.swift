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
/// told to fail or to hang. It also keeps what the app server uses (SPEC §8):
/// accounts (`user/create`), chatrooms' online counts (`chatroom/get`) and
/// queues (`queueOffer`, `queuePoll`, `queueList`), checked the same way,
/// with a mode of their own (``setChatroom(_:)``).
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
    /// The accounts and chatrooms of the app-server calls.
    let chatrooms = Chatrooms()

    /// What the app-server calls keep and record.
    final class Chatrooms: Sendable {
        /// Every app-server call (`user/create.action`, `chatroom/…`), in order: `action` is the path without `/`.
        let calls = Recorder<(action: String, call: Sent)>()
        fileprivate let mode = Recorder<Mode>()
        /// Accounts made by `user/create`, by accid: name and token.
        let users = Mutex<[String: (name: String, token: String)]>([:])
        /// Each chatroom's queue, in order.
        let queues = Mutex<[Int64: [(key: String, value: String)]]>([:])
        /// What `chatroom/get` answers as `onlineusercount`, by room.
        let onlineCounts = Mutex<[Int64: Int]>([:])
    }
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// The `im:` section of a config whose NetEase replies come here, at the
    /// top level of the YAML: with `genericSecret`, the generic webhook too.
    func imSection(replyConcurrency: Int? = 2, genericSecret: String? = nil) -> String {
        var yaml = """
            im:
              netease:
                app_key: \(Self.appKey)
                app_secret: \(Self.appSecret)
                api_base: \(baseURL)
                reply_timeout: 1s

            """
        if let replyConcurrency { yaml += "    reply_concurrency: \(replyConcurrency)\n" }
        if let genericSecret { yaml += "  generic:\n    secret: \(genericSecret)\n" }
        return yaml
    }

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
        Self.addAppServerCalls(to: router, chatrooms: chatrooms)
        let app = Application(
            router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: port)),
            logger: Logger(label: "fake-netease"))
        group = ServiceGroup(configuration: ServiceGroupConfiguration(services: [app], logger: Logger(label: "fake-netease")))
        let group = group
        task = Task { try await group.run() }
        try await eventually("the fake NetEase API to listen") { await HTTP.reachable(port: port) }
    }

    func set(_ newMode: Mode) { mode.append(newMode) }

    /// How the app-server calls answer from now on (sendAttachMsg keeps its own mode).
    func setChatroom(_ newMode: Mode) { chatrooms.mode.append(newMode) }

    /// A chatroom's queue as `queueList` would answer it: keys in order.
    func queueKeys(_ room: Int64) -> [String] { chatrooms.queues.withLock { $0[room, default: []].map(\.key) } }

    /// The app-server calls made of `action` (e.g. `chatroom/queueOffer.action`).
    func calls(_ action: String) -> [Sent] { chatrooms.calls.items.filter { $0.action == action }.map(\.call) }

    private static func addAppServerCalls(to router: Router<BasicRequestContext>, chatrooms: Chatrooms) {
        let actions = [
            "user/create.action", "user/refreshToken.action", "chatroom/get.action", "chatroom/queueOffer.action", "chatroom/queuePoll.action",
            "chatroom/queueList.action",
        ]
        for action in actions {
            router.post(RouterPath("/" + action)) { request, _ -> Response in
                var request = request
                let body = try await request.collectBody(upTo: 1 << 20)
                let form = FormEncoding.decode(String(buffer: body))
                let problem = Self.checkHeaders(request)
                chatrooms.calls.append((action, Sent(fields: form, headerProblem: problem)))
                switch chatrooms.mode.items.last ?? .ok {
                case .ok:
                    break
                case .failing:
                    return Response(status: .internalServerError, body: ResponseBody(byteBuffer: ByteBuffer(string: "{}")))
                case .hanging:
                    try await Task.sleep(for: .seconds(3600))
                    return Response(status: .ok)
                case .slow(let delay):
                    try await Task.sleep(for: delay)
                }
                let answer: [String: Any] = problem != nil ? ["code": 414, "desc": "bad \(problem ?? "")"] : chatrooms.answer(action, form)
                let data = try JSONSerialization.data(withJSONObject: answer)
                return Response(status: .ok, body: ResponseBody(byteBuffer: ByteBuffer(bytes: data)))
            }
        }
    }

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

extension FakeNetEaseAPI.Chatrooms {
    /// What NetEase answers a checked call, and what it does.
    fileprivate func answer(_ action: String, _ form: [String: String]) -> [String: Any] {
        let room = Int64(form["roomid"] ?? "") ?? 0
        switch action {
        case "user/create.action":
            guard let accid = form["accid"], !accid.isEmpty, accid.count <= 32 else { return ["code": 414, "desc": "parameter error"] }
            let name = form["name"] ?? ""
            return users.withLock { users -> [String: Any] in
                guard users[accid] == nil else { return ["code": 414, "desc": "already register"] }
                let token = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
                users[accid] = (name, token)
                return ["code": 200, "info": ["token": token, "accid": accid, "name": name]]
            }
        case "user/refreshToken.action":
            guard let accid = form["accid"] else { return ["code": 414, "desc": "parameter error"] }
            return users.withLock { users -> [String: Any] in
                guard let user = users[accid] else { return ["code": 414, "desc": "user not exist"] }
                let token = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
                users[accid] = (user.0, token)
                return ["code": 200, "info": ["token": token, "accid": accid]]
            }
        case "chatroom/get.action":
            var chatroom: [String: Any] = ["roomid": room, "valid": true, "name": "room \(room)", "creator": "claw", "announcement": NSNull()]
            if form["needOnlineUserCount"] == "true" { chatroom["onlineusercount"] = onlineCounts.withLock { $0[room] ?? 0 } }
            return ["code": 200, "chatroom": chatroom]
        case "chatroom/queueOffer.action":
            guard let key = form["key"], let value = form["value"] else { return ["code": 414, "desc": "parameter error"] }
            queues.withLock { queues in
                if let index = queues[room, default: []].firstIndex(where: { $0.key == key }) {
                    queues[room, default: []][index].value = value
                } else {
                    queues[room, default: []].append((key, value))
                }
            }
            return ["code": 200]
        case "chatroom/queuePoll.action":
            let taken = queues.withLock { queues -> (key: String, value: String)? in
                let wanted = form["key"]
                guard let index = queues[room, default: []].firstIndex(where: { element in wanted.map { element.key == $0 } ?? true })
                else { return nil }
                return queues[room, default: []].remove(at: index)
            }
            return ["code": 200, "desc": taken.map { [$0.key: $0.value] } ?? [:]]
        default:
            let list = queues.withLock { $0[room, default: []].map { [$0.key: $0.value] } }
            return ["code": 200, "desc": ["list": list]]
        }
    }
}
