import Foundation
import Hummingbird
import Protocol

/// The wallets' routes (SPEC §11): the payment service's signed top-up, an
/// operator's adjustment, and reading a wallet; served by a site over its
/// SQLite and by a chain's recorder over its PostgreSQL. Each change is
/// answered once it is durable, and told to its player (14) where the
/// server can tell players.
struct CreditsRoutes<Context: OperatorRequestContext>: Sendable {
    let keeper: any WalletKeeper
    /// `topup_secret` and `max_topup`.
    let settings: CreditsSettings
    /// The IM providers players come through (`netease`, `generic`): a
    /// wallet of another cannot be anyone's.
    let providers: [String]
    let now: @Sendable () -> Date
    /// Command 14 to a player, once their wallet changed; a recorder tells no one.
    let tell: @Sendable (PlayerReply) -> Void

    /// - Parameters:
    ///   - router: the top-up, which carries its own signature and no token.
    ///   - reads: behind the read token.
    ///   - admin: behind the admin token; nil when there is none.
    func add(to router: Router<Context>, reads: RouterGroup<Context>, admin: RouterGroup<Context>?) {
        router.post("/v1/credits/topups") { request, _ in
            let body = Array(buffer: try await request.body.collect(upTo: Self.maxBody))
            let entry = try TopUp.read(
                body: body, header: { request.header($0) }, settings: settings,
                providers: providers, now: now())
            switch await keeper.topUp(entry) {
            case .written(let balance):
                tell(entry, balance: balance)
                return JSONResponse.make(.ok, TopUp.Answer(entry, balance: balance, duplicate: false))
            case .duplicate(let balance):
                return JSONResponse.make(.ok, TopUp.Answer(entry, balance: balance, duplicate: true))
            case .conflict:
                throw Refusal(
                    .conflict, code: "order_conflict",
                    "Order \(entry.key ?? "") was taken before with another provider, account or amount; nothing was changed.")
            case .insufficient, .unavailable:
                throw Refusal.unavailable("The top-up could not be saved now; send it again (the same order is never added twice).")
            }
        }
        reads.get("/v1/players/:provider/:account/wallet") { request, context in
            let player = try player(context)
            let limit = try request.integer("limit", default: 20, range: 1...500)
            let offset = try request.integer("offset", default: 0, range: 0...1_000_000)
            let page = try await keeper.wallet(player, limit: limit, offset: offset)
            return JSONResponse.make(.ok, WalletAnswer(player, page))
        }
        admin?.post("/v1/players/:provider/:account/adjust") { request, context in
            let player = try player(context)
            let body = Array(buffer: try await request.body.collect(upTo: Self.maxBody))
            let adjustment = try Self.adjustment(body)
            let entry = LedgerEntry(
                wallet: player, kind: .adjust, credits: adjustment.credits, key: adjustment.key, reason: adjustment.reason,
                digest: adjustment.digest, at: now())
            let answer = { (balance: Int64) in
                AdjustAnswer(player: player, credits: adjustment.credits, reason: adjustment.reason, key: adjustment.key, balance: balance)
            }
            let audit = context.audit(.adjust, target: AuditTarget.player(player), reason: adjustment.reason)
            switch await keeper.adjust(entry, audit: audit) {
            case .written(let balance):
                tell(entry, balance: balance)
                return JSONResponse.make(.ok, answer(balance))
            case .duplicate(let balance):
                // The same key and body again: the first answer again, nothing changed.
                return JSONResponse.make(.ok, answer(balance))
            case .conflict:
                throw Refusal(
                    .conflict, code: "key_conflict",
                    "Key \(adjustment.key) was used for another adjustment of this wallet; nothing was changed. Use a new key for a new adjustment.")
            case .insufficient(let balance):
                throw Refusal(
                    .conflict, code: ErrorCode.insufficientCredits.rawValue,
                    "The balance of \(player.accid) is \(balance): taking \(-adjustment.credits) would take it below 0. Nothing was written.")
            case .unavailable:
                // Refused before it was taken, or taken and not saved in time (it is then written once storage is back).
                throw Refusal.unavailable(
                    "The adjustment could not be confirmed as saved: storage is failing (see /readyz). Send it again with the same key: it is taken once.")
            }
        }
    }

    /// Top-ups and adjustments are a few dozen bytes.
    static var maxBody: Int { 4096 }

    /// The player the route names: a provider players come through, an account as the ingress takes it.
    private func player(_ context: Context) throws -> PlayerAddress {
        try Self.player(context, providers: providers)
    }

    /// The player a route's `:provider` and `:account` name (the wallet's
    /// routes, the prizes'): 404 for a provider players do not come through.
    static func player(_ context: Context, providers: [String]) throws -> PlayerAddress {
        let provider = try context.pathParameter("provider")
        let account = try context.pathParameter("account")
        guard providers.contains(provider) else {
            throw Refusal(
                .notFound, code: "unknown_provider",
                "Players come through \(providers.joined(separator: " or ")) here, not \(provider.debugDescription).")
        }
        try TopUp.check(account: account)
        return PlayerAddress(accid: account, provider: provider)
    }

    /// Command 14 to the player, once the change is durable.
    private func tell(_ entry: LedgerEntry, balance: Int64) {
        tell(
            PlayerReply(
                to: entry.wallet,
                message: WireMessage(.creditsChanged, data: String(balance), change: entry.credits, reason: entry.kind.rawValue),
                priority: .high, expires: nil))
    }

    /// An operator's adjustment as asked.
    struct Adjustment: Sendable, Equatable {
        var credits: Int64
        var reason: String
        /// Once per wallet: the same key again changes nothing (SPEC §11).
        var key: String
        /// What makes two adjustments with one key the same: the credits and the reason.
        var digest: String { Signatures.sha256Hex(Array("\(credits)\u{0}\(reason)".utf8)) }
    }

    /// `{"credits":n,"reason":"…","key":"…"}`: n a whole number other than 0
    /// (negative takes credits away), the reason 1 to ``maxReason``
    /// characters, the key 1 to ``maxKeyBytes`` bytes.
    static func adjustment(_ body: [UInt8]) throws -> Adjustment {
        let fields = try TopUp.fields(body, example: #"{"credits":5,"reason":"prize not dropped, table 3","key":"ops-2026-0042"}"#)
        var credits: Int64?
        var reason: String?
        var key: String?
        for field in fields {
            switch (field.key, field.value) {
            case ("credits", .number(let number)) where number.int64 != nil: credits = number.int64
            case ("credits", _): throw TopUp.invalid("credits: a whole number, other than 0.")
            case ("reason", .string(let text)): reason = text.trimmingCharacters(in: .whitespacesAndNewlines)
            case ("reason", _): throw TopUp.invalid("reason: a string.")
            case ("key", .string(let text)): key = text
            case ("key", _): throw TopUp.invalid("key: a string.")
            default: throw TopUp.invalid("Unknown field \(field.key): only credits, reason and key.")
            }
        }
        guard let credits, credits != 0, credits.magnitude <= UInt64(CreditsSettings.maxAmount) else {
            throw TopUp.invalid("credits: a whole number other than 0, at most \(CreditsSettings.maxAmount) either way.")
        }
        guard let reason, (1...maxReason).contains(reason.count), !PlayerText.hasHiddenCharacters(reason) else {
            throw TopUp.invalid("reason: 1 to \(maxReason) characters without control characters: why, for whoever reads the ledger.")
        }
        guard let key, (1...maxKeyBytes).contains(key.utf8.count), !PlayerText.hasHiddenCharacters(key) else {
            throw TopUp.invalid(
                "key: required, 1 to \(maxKeyBytes) bytes without control characters, new for each adjustment of the wallet: "
                    + "a retry with the same key is taken once.")
        }
        return Adjustment(credits: credits, reason: reason, key: key)
    }

    static var maxReason: Int { 200 }
    static var maxKeyBytes: Int { 64 }
}

/// A top-up as the payment service sends it (SPEC §11):
/// `{"provider","account","credits","order"}`, signed with
/// `credits.topup_secret` in `X-Claw-Timestamp` and `X-Claw-Signature`.
enum TopUp {
    /// How far the signature's timestamp may be from this clock.
    static let maxClockSkew: Duration = .seconds(300)
    static let maxOrderBytes = 128

    /// The entry a signed top-up asks for, or why it is refused: 401 for the
    /// signature and its timestamp, 400 for a body that is not a JSON
    /// object, 422 naming the field for one that is not a top-up.
    static func read(
        body: [UInt8], header: (String) -> String?, settings: CreditsSettings, providers: [String], now: Date
    ) throws -> LedgerEntry {
        let timestampHeader = GenericEnvelope.timestampHeader, signatureHeader = GenericEnvelope.signatureHeader
        guard let timestamp = header(timestampHeader), let signature = header(signatureHeader) else {
            throw Refusal.badSignature("The \(timestampHeader) and \(signatureHeader) headers are required.")
        }
        let expected = Signatures.topupSignature(secret: settings.topupSecret, timestamp: timestamp, body: body)
        guard Signatures.hexEqual(signature, expected) else {
            throw Refusal.badSignature(
                "The signature does not match: HMAC-SHA256 with credits.topup_secret over \"topup.\" + timestamp + \".\" + body, in hex.")
        }
        guard let seconds = Int64(timestamp), ClockSkew.within(maxClockSkew, sent: Date(timeIntervalSince1970: Double(seconds)), now: now)
        else {
            throw Refusal.badSignature("\(timestampHeader) must be Unix seconds within 5 minutes of this gateway's clock.")
        }
        let fields = try fields(body, example: #"{"provider":"netease","account":"alice","credits":100,"order":"pay-2026-0001"}"#)
        var provider: String?, account: String?, credits: Int64?, order: String?
        for field in fields {
            switch (field.key, field.value) {
            case ("provider", .string(let text)): provider = text
            case ("account", .string(let text)): account = text
            case ("credits", .number(let number)) where number.int64 != nil: credits = number.int64
            case ("order", .string(let text)): order = text
            case ("provider", _), ("account", _), ("order", _): throw invalid("\(field.key): a string.")
            case ("credits", _): throw invalid("credits: a whole number from 1 to \(settings.maxTopup).")
            default: break  // A payment service's own fields (currency, amount paid) are not the ledger's.
            }
        }
        guard let provider, providers.contains(provider) else {
            throw invalid("provider: required, one of \(providers.joined(separator: ", ")): the IM the player comes through.")
        }
        guard let account else { throw invalid("account: required, the player's IM account.") }
        try check(account: account)
        guard let credits, (1...settings.maxTopup).contains(credits) else {
            throw invalid("credits: required, a whole number from 1 to \(settings.maxTopup) (credits.max_topup).")
        }
        guard let order, !order.isEmpty, order.utf8.count <= maxOrderBytes, !PlayerText.hasHiddenCharacters(order) else {
            throw invalid("order: required, the payment's id, 1 to \(maxOrderBytes) bytes without control characters.")
        }
        return LedgerEntry(
            wallet: PlayerAddress(accid: account, provider: provider), kind: .topup, credits: credits, key: order, reason: nil,
            digest: digest(provider: provider, account: account, credits: credits), at: now)
    }

    /// What makes two top-ups of one order the same: who and how much.
    static func digest(provider: String, account: String, credits: Int64) -> String {
        Signatures.sha256Hex(Array("\(provider)\u{0}\(account)\u{0}\(credits)".utf8))
    }

    /// An account as the ingress takes one (SPEC §5).
    static func check(account: String) throws {
        guard PlayerText.isAccount(account) else {
            throw invalid("account: 1 to \(PlayerText.maxAccountBytes) bytes without control or invisible formatting characters.")
        }
    }

    static func fields(_ body: [UInt8], example: String) throws -> [JSONField] {
        do throws(JSONReadError) {
            return try JSONObjectReader.fields(in: body)
        } catch {
            throw Refusal.badRequest("Send a JSON object, e.g. \(example).")
        }
    }

    static func invalid(_ message: String) -> Refusal {
        Refusal(.unprocessableContent, code: "invalid_body", message)
    }

    /// The top-up's answer: what was asked, and the balance now.
    struct Answer: Encodable {
        var order: String
        var provider: String
        var account: String
        var credits: Int64
        var balance: Int64
        /// True when the order was taken before: nothing was added this time.
        var duplicate: Bool

        init(_ entry: LedgerEntry, balance: Int64, duplicate: Bool) {
            order = entry.key ?? ""
            provider = entry.wallet.provider
            account = entry.wallet.accid
            credits = entry.credits
            self.balance = balance
            self.duplicate = duplicate
        }
    }
}

struct AdjustAnswer: Encodable {
    var provider: String
    var account: String
    var credits: Int64
    var reason: String
    var key: String
    /// The balance the adjustment left (a retry is answered the same).
    var balance: Int64

    init(player: PlayerAddress, credits: Int64, reason: String, key: String, balance: Int64) {
        provider = player.provider
        account = player.accid
        self.credits = credits
        self.reason = reason
        self.key = key
        self.balance = balance
    }
}

/// `GET /v1/players/<provider>/<account>/wallet` and the demo's `/wallet`:
/// the balance and a page of entries, newest first.
struct WalletAnswer: Encodable, Sendable {
    var provider: String
    var account: String
    var balance: Int64
    var entries: [Entry]

    struct Entry: Encodable, Sendable {
        var kind: String
        var credits: Int64
        /// A top-up's order id.
        var order: String?
        /// A debit's or refund's game.
        var session: String?
        /// An adjustment's reason.
        var reason: String?
        var at: String
    }

    init(_ player: PlayerAddress, _ page: WalletPage) {
        provider = player.provider
        account = player.accid
        balance = page.balance
        entries = page.entries.map { entry in
            Entry(
                kind: entry.kind.rawValue, credits: entry.credits, order: entry.kind == .topup ? entry.key : nil,
                session: entry.kind == .debit || entry.kind == .refund ? entry.key : nil, reason: entry.reason,
                at: Timestamp.string(entry.at))
        }
    }
}
