import HeapModule

/// Identifies a client session (one process using one sound card).
public struct SessionID: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The ID as chosen by whoever opens the session.
    public let value: String
    /// A session ID from its text.
    public init(_ value: String) { self.value = value }
    /// The ID's text.
    public var description: String { value }
}

/// Identifies a publication or subscription within a session.
public struct OperationID: Sendable, Hashable, Codable {
    /// The ID, unique within its session.
    public let value: Int
    /// An operation ID from its number.
    public init(_ value: Int) { self.value = value }
}

/// What the matcher core is told: commands, observations and clock ticks.
public enum MatcherInput: Sendable {
    /// A session of app `appID` starts; a broadcasting one is issued a token. Reopening an open ID replaces
    /// the session (its operations end without events; others lose its messages).
    case openSession(SessionID, appID: String, broadcasts: Bool)
    /// The session ends: its subscriptions lose everything at once, others lose its messages at once.
    case closeSession(SessionID)
    /// Publishes a message until unpublished or its TTL ends. Re-sent with identical parameters: no-op;
    /// with others: replaces the publication (the old message is lost where nothing else supports it).
    case publish(SessionID, OperationID, Message, Strategy)
    /// Ends a publication: subscriptions left without a supporter of its message lose it at once.
    case unpublish(SessionID, OperationID)
    /// Subscribes until unsubscribed or its TTL ends; an edge not heard for `lostTimeout` (s) stops
    /// supporting. Re-sent with identical parameters: no-op; with others: replaces the subscription (what
    /// it found and the new parameters reject is lost at once, the rest stays found).
    case subscribe(SessionID, OperationID, MessageFilter, Strategy, lostTimeout: Double)
    /// Ends a subscription, without events.
    case unsubscribe(SessionID, OperationID)
    /// A beacon and its attachments; `publicVisibility` lets every app receive them. A rotating beacon
    /// (EID-like) is registered under its stable `id` and broadcasts `rotation.id(at:length:)` of the
    /// current Unix time slot instead; its stable ID heard as such resolves to nothing.
    case registerBeacon(id: [UInt8], appID: String, attachments: [Message], publicVisibility: Bool, rotation: BeaconRotation?)
    /// `observer` decoded a frame carrying `payload`, with this SNR (dB) and received level (dBFS).
    case observe(SessionID, Payload, snr: Double, level: Double)
    /// The session's radio follows the matcher's turns (``MatcherCore/turns``), with token frames of
    /// `frameAirtime` (s); 0: no longer. With an `aliasAirtime` (s), the radio can also play a room alias
    /// (``Payload/roomAlias(_:)``) of that airtime in its slots. Ignored for a session that does not broadcast, or
    /// when the matcher plans no turns.
    case takeTurns(SessionID, frameAirtime: Double, aliasAirtime: Double?)
    /// Time passes: expiries and lost timeouts.
    case tick
}

/// What the matcher core answers.
public enum MatcherEvent: Sendable, Hashable {
    /// The session must broadcast this token (new or rotated).
    case broadcastToken(SessionID, [UInt8])
    /// The subscription sees the message (first supporter in earshot).
    case found(SessionID, OperationID, Message)
    /// The subscription no longer sees the message (its last supporter left); only after `found`.
    case lost(SessionID, OperationID, Message)
    /// Received SNR (dB) of a found message changed by 6 dB or more; with its received level (dBFS).
    case signalChanged(SessionID, OperationID, Message, snr: Double, level: Double)
    /// The operation's TTL ended (a subscription's losts come first).
    case expired(SessionID, OperationID)
    /// The observer heard a token that resolves to nothing: it should stop reporting it for a while.
    case invalidToken(SessionID, [UInt8])
    /// The session's turns (``BroadcastCoordinator``): start a token frame (or, with `alias`, that room alias's
    /// frame) at each of `slotOffsets` (s after the input that made this event), nothing else for `followFor`
    /// (s), then the session's own rules again.
    case broadcastTurns(SessionID, slotOffsets: [Double], followFor: Double, alias: UInt16?)
    /// Link adaptation (``MatcherCore/linkAdaptation``): the session should play its token frames in this profile
    /// from now on (it changed).
    case broadcastProfile(SessionID, BroadcastProfile)
}

/// The matcher: a pure state machine (inputs and the current time in, events out; no clock, no I/O),
/// so that one process can embed it behind an actor and a network service can host the same core.
///
/// A subscription of session A sees a message M when M is published by a session B ≠ A of the same app
/// (or is a public beacon attachment), the filter accepts M, both operations are alive, and A and B are
/// in earshot: either heard the other within the subscription's lost timeout. Audio-bytes messages and
/// beacon IDs are sources heard directly. Found and lost strictly alternate per (subscription, message).
///
/// The state is indexed so that an input costs what it affects: an observation touches one edge
/// (observer, source) and the subscriptions at its two ends; publish and unpublish touch the subscriptions
/// of sessions in earshot of the publisher; deadlines (lost timeouts, TTLs, token rotation) wait in
/// priority queues and are checked against the current state when due. Each subscription keeps, per
/// message identity, the sources that support it (Nearby's FoundSet): found when the first supporter
/// appears, lost when the last one leaves. Times (`now`) must not go backwards.
public struct MatcherCore: Sendable {
    /// Token length (bytes).
    public let tokenLength: Int
    /// Token rotation interval (s).
    public let rotationInterval: Double
    /// Grace period after a rotation during which the old token still resolves (s).
    public let rotationGrace: Double
    /// How long retired tokens are never reissued (s).
    public static let retiredMemory = 86_400.0
    /// The in-band SNR (dB) at or above which a sighting counts for earshot (``Strategy/DistanceType/earshot``)
    /// by default, measured against distance (`sotto bench sweep earshot`, `Benchmarks/earshot/`, README
    /// "Earshot and distance"): for the nominal speaker in a quiet room, every frame at 1 m is above it and
    /// every frame at 8 m below it, in a free field and in synthetic rooms of 60 and 250 m^3 (RT60 0.3-0.5 s);
    /// the boundary is about 1.2 m in a free field and 2-3 m in those rooms. A louder speaker or a quieter room
    /// moves it out (dB for dB of SNR).
    public static let defaultEarshotSNR = 30.0
    /// The in-band SNR (dB) at or above which a sighting counts for earshot: an earshot subscription is
    /// supported only by edges this loud, and an earshot publication is offered only over them. The edge's
    /// SNR is the louder direction's, smoothed over its sightings.
    public var earshotSNR = MatcherCore.defaultEarshotSNR
    /// The turns the matcher gives sessions that hear each other and ``MatcherInput/takeTurns(_:frameAirtime:aliasAirtime:)``;
    /// nil (the default): none, every device keeps its own sender's rules. Planned on ticks; part of snapshots,
    /// so that every replica of a cluster plans alike.
    public var turns: BroadcastCoordinator?
    /// Link adaptation (``LinkAdaptation``): which profile each broadcasting session plays its token frames in,
    /// from the SNRs at which it is heard and whom it hears; nil (the default): off, every session keeps the
    /// profile its radio chose and no ``MatcherEvent/broadcastProfile(_:_:)`` is emitted. Part of snapshots.
    public var linkAdaptation: LinkAdaptation?

    var generator: any RandomNumberGenerator & Sendable
    /// The Unix time (s) of the last input that gave one.
    var unixTime: Double?

    var sessions: [SessionID: Session] = [:]
    var beacons: [[UInt8]: RegisteredBeacon] = [:]
    var rotations: [[UInt8]: BeaconRotation] = [:]
    /// The rotating IDs the matcher accepts now, derived from `rotations` (not in snapshots).
    var rotatingIDs = RotatingIDIndex()
    var tokenOwners: [[UInt8]: TokenOwner] = [:]
    /// Token -> when it was retired (s).
    var retired: [[UInt8]: Double] = [:]
    /// Observer -> source -> latest sighting: one direction of each edge.
    var sightings: [SessionID: [Source: Sighting]] = [:]
    /// Source -> the sessions that have a sighting of it: the same edges, the other way round.
    var hearers: [Source: Set<SessionID>] = [:]
    /// Lost timeouts and TTL expiries, checked on every input.
    var matchingDeadlines = Heap<Deadline>()
    /// Token rotation, grace ends and retired-token memory, checked on ticks.
    var tokenDeadlines = Heap<Deadline>()
    /// Tie-break for deadlines due at the same time: first scheduled, first handled.
    var deadlineSequence: UInt64 = 0
    /// The sweep slot in which stale sightings were last dropped (not in snapshots: a restored core sweeps
    /// at its first tick, which drops only sightings that can support nothing).
    var lastSightingSweep: Double?
    /// App -> bytes its live publications hold (derived from `sessions`; not in snapshots).
    var publicationBytesPerApp: [String: Int] = [:]

    public init(tokenLength: Int = 8, rotationInterval: Double = 900, rotationGrace: Double = 10,
                generator: any RandomNumberGenerator & Sendable = SystemRandomNumberGenerator()) {
        self.tokenLength = tokenLength
        self.rotationInterval = rotationInterval
        self.rotationGrace = rotationGrace
        self.generator = generator
    }

    // MARK: Public API

    /// Applies one input at time `now` (s, monotonic) when the wall clock reads `unixTime` (s since 1970):
    /// rotating beacons' IDs are resolved on the Unix time slots within ``BeaconRotation/clockSkewWindow``
    /// of `unixTime`. The core reads no clock: its host passes both.
    public mutating func handle(_ input: MatcherInput, now: Double, unixTime: Double) -> [MatcherEvent] {
        self.unixTime = unixTime
        return handle(input, now: now)
    }

    /// Applies one input at time `now` (s, monotonic), with the Unix time of the last input that gave one
    /// (``handle(_:now:unixTime:)``); a core never given one resolves rotating beacons at Unix time `now`
    /// (simulations and tests whose clock is Unix time).
    public mutating func handle(_ input: MatcherInput, now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        var work = PendingWork()
        switch input {
        case .openSession(let id, let appID, let broadcasts):
            // Reopening an existing ID replaces the session: its operations go (others lose its messages),
            // its edges stay.
            if sessions[id] != nil { markPeers(of: id, in: &work) }
            turns?.remove(id)
            linkAdaptation?.remove(id)
            uncountPublications(of: id)
            sessions[id] = Session(appID: appID, broadcasts: broadcasts)
            if broadcasts { events += issueToken(for: id, now: now) }
        case .closeSession(let id):
            events += closeSession(id, now: now, work: &work)
        case .publish(let id, let op, let message, let strategy):
            guard let session = sessions[id] else { break }
            let previous = session.publications[op]
            if let previous, previous.message == message, previous.strategy == strategy { break }  // re-sent: no-op
            let expires = strategy.seconds.map { now + $0 }
            countPublicationBytes(Self.heldBytes(of: message) - (previous.map { Self.heldBytes(of: $0.message) } ?? 0), app: session.appID)
            sessions[id]?.publications[op] = Publication(message: message, strategy: strategy, expires: expires)
            if let expires { scheduleMatching(.publicationExpiry(id, op, expires: expires), due: expires) }
            if previous?.message != message || previous?.strategy.distanceType != strategy.distanceType { markPeers(of: id, in: &work) }
        case .unpublish(let id, let op):
            if let removed = sessions[id]?.publications.removeValue(forKey: op) {
                countPublicationBytes(-Self.heldBytes(of: removed.message), app: sessions[id]?.appID ?? "")
                markPeers(of: id, in: &work)
            }
        case .subscribe(let id, let op, let filter, let strategy, let lostTimeout):
            subscribe(id, op, filter: filter, strategy: strategy, lostTimeout: lostTimeout, now: now, work: &work)
        case .unsubscribe(let id, let op):
            sessions[id]?.subscriptions[op] = nil
        case .registerBeacon(let beaconID, let appID, let attachments, let isPublic, let rotation):
            beacons[beaconID] = RegisteredBeacon(appID: appID, attachments: attachments, isPublic: isPublic)
            rotations[beaconID] = rotation
            rotatingIDs.forget(beaconID)
            for observer in hearers[.beacon(beaconID)] ?? [] { markSubscriptions(of: observer, viewing: .beacon(beaconID), in: &work) }
        case .observe(let observer, let payload, let snr, let level):
            guard sessions[observer] != nil else { break }
            let source: Source
            switch payload {
            case .audioBytes(let bytes): source = .audio(bytes)
            case .beacon(let heard):
                // A rotating beacon's stable ID is never on the air: hearing it is a replay, a guess or a leak.
                guard let stable = resolveBeacon(heard, unixTime: unixTime ?? now) else { return [] }
                source = .beacon(stable)
            case .roomAlias(let alias):
                // Resolved only in the observer's room; anywhere else it names nobody (not an invalid token: it is
                // valid in its own room, and the observer may join it).
                guard let speaker = turns?.session(withAlias: alias, heardBy: observer),
                      let speakerSession = sessions[speaker], speakerSession.appID == sessions[observer]?.appID else { return [] }
                source = .session(speaker)
            case .token(let token):
                guard let owner = tokenOwners[token], owner.validUntil.map({ now <= $0 }) ?? true,
                      let ownerSession = sessions[owner.session],
                      ownerSession.appID == sessions[observer]?.appID else {
                    // Unknown, retired, or another app's: projects never learn of each other's tokens.
                    return [.invalidToken(observer, token)]
                }
                if owner.session == observer { return [] }  // own token: the self-check's business
                source = .session(owner.session)
            }
            recordSighting(by: observer, of: source, snr: snr, level: level, now: now, work: &work)
            if case .session(let speaker) = source,
               let changes = linkAdaptation?.heard(speaker, by: observer, observerBroadcasts: sessions[observer]?.broadcasts == true,
                                                   snr: snr, now: now) {
                events += changes.map { .broadcastProfile($0.session, $0.profile) }
            }
        case .takeTurns(let id, let airtime, let aliasAirtime):
            guard sessions[id]?.broadcasts == true, airtime > 0, airtime.isFinite else {
                turns?.leave(id)
                break
            }
            turns?.join(id, frameAirtime: airtime, aliasAirtime: aliasAirtime.flatMap { $0 > 0 && $0.isFinite && $0 <= airtime ? $0 : nil })
        case .tick:
            events += rotateTokens(now: now)
            sweepSightings(now: now, work: &work)
            if let changes = linkAdaptation?.tick(now: now) {
                events += changes.filter { sessions[$0.session] != nil }.map { .broadcastProfile($0.session, $0.profile) }
            }
            // Mutated in place (a copy would copy its tables on every plan).
            if let schedules = turns?.tick(now: now, using: &generator) {
                for schedule in schedules where sessions[schedule.session] != nil {
                    events.append(.broadcastTurns(schedule.session, slotOffsets: schedule.slots.map { $0 - now },
                                                  followFor: schedule.until - now, alias: schedule.alias))
                }
            }
        }
        events += handleDueDeadlines(now: now, work: &work)
        events += reconcile(work, now: now)
        return events
    }

    /// The token a session currently broadcasts.
    public func token(of id: SessionID) -> [UInt8]? { sessions[id]?.token }

    /// What subscription `operation` of `session` has currently found, sorted like events (by
    /// description); empty for an unknown subscription. A service sends this to a resumed client.
    public func visibleMessages(session: SessionID, operation: OperationID) -> [Message] {
        guard let subscription = sessions[session]?.subscriptions[operation] else { return [] }
        return subscription.reported.keys.sorted(by: Self.eventOrder)
    }

    /// The signal of a message a subscription has found: the SNR (dB) last reported for it and the received
    /// level (dBFS) of its best supporter now; nil if the subscription has not found it.
    public func signal(session: SessionID, operation: OperationID, message: Message) -> (snr: Double, level: Double)? {
        guard let subscription = sessions[session]?.subscriptions[operation], let snr = subscription.reported[message] else { return nil }
        let best = subscription.supporters[message]?.values.max { $0.snr < $1.snr }
        return (snr, best?.level ?? 0)
    }

    /// The profile link adaptation directs session `id` to play its token frames in (the default profile until
    /// it moved it); nil when adaptation is off or the session is not open. A service sends it to a resumed client.
    public func broadcastProfile(of id: SessionID) -> BroadcastProfile? {
        guard let linkAdaptation, sessions[id] != nil else { return nil }
        return linkAdaptation.profile(of: id)
    }

    /// Number of open sessions.
    public var sessionCount: Int { sessions.count }

    /// Whether session `id` is open.
    public func sessionExists(_ id: SessionID) -> Bool { sessions[id] != nil }

    // MARK: Commands

    private mutating func closeSession(_ id: SessionID, now: Double, work: inout PendingWork) -> [MatcherEvent] {
        guard let session = sessions[id] else { return [] }
        // Session end: everything its subscriptions had found is lost, at once.
        var events: [MatcherEvent] = []
        for (op, subscription) in session.subscriptions {
            for message in subscription.reported.keys.sorted(by: Self.eventOrder) { events.append(.lost(id, op, message)) }
        }
        if let token = session.token {
            tokenOwners[token] = nil
            retire(token, now: now)
        }
        markPeers(of: id, in: &work)
        uncountPublications(of: id)
        sessions[id] = nil
        turns?.remove(id)
        linkAdaptation?.remove(id)
        if let heard = sightings.removeValue(forKey: id) {
            for source in heard.keys {
                hearers[source]?.remove(id)
                if hearers[source]?.isEmpty == true { hearers[source] = nil }
            }
        }
        for observer in hearers.removeValue(forKey: .session(id)) ?? [] { sightings[observer]?[.session(id)] = nil }
        return events
    }

    private mutating func subscribe(_ id: SessionID, _ op: OperationID, filter: MessageFilter, strategy: Strategy,
                                    lostTimeout: Double, now: Double, work: inout PendingWork) {
        guard let session = sessions[id] else { return }
        let previous = session.subscriptions[op]
        if let previous, previous.filter == filter, previous.strategy == strategy, previous.lostTimeout == lostTimeout {
            return  // re-sent: no-op
        }
        let expires = strategy.seconds.map { now + $0 }
        var subscription = Subscription(filter: filter, strategy: strategy, lostTimeout: lostTimeout, expires: expires)
        // A replaced subscription keeps what it reported: the next reconcile loses what the new filter or
        // lost timeout no longer supports, and keeps the rest found.
        subscription.reported = previous?.reported ?? [:]
        sessions[id]?.subscriptions[op] = subscription
        if let expires { scheduleMatching(.subscriptionExpiry(id, op, expires: expires), due: expires) }
        let key = SubscriptionKey(session: id, operation: op)
        for message in subscription.reported.keys { work.mark(key, message: message) }
        // Every edge of the session, in either direction; the ones alive now get a lost-timeout deadline.
        for (source, sighting) in sightings[id] ?? [:] {
            work.mark(key, source: source)
            scheduleEdgeTimeout(observer: id, source: source, heardAt: sighting.last, lostTimeout: lostTimeout, now: now)
        }
        for observer in hearers[.session(id)] ?? [] {
            work.mark(key, source: .session(observer))
            if let sighting = sightings[observer]?[.session(id)] {
                scheduleEdgeTimeout(observer: observer, source: .session(id), heardAt: sighting.last, lostTimeout: lostTimeout, now: now)
            }
        }
    }

    /// Updates the edge `observer` heard `source` (smoothed SNR and level), and marks the subscriptions at
    /// both ends of the edge for reconciling.
    private mutating func recordSighting(by observer: SessionID, of source: Source, snr: Double, level: Double,
                                         now: Double, work: inout PendingWork) {
        let held = sightings[observer]?[source]
        if held == nil { makeRoomForSighting(by: observer, work: &work) }
        // A sighting past its memory counts as none whether or not a sweep dropped it yet (the sweeps' times
        // then decide nothing): the smoothing starts again.
        let previous = held.flatMap { now - $0.last > Self.sightingMemory ? nil : $0 }
        // Exponentially weighted: later sightings count more (like Nearby's BLE signal).
        let smoothed = previous.map { 0.7 * $0.snr + 0.3 * snr } ?? snr
        let smoothedLevel = previous.map { 0.7 * $0.level + 0.3 * level } ?? level
        sightings[observer, default: [:]][source] = Sighting(last: now, snr: smoothed, level: smoothedLevel)
        if held == nil { hearers[source, default: []].insert(observer) }
        if case .session(let speaker) = source { turns?.heard(speaker: speaker, by: observer, at: now) }

        var lostTimeouts: [Double] = []
        for (op, subscription) in sessions[observer]?.subscriptions ?? [:] {
            work.mark(SubscriptionKey(session: observer, operation: op), source: source)
            if !lostTimeouts.contains(subscription.lostTimeout) { lostTimeouts.append(subscription.lostTimeout) }
        }
        if case .session(let other) = source {
            for (op, subscription) in sessions[other]?.subscriptions ?? [:] {
                work.mark(SubscriptionKey(session: other, operation: op), source: .session(observer))
                if !lostTimeouts.contains(subscription.lostTimeout) { lostTimeouts.append(subscription.lostTimeout) }
            }
        }
        for lostTimeout in lostTimeouts {
            scheduleEdgeTimeout(observer: observer, source: source, heardAt: now, lostTimeout: lostTimeout, now: now)
        }
    }

    // MARK: Beacons

    /// The stable ID of the beacon that broadcast `heard` at Unix time `unixTime`: itself for a fixed (or
    /// unregistered) beacon, the rotating beacon whose ID of a slot within the clock-skew window it is, or
    /// nil for a rotating beacon's stable ID heard as such (it is never broadcast: a replay or a guess).
    private mutating func resolveBeacon(_ heard: [UInt8], unixTime: Double) -> [UInt8]? {
        if beacons[heard] != nil { return rotations[heard] == nil ? heard : nil }
        guard !rotations.isEmpty else { return heard }
        rotatingIDs.update(rotations, unixTime: unixTime)
        return rotatingIDs.owner(of: heard) ?? heard
    }
}
