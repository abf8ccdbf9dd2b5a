import Foundation
import Hummingbird

/// The demo clients' prizes (SPEC §15), in the app server's manner (SPEC
/// §8): `POST <prefix>/prizes`, `/prizes/ship`, `/prizes/exchange`, each
/// with the tourist's secret `sid` (its player is the tourist's NetEase
/// account), answered HTTP 200 with `{"code":200,"data":…}` or
/// `{"code":<n>,"msg":"…"}`: 400 for a form that is not one, 401 for a sid
/// that is not live, 404 for a prize that is unknown or another's, 409
/// naming the state of the player's own prize that cannot be chosen for,
/// 422 naming the address field that is wrong.
extension AppServerRoutes {
    func addPrizes(_ keeper: any PrizeKeeper, to router: Router<Context>, prefix: String) {
        router.post(RouterPath(prefix + "/prizes")) { request, context in
            await answer(request) { form in
                await player(form, client: context.client) { player in
                    guard let limit = Self.integer(form["limit"], default: 20, in: 1...500),
                        let offset = Self.integer(form["offset"], default: 0, in: 0...1_000_000)
                    else { return Self.failure(400, "limit must be a whole number from 1 to 500 and offset one from 0 to 1000000.") }
                    return await demo { () throws(PrizeRefusal) in
                        let prizes = try await keeper.prizes(of: player, limit: limit, offset: offset)
                        return Self.ok(PrizeList(prizes: prizes.map { PrizeAnswer($0.prize, parcel: $0.parcel) }))
                    }
                }
            }
        }
        router.post(RouterPath(prefix + "/prizes/ship")) { request, context in
            await answer(request) { form in
                await player(form, client: context.client) { player in
                    let ids: [String]
                    let address: ShippingAddress
                    do throws(Refusal) {
                        ids = try PrizeRequests.prizeIDs((form["prizes"] ?? "").split(separator: ",").map(String.init))
                        address = try PrizeRequests.shippingAddress(name: form["name"], phone: form["phone"], address: form["address"])
                    } catch {
                        return Self.failure(422, error.message)
                    }
                    return await demo { () throws(PrizeRefusal) in
                        Self.ok(ParcelAnswer(try await keeper.ship(ids, of: player, to: address, audit: nil), withAddress: false))
                    }
                }
            }
        }
        router.post(RouterPath(prefix + "/prizes/exchange")) { request, context in
            await answer(request) { form in
                await player(form, client: context.client) { player in
                    let id: String
                    do throws(Refusal) {
                        id = try PrizeRequests.prizeID(form["prize"])
                    } catch {
                        return Self.failure(422, error.message)
                    }
                    return await demo { () throws(PrizeRefusal) in
                        let (prize, balance) = try await keeper.exchange(id, of: player, audit: nil)
                        return Self.ok(ExchangeAnswer(prize: PrizeAnswer(prize, parcel: nil), credits: prize.exchange, balance: balance))
                    }
                }
            }
        }
    }

    /// The tourist of the form's `sid` as a player (their NetEase account),
    /// or the answer that refuses the sid.
    private func player(_ form: [String: String], client: ClientAddress?, _ body: (PlayerAddress) async -> Response) async -> Response {
        let sid = (form["sid"] ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        guard !sid.isEmpty else { return Self.failure(400, "sid is required: the one the tourist call returned.") }
        let (tourist, refusal) = await tourist(sid: sid, client: client)
        guard let tourist else { return refusal ?? Self.failure(401, "sid is unknown or expired.") }
        return await body(PlayerAddress(accid: tourist.accid, provider: "netease"))
    }

    /// The keeper's answer, or its refusal in the demo's `{"code","msg"}`.
    private func demo(_ body: () async throws(PrizeRefusal) -> Response) async -> Response {
        do {
            return try await body()
        } catch {
            return Self.failure(error.demoCode, error.refusal.message)
        }
    }
}
