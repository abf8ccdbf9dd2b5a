import DequeModule

/// The sites' wallet asks waiting for the chain's ledger, one line per site,
/// served in turn (SPEC §9: one site's flood delays no other site's debit by
/// more than a second).
///
/// Each group the recorder settles in one transaction takes one ask from
/// every site that has one, then a second from each, and so on, up to the
/// group's size: a site with a thousand asks waiting gets no more of a group
/// than a site with one, once that one is in. A site's line holds at most
/// ``perSite`` asks; what comes beyond is dropped and counted (a debit's site
/// refuses its accept after its wallet timeout; a refund comes again from
/// the site's outbox), and costs the other sites nothing.
///
/// A plain value: the recorder keeps it behind its lock.
struct SiteAskQueues<Ask> {
    /// The most asks one site may have waiting.
    let perSite: Int
    private var lines: [String: Deque<Ask>] = [:]
    /// The sites with asks waiting, in the order they are served.
    private var turn: Deque<String> = []
    private(set) var count = 0

    init(perSite: Int) {
        self.perSite = perSite
    }

    /// Puts `ask` at the end of `site`'s line; false (nothing kept) when the line is full.
    mutating func append(_ ask: Ask, site: String) -> Bool {
        guard lines[site, default: []].count < perSite else { return false }
        if lines[site, default: []].isEmpty { turn.append(site) }
        lines[site, default: []].append(ask)
        count += 1
        return true
    }

    /// Up to `limit` asks, one from each site with asks in turn, again and
    /// again: with the site each came from, in the order they are to be
    /// settled (each site's in the order they came).
    mutating func take(_ limit: Int) -> [(site: String, ask: Ask)] {
        var taken: [(site: String, ask: Ask)] = []
        while taken.count < limit, let site = turn.popFirst() {
            guard let ask = lines[site]?.popFirst() else { continue }
            taken.append((site, ask))
            count -= 1
            if lines[site]?.isEmpty == false {
                turn.append(site)
            } else {
                lines[site] = nil
            }
        }
        return taken
    }

    /// How many asks `site` has waiting.
    func waiting(_ site: String) -> Int {
        lines[site]?.count ?? 0
    }
}
