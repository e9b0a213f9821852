// The matcher's state and its FoundSets: which sources support which message for each subscription, and
// the found, lost and signal-change events that follow when they change.

extension MatcherCore {
    struct Publication: Sendable {
        var message: Message
        var strategy: Strategy
        /// When the TTL ends (s), nil for never.
        var expires: Double?
    }

    struct Subscription: Sendable {
        var filter: MessageFilter
        var strategy: Strategy
        /// An edge not heard for longer than this (s) no longer supports anything here.
        var lostTimeout: Double
        /// When the TTL ends (s), nil for never.
        var expires: Double?
        /// FoundSet: per message identity, the sources that offer it with their edge's sighting.
        var supporters: [Message: [Source: Sighting]] = [:]
        /// Per source, the messages it currently supports here (what to withdraw when its edge changes).
        var supportedBy: [Source: [Message]] = [:]
        /// Found messages, with the SNR (dB) last reported for each (in `found` or `signalChanged`).
        var reported: [Message: Double] = [:]
    }

    struct Session: Sendable {
        var appID: String
        var broadcasts: Bool
        var token: [UInt8]?
        /// When the current token was issued (s).
        var tokenIssued: Double = 0
        var publications: [OperationID: Publication] = [:]
        var subscriptions: [OperationID: Subscription] = [:]
    }

    struct RegisteredBeacon: Sendable {
        var appID: String
        var attachments: [Message]
        var isPublic: Bool
    }

    struct TokenOwner: Sendable {
        var session: SessionID
        /// End of the grace period of a rotated-out token (s); nil for the current token.
        var validUntil: Double?
    }

    /// What can be heard: another session (by its token), a beacon (by its stable ID) or audio bytes.
    enum Source: Hashable, Sendable { case session(SessionID), beacon([UInt8]), audio([UInt8]) }

    /// One direction of an edge: when it was last heard (s), smoothed SNR (dB) and level (dBFS).
    struct Sighting: Equatable, Sendable { var last: Double; var snr: Double; var level: Double }

    struct SubscriptionKey: Hashable, Sendable { var session: SessionID; var operation: OperationID }

    /// What one input touched: per subscription, the sources whose support must be recomputed and the
    /// messages whose found state must be re-evaluated. Kept in first-touched order.
    struct PendingWork {
        struct Item { var sources: Set<Source> = []; var messages: Set<Message> = [] }
        var order: [SubscriptionKey] = []
        var items: [SubscriptionKey: Item] = [:]

        mutating func mark(_ key: SubscriptionKey, source: Source) {
            if items[key] == nil { order.append(key) }
            items[key, default: Item()].sources.insert(source)
        }

        mutating func mark(_ key: SubscriptionKey, message: Message) {
            if items[key] == nil { order.append(key) }
            items[key, default: Item()].messages.insert(message)
        }
    }

    /// The order of found and lost events within one subscription (and of `visibleMessages`).
    static func eventOrder(_ a: Message, _ b: Message) -> Bool { a.description < b.description }

    // MARK: Marking what an input touched

    /// Marks every subscription of `observer` for recomputing what `source` supports.
    mutating func markSubscriptions(of observer: SessionID, viewing source: Source, in work: inout PendingWork) {
        guard let subscriptions = sessions[observer]?.subscriptions else { return }
        for op in subscriptions.keys { work.mark(SubscriptionKey(session: observer, operation: op), source: source) }
    }

    /// Marks the subscriptions of every session in earshot of `id` (an edge either way) for recomputing
    /// what `id` supports: its publications changed.
    mutating func markPeers(of id: SessionID, in work: inout PendingWork) {
        var peers = hearers[.session(id)] ?? []
        if let heard = sightings[id] {
            for case .session(let other) in heard.keys { peers.insert(other) }
        }
        for peer in peers where peer != id { markSubscriptions(of: peer, viewing: .session(id), in: &work) }
    }

    // MARK: Reconciling

    /// Recomputes the marked supports and reports what changed: per subscription, lost messages first, then
    /// found and signal changes, each sorted by description.
    mutating func reconcile(_ work: PendingWork, now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        for key in work.order {
            guard let item = work.items[key], let session = sessions[key.session],
                  let subscription = session.subscriptions[key.operation] else { continue }
            // Read first (what each marked source offers now), then update the subscription in place.
            let offers = item.sources.map { source in
                supportOffer(from: source, to: key.session, appID: session.appID, filter: subscription.filter,
                             lostTimeout: subscription.lostTimeout, earshot: subscription.strategy.distanceType == .earshot, now: now)
            }
            let changed = sessions[key.session]?.subscriptions[key.operation]?.apply(offers, touching: item.messages) ?? []
            events += sessions[key.session]?.subscriptions[key.operation]?.report(changed, session: key.session, operation: key.operation) ?? []
        }
        return events
    }

    /// What `source` supports for a subscription of `subscriber`: the edge's sighting (the louder alive
    /// direction, the subscriber's own on a tie) and the messages the filter accepts; nil when out of earshot.
    /// Earshot (the subscription's distance type, or a publication's): only an edge whose smoothed SNR is at
    /// least ``earshotSNR`` supports it.
    func supportOffer(from source: Source, to subscriber: SessionID, appID: String, filter: MessageFilter,
                      lostTimeout: Double, earshot: Bool, now: Double) -> SupportOffer {
        var edge: Sighting?
        if let own = sightings[subscriber]?[source], now - own.last <= lostTimeout { edge = own }
        if case .session(let other) = source {
            if other == subscriber { return SupportOffer(source: source, edge: nil, messages: []) }
            if let theirs = sightings[other]?[.session(subscriber)], now - theirs.last <= lostTimeout,
               theirs.snr > edge?.snr ?? -.infinity {
                edge = theirs
            }
        }
        guard let edge, !earshot || edge.snr >= earshotSNR else { return SupportOffer(source: source, edge: nil, messages: []) }
        let offered = messages(of: source, forApp: appID, edgeSNR: edge.snr)
        // The seeds' beacon default: a beacon subscription without a namespaced type gets the project's own
        // beacons with all their attachments, not only their IDs; a namespaced type narrows it to the
        // attachments of that type (other beacons: their IDs, and what else the filter asks for).
        if case .beacon(let id) = source, filter.takesOwnBeaconsWhole, beacons[id]?.appID == appID {
            return SupportOffer(source: source, edge: edge, messages: offered)
        }
        return SupportOffer(source: source, edge: edge, messages: offered.filter(filter.accepts))
    }

    /// Messages a source offers to an observer of app `appID` over an edge of SNR `edgeSNR` (dB): a session's
    /// earshot publications only when that is at least ``earshotSNR``.
    func messages(of source: Source, forApp appID: String, edgeSNR: Double) -> [Message] {
        switch source {
        case .audio(let bytes):
            return (try? AudioBytes.message(bytes)).map { [$0] } ?? []
        case .beacon(let beaconID):
            let raw = Message(reservedType: ExchangeLimits.beaconIDType, content: beaconID)
            // An unregistered beacon: its ID, to anyone (it is on the air). A registered one: its ID and
            // attachments to its project, or to every project when public; another project never learns a
            // private beacon's ID (a rotating one's stable ID would make it trackable), its attachments, or
            // that it was heard.
            guard let beacon = beacons[beaconID] else { return [raw] }
            guard beacon.isPublic || beacon.appID == appID else { return [] }
            return [raw] + beacon.attachments
        case .session(let id):
            guard let session = sessions[id], session.appID == appID else { return [] }
            let inEarshot = edgeSNR >= earshotSNR
            return session.publications.values.compactMap { inEarshot || $0.strategy.distanceType != .earshot ? $0.message : nil }
        }
    }

    /// What one source currently supports for one subscription.
    struct SupportOffer {
        var source: Source
        /// The edge's sighting, nil when out of earshot.
        var edge: Sighting?
        /// Messages the subscription's filter accepts.
        var messages: [Message]
    }
}

extension MatcherCore.Subscription {
    /// Replaces what the offers' sources support; returns the messages whose supporters changed, plus
    /// `touching`.
    mutating func apply(_ offers: [MatcherCore.SupportOffer], touching: Set<Message>) -> Set<Message> {
        var changed = touching
        for offer in offers {
            if let withdrawn = supportedBy.removeValue(forKey: offer.source) {
                for message in withdrawn {
                    supporters[message]?[offer.source] = nil
                    if supporters[message]?.isEmpty == true { supporters[message] = nil }
                    changed.insert(message)
                }
            }
            guard let edge = offer.edge, !offer.messages.isEmpty else { continue }
            supportedBy[offer.source] = offer.messages
            for message in offer.messages {
                supporters[message, default: [:]][offer.source] = edge
                changed.insert(message)
            }
        }
        return changed
    }

    /// Found, lost and signal-change events for `changed` messages (lost first, then the rest, each
    /// sorted by description); updates what was reported.
    mutating func report(_ changed: Set<Message>, session: SessionID, operation: OperationID) -> [MatcherEvent] {
        guard !changed.isEmpty else { return [] }
        let ordered = changed.count == 1 ? Array(changed) : changed.sorted(by: MatcherCore.eventOrder)
        var bestSighting: [Message: MatcherCore.Sighting] = [:]
        for message in ordered {
            // The loudest supporter; one whose SNR is not above -∞ (or is NaN) never counts.
            var best: MatcherCore.Sighting?
            for sighting in (supporters[message] ?? [:]).values where sighting.snr > best?.snr ?? -.infinity { best = sighting }
            bestSighting[message] = best
        }
        var events: [MatcherEvent] = []
        for message in ordered where bestSighting[message] == nil && reported[message] != nil {
            events.append(.lost(session, operation, message))
            reported[message] = nil
        }
        for message in ordered {
            guard let best = bestSighting[message] else { continue }
            if let previous = reported[message] {
                if abs(best.snr - previous) >= 6 {
                    events.append(.signalChanged(session, operation, message, snr: best.snr, level: best.level))
                    reported[message] = best.snr
                }
            } else {
                events.append(.found(session, operation, message))
                reported[message] = best.snr
            }
        }
        return events
    }
}
