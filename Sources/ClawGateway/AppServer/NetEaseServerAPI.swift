import AsyncHTTPClient
import Foundation
import NIOCore
import Protocol

/// The calls of NetEase's server API that the app server makes (SPEC §8):
/// `user/create`, `chatroom/get`, `chatroom/queueOffer`, `queuePoll`,
/// `queueList`. Signed like every server-API call (SPEC §5): `AppKey`,
/// `Nonce`, `CurTime` in seconds, `CheckSum` = SHA1(AppSecret + Nonce + CurTime).
protocol NetEaseAccounts: Sendable {
    /// Creates an IM account; NetEase makes its token.
    func createUser(accid: String, name: String) async throws(NetEaseAPIError) -> NetEaseUser
    /// Gives the account a new token (`user/refreshToken.action`): the old one stops working.
    func refreshToken(accid: String) async throws(NetEaseAPIError)
}

/// The chatroom calls: what the room list and the queue mirror need.
protocol ChatroomAPI: Sendable {
    /// The chatroom's online user count (`chatroom/get.action`, `needOnlineUserCount=true`).
    func onlineUserCount(room: Int64) async throws(NetEaseAPIError) -> Int
    /// Appends `key`, or updates its value in place when it is there (`chatroom/queueOffer.action`).
    func queueOffer(room: Int64, key: String, value: String) async throws(NetEaseAPIError)
    /// Takes `key` out (`chatroom/queuePoll.action`).
    func queuePoll(room: Int64, key: String) async throws(NetEaseAPIError)
    /// Every element in order (`chatroom/queueList.action`).
    func queueList(room: Int64) async throws(NetEaseAPIError) -> [ChatroomQueueElement]
}

struct NetEaseUser: Sendable, Equatable {
    var accid: String
    var name: String
    var token: String
}

/// One element of a chatroom queue: the player's key and `{"nick":"…"}`.
struct ChatroomQueueElement: Sendable, Equatable {
    var key: String
    var value: String
}

/// A call that did not succeed: the API was not reached or did not answer
/// in time (`unreachable`), or it answered with a code other than 200.
enum NetEaseAPIError: Error, Sendable, Equatable {
    case unreachable(String)
    case refused(code: Int, desc: String)

    /// NetEase understood the call and refused what it carries (a 4xx code
    /// such as 414, a bad parameter): sending it again gets the same answer.
    /// Its frequency control (416) and anything unreached pass.
    var refusesTheCall: Bool {
        guard case .refused(let code, _) = self else { return false }
        return (400..<500).contains(code) && code != 416
    }
}

/// The server API over HTTP.
struct NetEaseServerAPI: NetEaseAccounts, ChatroomAPI {
    let settings: NetEaseSettings
    let client: HTTPClient
    /// How long one call may take.
    var timeout: Duration = .seconds(5)

    func createUser(accid: String, name: String) async throws(NetEaseAPIError) -> NetEaseUser {
        let answer = try await call("user/create.action", [("accid", accid), ("name", name)])
        guard let info = answer["info"] as? [String: Any], let token = info["token"] as? String, !token.isEmpty else {
            throw .refused(code: 200, desc: "the answer has no info.token")
        }
        return NetEaseUser(accid: info["accid"] as? String ?? accid, name: info["name"] as? String ?? name, token: token)
    }

    func refreshToken(accid: String) async throws(NetEaseAPIError) {
        // The new token is not kept: nobody may log in as an expired tourist.
        _ = try await call("user/refreshToken.action", [("accid", accid)])
    }

    func onlineUserCount(room: Int64) async throws(NetEaseAPIError) -> Int {
        let answer = try await call("chatroom/get.action", [("roomid", String(room)), ("needOnlineUserCount", "true")])
        guard let chatroom = answer["chatroom"] as? [String: Any], let count = chatroom["onlineusercount"] as? NSNumber else {
            throw .refused(code: 200, desc: "the answer has no chatroom.onlineusercount")
        }
        return max(0, count.intValue)
    }

    func queueOffer(room: Int64, key: String, value: String) async throws(NetEaseAPIError) {
        _ = try await call("chatroom/queueOffer.action", [("roomid", String(room)), ("key", key), ("value", value)])
    }

    func queuePoll(room: Int64, key: String) async throws(NetEaseAPIError) {
        _ = try await call("chatroom/queuePoll.action", [("roomid", String(room)), ("key", key)])
    }

    func queueList(room: Int64) async throws(NetEaseAPIError) -> [ChatroomQueueElement] {
        let answer = try await call("chatroom/queueList.action", [("roomid", String(room))])
        // `desc` is {"list":[{"<key>":"<value>"}, …]}, one single-key object per element.
        guard let desc = answer["desc"] as? [String: Any], let list = desc["list"] as? [Any] else {
            throw .refused(code: 200, desc: "the answer has no desc.list")
        }
        return list.compactMap { item in
            guard let element = item as? [String: Any], element.count == 1, let (key, value) = element.first else { return nil }
            return ChatroomQueueElement(key: key, value: value as? String ?? "")
        }
    }

    /// Posts a signed form to `<api_base>/<action>`; the answer's JSON when its `code` is 200.
    private func call(_ action: String, _ fields: [(String, String)]) async throws(NetEaseAPIError) -> [String: Any] {
        let request = settings.serverAPIRequest(action, fields)
        let status: UInt
        let body: ByteBuffer
        do {
            let response = try await client.execute(request, timeout: TimeAmount(timeout))
            status = response.status.code
            body = try await response.body.collect(upTo: 1 << 20)
        } catch {
            throw .unreachable(String(describing: error))
        }
        guard status == 200 else { throw .unreachable("HTTP \(status)") }
        guard let object = try? JSONSerialization.jsonObject(with: Data(body.readableBytesView)) as? [String: Any] else {
            throw .unreachable("the answer is not a JSON object")
        }
        let code = (object["code"] as? NSNumber)?.intValue ?? -1
        guard code == 200 else {
            throw .refused(code: code, desc: object["desc"] as? String ?? "")
        }
        return object
    }
}

extension NetEaseSettings {
    /// A signed POST of `fields` to `<api_base>/<action>`, as every call of
    /// NetEase's server API is made (SPEC §5): `AppKey`, `Nonce`, `CurTime`
    /// in seconds, `CheckSum` = SHA1(AppSecret + Nonce + CurTime).
    func serverAPIRequest(_ action: String, _ fields: [(String, String)], now: Date = Date()) -> HTTPClientRequest {
        let nonce = Signatures.nonce()
        let curTime = String(Int64(now.timeIntervalSince1970))
        var request = HTTPClientRequest(url: apiBase + "/" + action)
        request.method = .POST
        request.headers.add(name: "AppKey", value: appKey)
        request.headers.add(name: "Nonce", value: nonce)
        request.headers.add(name: "CurTime", value: curTime)
        request.headers.add(name: "CheckSum", value: Signatures.netEaseAPIChecksum(secret: appSecret, nonce: nonce, curTime: curTime))
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded;charset=utf-8")
        request.body = .bytes(ByteBuffer(string: FormEncoding.encode(fields)))
        return request
    }
}

extension NetEaseAPIError: ShapedError {
    var shape: ErrorShape {
        switch self {
        case .unreachable(let reason):
            ErrorShape(code: "netease_unreachable", message: "NetEase's server API was not reached", cause: reason)
        case .refused(let code, let desc):
            ErrorShape(code: "netease_refused", message: "NetEase refused the call with code \(code)", cause: desc.isEmpty ? nil : desc)
        }
    }
}
