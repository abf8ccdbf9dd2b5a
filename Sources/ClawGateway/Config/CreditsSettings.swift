/// `credits:` of `gateway.yaml`: games cost credits, paid from the player's
/// wallet and paid back when the game was not fair (SPEC §11). Without it,
/// games are free.
struct CreditsSettings: Sendable, Equatable {
    /// What a game costs on a machine with no `price:` of its own.
    var price: Int64 = 1
    /// Signs the payment service's top-ups (`POST /v1/credits/topups`);
    /// empty at a site of a chain, whose recorder takes them.
    var topupSecret: String
    /// The most one top-up may add.
    var maxTopup: Int64 = 10_000
    /// What a new tourist of the app server starts with, as an `adjust`
    /// with reason `welcome` (SPEC §8); 0: nothing.
    var welcome: Int64 = 0

    static let keys = ["price", "topup_secret", "max_topup", "welcome"]

    /// The largest price, top-up and welcome the file may name: far beyond
    /// any arcade's, far below where sums of them could overflow.
    static let maxAmount = 1_000_000_000

    /// The shortest `topup_secret`: it is all that stands between a stranger
    /// and free credits.
    static let minSecretLength = 16

    /// A machine's `price:` (0: free on this machine), when it has one.
    static func price(_ machine: ConfigReader.Section) -> Int64? {
        guard machine.has("price") else { return nil }
        return Int64(machine.int("price", default: 0, in: 0...maxAmount))
    }

    /// Reads the section, reporting every problem under its key's path. At
    /// a site of a chain (`inChain`) the wallet is the chain's: top-ups go to
    /// the recorder, and tourists are the app server's of the chain.
    static func read(_ section: ConfigReader.Section, inChain: Bool = false) -> CreditsSettings? {
        let price = Int64(section.int("price", default: 1, in: 0...maxAmount))
        if inChain {
            for key in ["topup_secret", "max_topup", "welcome"] where section.has(key) {
                section.reader.report(
                    section.path(key),
                    "is not a site's in a chain: the chain's wallet is kept by its recorder, whose recorder.yaml `credits:` takes top-ups")
            }
            return CreditsSettings(price: price, topupSecret: "")
        }
        let secret = section.nonEmpty("topup_secret", required: true)
        if let secret, secret.utf8.count < minSecretLength {
            section.reader.report(
                section.path("topup_secret"),
                "must be at least \(minSecretLength) characters: it is all that stands between a stranger and free credits")
        }
        let maxTopup = Int64(section.int("max_topup", default: 10_000, in: 1...maxAmount))
        let welcome = Int64(section.int("welcome", default: 0, in: 0...maxAmount))
        guard let secret else { return nil }
        return CreditsSettings(price: price, topupSecret: secret, maxTopup: maxTopup, welcome: welcome)
    }
}
