import Foundation
import Hummingbird
import Logging

/// The demo's app-server routes (SPEC §8): `POST <prefix>/tourist` and
/// `POST <prefix>/room/list`, form-urlencoded, answered like the demo's
/// Java server: always HTTP 200, `{"code":200,"data":…}` or
/// `{"code":<n>,"msg":"…"}`. Any `Host`, no token: the demo clients send
/// neither. `Demo-Id` and `appkey` headers are ignored.
struct AppServerRoutes<Context: ConnectionRequestContext>: Sendable {
    let appServer: AppServer
    let arcade: Arcade
    /// With `credits:`, `<prefix>/wallet` shows a tourist their wallet (SPEC §8, §11).
    let wallets: Wallets?
    /// With `prizes:` at a site, `<prefix>/prizes` and its ship and exchange
    /// (SPEC §15; AppServerRoutes+Prizes.swift).
    var prizes: (any PrizeKeeper)? = nil

    /// A form larger than this is refused (code 413): the demo's are a few dozen bytes.
    static var maxForm: Int { 4096 }

    func add(to router: Router<Context>) {
        let prefix = appServer.settings.pathPrefix
        router.post(RouterPath(prefix + "/tourist")) { request, context in
            await answer(request) { form in
                await tourist(form, client: context.client)
            }
        }
        router.post(RouterPath(prefix + "/room/list")) { request, context in
            await answer(request) { form in
                await roomList(form, client: context.client)
            }
        }
        if wallets != nil {
            router.post(RouterPath(prefix + "/wallet")) { request, context in
                await answer(request) { form in
                    await wallet(form, client: context.client)
                }
            }
        }
        if let prizes { addPrizes(prizes, to: router, prefix: prefix) }
    }

    /// The tourist's balance and newest entries (`limit`, `offset` as `room/list` takes them).
    private func wallet(_ form: [String: String], client: ClientAddress?) async -> Response {
        let sid = (form["sid"] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !sid.isEmpty else { return Self.failure(400, "sid is required: the one the tourist call returned.") }
        guard let limit = Self.integer(form["limit"], default: 20, in: 1...500),
            let offset = Self.integer(form["offset"], default: 0, in: 0...1_000_000)
        else { return Self.failure(400, "limit must be a whole number from 1 to 500 and offset one from 0 to 1000000.") }
        let (tourist, refusal) = await tourist(sid: sid, client: client)
        guard let tourist, let wallets else { return refusal ?? Self.failure(401, "sid is unknown or expired.") }
        let player = PlayerAddress(accid: tourist.accid, provider: "netease")
        do {
            return Self.ok(WalletAnswer(player, try await wallets.wallet(player, limit: limit, offset: offset)))
        } catch {
            return Self.failure(500, "The wallet could not be read; try again later.")
        }
    }

    private func tourist(_ form: [String: String], client: ClientAddress?) async -> Response {
        switch await appServer.tourists.login(sid: form["sid"], client: client) {
        case .returning(let tourist):
            return Self.ok(TouristInfo(accid: tourist.accid, nickname: tourist.nickname, imToken: tourist.token))
        case .created(let tourist, let sid):
            return Self.ok(TouristInfo(accid: tourist.accid, nickname: tourist.nickname, imToken: tourist.token, sid: sid))
        case .rateLimited(let seconds):
            return Self.failure(429, "Too many logins or unknown sids from this address; try again in \(seconds) s.")
        case .failed:
            return Self.failure(500, "The tourist account could not be created; try again later.")
        }
    }

    private func roomList(_ form: [String: String], client: ClientAddress?) async -> Response {
        let sid = (form["sid"] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !sid.isEmpty else { return Self.failure(400, "sid is required: the one the tourist call returned.") }
        guard let limit = Self.integer(form["limit"], default: 10, in: 0...1000),
            let offset = Self.integer(form["offset"], default: 0, in: 0...1_000_000)
        else { return Self.failure(400, "limit must be a whole number from 0 to 1000 and offset one from 0 up.") }
        if let refusal = await tourist(sid: sid, client: client).refusal { return refusal }
        return Self.ok(appServer.rooms(limit: limit, offset: offset, machines: arcade.machines))
    }

    /// The live tourist of `sid`, or the answer that refuses it (401, or 429
    /// once the address sent too many bad sids).
    func tourist(sid: String, client: ClientAddress?) async -> (tourist: TouristAccount?, refusal: Response?) {
        switch await appServer.tourists.lookup(sid: sid, client: client) {
        case .valid(let tourist):
            return (tourist, nil)
        case .invalid:
            return (nil, Self.failure(401, "sid is unknown or expired: call tourist again for an account."))
        case .blocked(let seconds):
            return (nil, Self.failure(429, "Too many unknown sids from this address; try again in \(seconds) s."))
        }
    }

    /// Reads the form (the query's fields, then the body's over them) and
    /// answers with `body`; a form that cannot be read is a code 400 or 413.
    func answer(_ request: Request, _ body: ([String: String]) async -> Response) async -> Response {
        var request = request
        let bytes: ByteBuffer
        do {
            bytes = try await request.collectBody(upTo: Self.maxForm)
        } catch {
            return Self.failure(413, "The form is larger than \(Self.maxForm) bytes.")
        }
        var form: [String: String] = [:]
        if let query = request.uri.query { form = FormEncoding.decode(query) }
        guard let text = String(validating: bytes.readableBytesView, as: UTF8.self) else {
            return Self.failure(400, "The form is not UTF-8.")
        }
        form.merge(FormEncoding.decode(text)) { _, body in body }
        return await body(form)
    }

    static func integer(_ text: String?, default fallback: Int, in range: ClosedRange<Int>) -> Int? {
        guard let text, !text.isEmpty else { return fallback }
        guard let value = Int(text), range.contains(value) else { return nil }
        return value
    }

    static func ok(_ data: some Encodable) -> Response {
        JSONResponse.make(.ok, Success(code: 200, data: data))
    }

    static func failure(_ code: Int, _ message: String) -> Response {
        JSONResponse.make(.ok, Failure(code: code, msg: message))
    }

    private struct Success<Payload: Encodable>: Encodable {
        var code: Int
        var data: Payload
    }

    private struct Failure: Encodable {
        var code: Int
        var msg: String
    }
}

/// `data` of `tourist`, the demo clients' `TouristLoginInfo`.
struct TouristInfo: Encodable, Sendable {
    var accid: String
    var nickname: String
    var imToken: String
    /// With `app_server.sessions: secret`, the secret to come back with; only
    /// in a new account's answer (left out otherwise, as the demo's server
    /// leaves out what has no value).
    var sid: String? = nil
}
