// Bounds on what one session's sightings hold: at most `maxSourcesPerSession` sources per observer (the
// stalest one goes to make room), and none kept longer than `sightingMemory` after it was last heard. The
// memory of a session is bounded whatever IDs it reports, and an edge that goes is reconciled like one
// that timed out (its subscriptions lose what it alone supported).

extension MatcherCore {
    /// Most sources one session keeps sightings of at once (other sessions, beacons, audio bytes). A room
    /// holds a few dozen speakers; more distinct IDs in a lost timeout are a replay, a scan or a bug.
    public static let maxSourcesPerSession = 256
    /// How long a sighting is kept after it was last heard (s): twice the longest lost timeout a
    /// subscription may ask for, so it can no longer support anything when it goes.
    public static let sightingMemory = 2 * ExchangeLimits.lostTimeoutRange.upperBound
    /// Sightings past their memory are dropped on the first tick of each slot of this length (s).
    static let sightingSweepInterval = 5.0

    /// Makes room for a new source in `observer`'s sightings: drops the stalest one (the oldest, ties broken
    /// by description so every replica drops the same) when the session holds its maximum.
    mutating func makeRoomForSighting(by observer: SessionID, work: inout PendingWork) {
        guard let heard = sightings[observer], heard.count >= Self.maxSourcesPerSession else { return }
        var stalest: (source: Source, last: Double, name: String)?
        for (source, sighting) in heard {
            if let current = stalest, sighting.last > current.last { continue }
            let name = "\(source)"
            if let current = stalest, sighting.last == current.last, name >= current.name { continue }
            stalest = (source, sighting.last, name)
        }
        if let stalest { forgetSighting(by: observer, of: stalest.source, work: &work) }
    }

    /// Drops one direction of an edge and marks the subscriptions at both ends for reconciling.
    mutating func forgetSighting(by observer: SessionID, of source: Source, work: inout PendingWork) {
        guard sightings[observer]?.removeValue(forKey: source) != nil else { return }
        if sightings[observer]?.isEmpty == true { sightings[observer] = nil }
        hearers[source]?.remove(observer)
        if hearers[source]?.isEmpty == true { hearers[source] = nil }
        markSubscriptions(of: observer, viewing: source, in: &work)
        if case .session(let other) = source { markSubscriptions(of: other, viewing: .session(observer), in: &work) }
    }

    /// Drops the sightings last heard more than `sightingMemory` ago, once per sweep slot (the slot is a
    /// function of `now`, so replicas applying the same entries sweep at the same input).
    mutating func sweepSightings(now: Double, work: inout PendingWork) {
        let slot = (now / Self.sightingSweepInterval).rounded(.down)
        guard slot != lastSightingSweep else { return }
        lastSightingSweep = slot
        var stale: [(SessionID, Source)] = []
        for (observer, heard) in sightings {
            for (source, sighting) in heard where now - sighting.last > Self.sightingMemory { stale.append((observer, source)) }
        }
        for (observer, source) in stale { forgetSighting(by: observer, of: source, work: &work) }
    }

    /// Sources session `id` holds sightings of now.
    /// - Parameter id: the observing session.
    public func sightingCount(of id: SessionID) -> Int { sightings[id]?.count ?? 0 }

    /// Sightings held over all sessions.
    public var totalSightingCount: Int { sightings.values.reduce(0) { $0 + $1.count } }
}
