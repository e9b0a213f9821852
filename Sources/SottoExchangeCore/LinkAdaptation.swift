/// The modem profile a session's radio plays its token frames in, as the matcher directs it (link
/// adaptation): the modem's default profile (`Profile.standard`, named "default") or its robust one
/// (`Profile.robust`, about 5 dB more roll-off loss decoded, twice the airtime). Listeners decode every
/// profile, so a change needs nothing of them.
public enum BroadcastProfile: String, Sendable, Hashable, Codable, CaseIterable, CustomStringConvertible {
    /// The modem's default profile (`Profile.standard`).
    case standard = "default"
    /// The modem's robust profile (`Profile.robust`).
    case robust

    /// The modem profile's name: "default" or "robust".
    public var description: String { rawValue }
}

/// Link adaptation (issue 37, weak speakers): which profile each broadcasting session should send its token
/// frames in, decided from what the matcher knows of every link: the in-band SNR (dB, as ``MatcherInput/observe(_:_:snr:level:)``
/// carries it) at which others hear the session, and whom the session hears.
///
/// Rules, with ``Rules``' defaults (times are the matcher's, in seconds; SNRs are in-band, in dB):
/// - **To robust, heard weakly**: a session in the default profile moves to the robust profile when the median SNR
///   of the hearings of it over the last ``Rules/window`` (10 s), at least ``Rules/minimumHearings`` (2) of them,
///   is below ``Rules/robustBelow`` (1 dB): its frames reach their listeners near the default profile's limit.
/// - **To robust, not heard back**: a session in the default profile moves to the robust profile when, for
///   ``Rules/unheardFor`` (10 s), it hears other sessions (one within the window) but none of the sessions it heard
///   within the window heard it within the window, unless its median over the window is above
///   ``Rules/standardAbove`` (others hear it well: the fault is not its speaker's). 10 s covers several frames of
///   a busy room's sender's rules and the two seconds between a client's reports of one payload.
/// - **Back to default**: a session in the robust profile goes back only after the median over the window (at
///   least ``Rules/minimumHearings`` hearings) has stayed above ``Rules/standardAbove`` (7 dB) for
///   ``Rules/recovery`` (15 s): one strong hearing does not do it, and the 6 dB between the two thresholds keeps a
///   link near either from flapping.
/// - A session nobody hears and that hears nobody is not moved: it may be alone.
///
/// The hearings of a session start afresh when its profile changes (the median then speaks of the new profile's
/// frames). Conditions are checked at every hearing of or by a session and, for the timed ones, when they fall
/// due (``tick(now:)``); a condition that becomes true only as the window slides is seen at the next hearing.
///
/// A value type with no clock, like ``BroadcastCoordinator``: the host feeds it hearings and ticks with its time
/// (`now`, s, never going backwards); its decisions are the same on every replica fed the same inputs.
public struct LinkAdaptation: Sendable {
    /// The thresholds and times of the rules.
    public struct Rules: Sendable, Hashable, Codable {
        /// The hearings a median is taken over, and how long a hearing counts for "hears" and "heard by" (s).
        public var window: Double
        /// Fewest hearings in the window for a median (fewer: no judgement of the SNR).
        public var minimumHearings: Int
        /// A median below this moves a session to the robust profile (dB, in-band).
        public var robustBelow: Double
        /// A median above this for ``recovery`` moves a session back to the default profile (dB, in-band).
        public var standardAbove: Double
        /// How long the median must stay above ``standardAbove`` (s).
        public var recovery: Double
        /// How long a session must hear others without being heard by them before it moves (s).
        public var unheardFor: Double
        /// Most hearings kept per session (the latest; the median is over these).
        public static let maximumHearings = 64

        /// - Parameters:
        ///   - window: the hearings a median is taken over, and how long a hearing counts (s).
        ///   - minimumHearings: fewest hearings in the window for a median.
        ///   - robustBelow: a median below this moves a session to robust (dB).
        ///   - standardAbove: a median above this for `recovery` moves it back (dB).
        ///   - recovery: how long the median must stay above `standardAbove` (s).
        ///   - unheardFor: how long a session hears others unheard before it moves (s).
        public init(window: Double = 10, minimumHearings: Int = 2, robustBelow: Double = 1, standardAbove: Double = 7,
                    recovery: Double = 15, unheardFor: Double = 10) {
            self.window = window
            self.minimumHearings = minimumHearings
            self.robustBelow = robustBelow
            self.standardAbove = standardAbove
            self.recovery = recovery
            self.unheardFor = unheardFor
        }
    }

    /// A session's profile changed.
    public struct Change: Sendable, Hashable {
        public var session: SessionID
        public var profile: BroadcastProfile
    }

    /// One hearing of a session by another: when (s) and its in-band SNR (dB).
    struct Hearing: Sendable, Hashable {
        var time: Double
        var snr: Double
    }

    /// What the rules know of one session's links.
    struct Link: Sendable, Hashable {
        var profile = BroadcastProfile.standard
        /// Hearings of this session by others since its profile last changed, oldest first (within the window
        /// at the last check; at most ``Rules/maximumHearings``).
        var hearings: [Hearing] = []
        /// When this session last heard each other session (s).
        var hears: [SessionID: Double] = [:]
        /// When each other session last heard this one (s).
        var heardBy: [SessionID: Double] = [:]
        /// In the robust profile: since when (s) its median has been above ``Rules/standardAbove``.
        var strongSince: Double?
        /// In the default profile: since when (s) it hears others and none of them hears it.
        var unheardSince: Double?
    }

    public let rules: Rules
    /// The sessions heard or hearing (broadcasting ones), by id.
    var links: [SessionID: Link] = [:]
    /// When each session's timed condition falls due (s), derived from `links` (not in snapshots).
    var due: [SessionID: Double] = [:]
    /// The earliest of `due` or earlier (a removed entry may leave it early: the next tick due finds it out).
    var nextDue: Double?

    /// - Parameter rules: the thresholds and times.
    public init(rules: Rules = Rules()) { self.rules = rules }

    /// The profile session `session` should send its token frames in (the default profile until moved).
    public func profile(of session: SessionID) -> BroadcastProfile { links[session]?.profile ?? .standard }

    /// Whether the rules hold anything of `session` (it was heard, or heard someone while broadcasting).
    public func knows(_ session: SessionID) -> Bool { links[session] != nil }

    /// Sessions in the robust profile now.
    public var robustCount: Int { links.values.filter { $0.profile == .robust }.count }

    /// `observer` heard `speaker`'s frame with in-band SNR `snr` (dB) at `now` (s).
    /// - Parameters:
    ///   - speaker: the session whose token (or room alias) was heard.
    ///   - observer: the session that heard it.
    ///   - observerBroadcasts: whether `observer` broadcasts a token (only then can it go unheard).
    ///   - snr: the frame's in-band SNR (dB).
    ///   - now: the matcher's time (s).
    /// - Returns: the sessions whose profile changed (the speaker's first).
    public mutating func heard(_ speaker: SessionID, by observer: SessionID, observerBroadcasts: Bool, snr: Double,
                               now: Double) -> [Change] {
        guard speaker != observer, snr.isFinite, now.isFinite else { return [] }
        var link = links[speaker] ?? Link()
        link.hearings.append(Hearing(time: now, snr: snr))
        if link.hearings.count > Rules.maximumHearings { link.hearings.removeFirst(link.hearings.count - Rules.maximumHearings) }
        link.heardBy[observer] = now
        links[speaker] = link
        if observerBroadcasts { links[observer, default: Link()].hears[speaker] = now }
        var changes: [Change] = []
        if let change = evaluate(speaker, now: now) { changes.append(change) }
        if observerBroadcasts, let change = evaluate(observer, now: now) { changes.append(change) }
        return changes
    }

    /// Time passes to `now` (s): the timed conditions due are checked.
    /// - Returns: the sessions whose profile changed, in the order of their ids.
    public mutating func tick(now: Double) -> [Change] {
        guard let nextDue, nextDue <= now else { return [] }
        let ready = due.filter { $0.value <= now }.keys.sorted { $0.value < $1.value }
        let changes = ready.compactMap { evaluate($0, now: now) }
        self.nextDue = due.values.min()
        return changes
    }

    /// Forgets a session (closed, or reopened as a new one).
    public mutating func remove(_ session: SessionID) {
        guard let link = links.removeValue(forKey: session) else { return }
        due[session] = nil
        for speaker in link.hears.keys { links[speaker]?.heardBy[session] = nil }
        for observer in link.heardBy.keys { links[observer]?.hears[session] = nil }
    }

    /// The median of `values` (not empty): the middle one, or the mean of the middle two.
    static func median(_ values: [Double]) -> Double {
        let sorted = values.sorted()
        let middle = sorted.count / 2
        return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
    }

    /// The median SNR of a link's hearings within the window (dB), nil with fewer than the minimum.
    func median(of link: Link) -> Double? {
        link.hearings.count >= max(1, rules.minimumHearings) ? Self.median(link.hearings.map(\.snr)) : nil
    }

    /// Applies the rules to `session` at `now`; the change, if its profile changed.
    mutating func evaluate(_ session: SessionID, now: Double) -> Change? {
        guard var link = links[session] else {
            due[session] = nil
            return nil
        }
        let since = now - rules.window
        link.hearings.removeAll { $0.time <= since }
        link.hears = link.hears.filter { $0.value > since }
        link.heardBy = link.heardBy.filter { $0.value > since }
        let median = self.median(of: link)
        var moved: BroadcastProfile?
        switch link.profile {
        case .standard:
            link.strongSince = nil
            let strong = median.map { $0 > rules.standardAbove } ?? false
            let unheard = !link.hears.isEmpty && link.hears.keys.allSatisfy { link.heardBy[$0] == nil } && !strong
            link.unheardSince = unheard ? (link.unheardSince ?? now) : nil
            if let median, median < rules.robustBelow {
                moved = .robust
            } else if let unheardSince = link.unheardSince, now - unheardSince >= rules.unheardFor {
                moved = .robust
            }
        case .robust:
            link.unheardSince = nil
            link.strongSince = median.map { $0 > rules.standardAbove } == true ? (link.strongSince ?? now) : nil
            if let strongSince = link.strongSince, now - strongSince >= rules.recovery { moved = .standard }
        }
        if let moved {
            link.profile = moved
            link.hearings = []
            link.strongSince = nil
            link.unheardSince = nil
        }
        if link.profile == .standard, link.hearings.isEmpty, link.hears.isEmpty, link.heardBy.isEmpty {
            links[session] = nil  // nothing left to judge by: as a session never heard
        } else {
            links[session] = link
        }
        let time = dueTime(of: link)
        due[session] = time
        if let time { nextDue = min(nextDue ?? time, time) }
        return moved.map { Change(session: session, profile: $0) }
    }

    /// When a link's timed condition falls due (s), if it has one.
    func dueTime(of link: Link) -> Double? {
        if let strongSince = link.strongSince { return strongSince + rules.recovery }
        if let unheardSince = link.unheardSince { return unheardSince + rules.unheardFor }
        return nil
    }

    /// Rebuilds what is derived from `links` (after a snapshot is read).
    mutating func rebuildDue() {
        due = [:]
        for (session, link) in links { due[session] = dueTime(of: link) }
        nextDue = due.values.min()
    }
}
