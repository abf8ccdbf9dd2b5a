import Foundation

/// A router's word that a player accepted a turn at a site (SPEC §9, "No
/// site spends another's money"): the router that routes an accept (12)
/// attaches one to the copy it publishes on the site's inbox; the site
/// passes it with the game's debit; the chain's ledger debits only with a
/// valid, unused voucher of that site for that player, session and price.
///
/// Its MAC is keyed with the `ledger_key` the routers and the recorder share
/// and no site holds, over the site, the player (provider and account), the
/// session the player accepted, the copy's id and the time the router
/// received it, and the machine's price as its site's directory lists it: a
/// site can pass a voucher on, never make one, nor use one for another
/// player, session, price or site.
///
/// ```json
/// {"copy":"claw-router-a-1f2e3d-9a…","received_ms":1764051200123,"price":2,"mac":"5b1c…"}
/// ```
public struct ChainVoucher: Codable, Sendable, Equatable, Hashable {
    /// The id of the copy the accept came in: one voucher per copy, used once.
    public var copy: String
    /// When the router received the copy, Unix milliseconds (its wall clock).
    public var receivedMS: Int64
    /// The price the site's directory listed for the machine.
    public var price: Int64
    /// Hex HMAC-SHA256 over the fields above and whom they are for (``message(site:provider:account:session:)``).
    public var mac: String

    enum CodingKeys: String, CodingKey {
        case copy, price, mac
        case receivedMS = "received_ms"
    }

    /// A voucher made with `key` (a router's `ledger_key`).
    public init(key: String, site: String, provider: String, account: String, session: String, copy: String, receivedMS: Int64, price: Int64)
    {
        self.copy = copy
        self.receivedMS = receivedMS
        self.price = price
        mac = ""
        mac = Self.mac(key: key, message(site: site, provider: provider, account: account, session: session))
    }

    /// The bytes the MAC is over: every field length-prefixed, so that no
    /// two different sets of fields give the same bytes whatever they contain.
    public func message(site: String, provider: String, account: String, session: String) -> [UInt8] {
        var bytes = Array("claw-voucher-1".utf8)
        for field in [site, provider, account, session, copy, String(receivedMS), String(price)] {
            let utf8 = Array(field.utf8)
            bytes += Array("\n\(utf8.count):".utf8) + utf8
        }
        return bytes
    }

    /// Whether this voucher was made with `key` for this site, player and
    /// session; compared in constant time.
    public func isValid(key: String, site: String, provider: String, account: String, session: String) -> Bool {
        Signatures.hexEqual(mac, Self.mac(key: key, message(site: site, provider: provider, account: account, session: session)))
    }

    private static func mac(key: String, _ message: [UInt8]) -> String {
        Signatures.hmacHex(key: Array(key.utf8), message)
    }

    /// The longest copy id a voucher may carry: a router's are well under it.
    public static let maxCopyBytes = 128
}
