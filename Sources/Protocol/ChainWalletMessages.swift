import Foundation

/// What a site asks of the chain's ledger (SPEC §11), on
/// `<prefix>/<site>/wallet`, QoS 1: a game's debit before its coin, or its
/// refund from the site's durable outbox. Keyed by the game's session, so
/// that asking twice changes the wallet once.
///
/// ```json
/// {"kind":"debit","session":"…m1-7","provider":"netease","account":"alice","credits":2,"machine":"m1",
///  "voucher":{"copy":"…","received_ms":1764051200123,"price":2,"mac":"…"}}
/// ```
///
/// A debit carries the voucher of the accept it pays for (SPEC §9): the
/// ledger debits nothing without a valid, unused one of the asking site for
/// that player, session and price.
///
/// A refund is paid only where the session's debit exists, for the same
/// wallet and site; a refund that finds no debit closes the session, so that
/// a debit asked before and delivered after it is refused: the site asks a
/// refund for every turn whose debit it asked and whose game never started.
public struct ChainWalletAsk: Codable, Sendable, Equatable {
    public enum Kind: String, Codable, Sendable {
        case debit, refund
    }

    public var kind: Kind
    public var session: String
    public var provider: String
    public var account: String
    /// Positive: what the game costs, or what is paid back.
    public var credits: Int64
    public var machine: String?
    /// A debit's voucher, from the router that routed its accept; a refund has none.
    public var voucher: ChainVoucher?

    public init(
        kind: Kind, session: String, provider: String, account: String, credits: Int64, machine: String?, voucher: ChainVoucher? = nil
    ) {
        self.kind = kind
        self.session = session
        self.provider = provider
        self.account = account
        self.credits = credits
        self.machine = machine
        self.voucher = voucher
    }

    /// The most one game may cost: anything above is not a price.
    public static let maxCredits: Int64 = 1_000_000

    public var payload: [UInt8] { JSONCoding.encode(self) }

    public static func decode(_ payload: [UInt8]) -> ChainWalletAsk? {
        JSONCoding.decode(ChainWalletAsk.self, from: payload)
    }
}

/// The recorder's answer on `<prefix>/<site>/wallet/ack`, QoS 1, once the
/// ledger's transaction is committed.
///
/// ```json
/// {"kind":"debit","session":"…m1-7","result":"debited","balance":8}
/// ```
///
/// The balance is said only to the site the wallet's game is at: with a
/// debit written or found (`debited`), short (`insufficient`, for a valid
/// voucher only) or a refund of the site's own debit (`refunded`). A refused
/// debit and a refund that finds none of the site's say nothing of it.
public struct ChainWalletAnswer: Codable, Sendable, Equatable {
    public enum Result: String, Codable, Sendable {
        /// The debit is written (now, or when it was first asked).
        case debited
        /// The balance is under the price: nothing written.
        case insufficient
        /// The session is closed (refunded, or its refund found no debit), or
        /// another wallet's or site's, or the voucher is missing, forged,
        /// used, too old or for another price: nothing written, no game.
        case refused
        /// The refund is written (now, or before).
        case refunded
        /// The refund found no debit: nothing to pay back, and the session is closed.
        case nothingToRefund = "nothing_to_refund"
    }

    public var kind: ChainWalletAsk.Kind
    public var session: String
    public var result: Result
    /// The wallet's balance after the answer; nil where the asking site is not told it.
    public var balance: Int64?

    public init(kind: ChainWalletAsk.Kind, session: String, result: Result, balance: Int64?) {
        self.kind = kind
        self.session = session
        self.result = result
        self.balance = balance
    }

    public var payload: [UInt8] { JSONCoding.encode(self) }

    public static func decode(_ payload: [UInt8]) -> ChainWalletAnswer? {
        JSONCoding.decode(ChainWalletAnswer.self, from: payload)
    }
}
