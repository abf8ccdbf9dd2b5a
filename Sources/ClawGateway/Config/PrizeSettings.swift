import Protocol

/// `prizes:` of `gateway.yaml` (and of the recorder's `recorder.yaml`): a
/// won game is a prize owed to its player, kept until it reaches them or
/// they take credits instead (SPEC §15). Without it, wins make no prize.
struct PrizeSettings: Sendable, Equatable {
    /// A win that takes a machine's stock down to this raises `low_stock`.
    var lowAt: Int64 = 3
    /// How long after its delivery a parcel's address is kept.
    var forgetAddress: Duration = .seconds(90 * 86400)

    static let keys = ["low_at", "forget_address"]

    /// The most a machine's stock may be set to, or changed by at once:
    /// far beyond any claw machine's cabinet, far from any overflow.
    static let maxStock: Int64 = 1_000_000

    static func read(_ section: ConfigReader.Section) -> PrizeSettings {
        PrizeSettings(
            lowAt: Int64(section.int("low_at", default: 3, in: 0...Int(maxStock))),
            forgetAddress: section.duration("forget_address", default: .seconds(90 * 86400), atLeast: .seconds(3600)))
    }

    /// The recorder's `prizes:`: only how long an address is kept (the
    /// stock is the sites').
    static func readRecorder(_ section: ConfigReader.Section) -> PrizeSettings {
        PrizeSettings(forgetAddress: section.duration("forget_address", default: .seconds(90 * 86400), atLeast: .seconds(3600)))
    }
}

/// A machine's `prize:` (SPEC §15): what a win on it makes, and when its
/// stock counts as low (`prizes.low_at`, the same for every machine).
struct MachinePrize: Sendable, Equatable {
    /// The prize's kind, e.g. `pikachu-30cm`: letters, digits, `-`, `_`, `.`.
    var id: String
    var name: String
    /// What one costs the operator, in credits: for the figures.
    var cost: Int64 = 0
    /// The credits a player may take instead of the prize; 0: not offered.
    var exchange: Int64 = 0
    /// `prizes.low_at`.
    var lowAt: Int64 = 3

    static let keys = ["id", "name", "cost", "exchange"]
    static let maxIDBytes = 64
    static let maxNameBytes = 128

    /// Reads a machine's `prize:`, every problem under its path. `credits`:
    /// whether the file has a `credits:` section (an exchange pays credits);
    /// `settings`: the file's `prizes:`, which a prize needs.
    static func read(_ section: ConfigReader.Section, credits: Bool, settings: PrizeSettings?) -> MachinePrize? {
        let id = section.nonEmpty("id", required: true)
        if let id, id.utf8.count > maxIDBytes || !id.unicodeScalars.allSatisfy(isIDCharacter) {
            section.reader.report(
                section.path("id"), "\"\(id)\" is not a prize id: 1 to \(maxIDBytes) letters, digits, -, _ or ., e.g. pikachu-30cm")
        }
        let name = section.nonEmpty("name", required: true)
        if let name, name.utf8.count > maxNameBytes || PlayerText.hasHiddenCharacters(name) {
            section.reader.report(section.path("name"), "must be 1 to \(maxNameBytes) bytes without control characters")
        }
        let cost = Int64(section.int("cost", default: 0, in: 0...CreditsSettings.maxAmount))
        let exchange = Int64(section.int("exchange", default: 0, in: 0...CreditsSettings.maxAmount))
        if exchange > 0, !credits {
            section.reader.report(section.path("exchange"), "needs a credits: section: an exchange pays the prize's worth in credits")
        }
        if settings == nil {
            section.reader.report(section.path, "needs a prizes: section: without it wins make no prize")
        }
        guard let id, let name else { return nil }
        return MachinePrize(id: id, name: name, cost: cost, exchange: exchange, lowAt: settings?.lowAt ?? 3)
    }

    private static func isIDCharacter(_ scalar: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar) || "-_.".unicodeScalars.contains(scalar)
    }
}
