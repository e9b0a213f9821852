import HeapModule

// Deadlines without scanning: lost timeouts and TTL expiries wait in one priority queue (checked on every
// input), token rotation and the ends of grace periods and retired-token memory in another (checked on
// ticks). Entries are never removed early: when one falls due it is checked against the current state and
// dropped if that state has moved on (lazy deletion).

extension MatcherCore {
    /// A queued deadline: due time (s) and what to check then.
    struct Deadline: Comparable, Sendable {
        enum Kind: Sendable {
            /// The edge direction `observer` heard `source` (at `heardAt`, s) times out for subscriptions
            /// whose lost timeout (s) is `lostTimeout`.
            case edgeTimeout(observer: SessionID, source: Source, heardAt: Double, lostTimeout: Double)
            case publicationExpiry(SessionID, OperationID, expires: Double)
            case subscriptionExpiry(SessionID, OperationID, expires: Double)
            case rotation(SessionID, issuedAt: Double)
            case graceEnd(token: [UInt8], validUntil: Double)
            case retiredMemoryEnd(token: [UInt8], retiredAt: Double)
        }
        var due: Double
        var sequence: UInt64
        var kind: Kind

        static func < (a: Deadline, b: Deadline) -> Bool { a.due < b.due || (a.due == b.due && a.sequence < b.sequence) }
        static func == (a: Deadline, b: Deadline) -> Bool { a.due == b.due && a.sequence == b.sequence }
    }

    /// A due time for a condition written `now - start > length` (or `>=`): a few ulps before `start + length`,
    /// so rounding can never make the entry late; the condition itself is checked when the entry falls due.
    /// Nil when never due (infinite or NaN).
    static func dueTime(after start: Double, plus length: Double) -> Double? {
        let due = start + length
        guard due.isFinite else { return nil }
        return due.nextDown.nextDown.nextDown
    }

    mutating func scheduleMatching(_ kind: Deadline.Kind, due: Double) {
        guard due.isFinite else { return }
        deadlineSequence &+= 1
        matchingDeadlines.insert(Deadline(due: due, sequence: deadlineSequence, kind: kind))
    }

    mutating func scheduleToken(_ kind: Deadline.Kind, due: Double) {
        guard due.isFinite else { return }
        deadlineSequence &+= 1
        tokenDeadlines.insert(Deadline(due: due, sequence: deadlineSequence, kind: kind))
    }

    /// Queues the moment the edge direction heard at `heardAt` stops counting for a lost timeout of
    /// `lostTimeout` (s), if it still counts at `now`.
    mutating func scheduleEdgeTimeout(observer: SessionID, source: Source, heardAt: Double, lostTimeout: Double, now: Double) {
        guard now - heardAt <= lostTimeout, let due = Self.dueTime(after: heardAt, plus: lostTimeout) else { return }
        scheduleMatching(.edgeTimeout(observer: observer, source: source, heardAt: heardAt, lostTimeout: lostTimeout), due: due)
    }

    /// Removes every entry due at `now` from `heap`, earliest first.
    static func popDue(_ heap: inout Heap<Deadline>, now: Double) -> [Deadline] {
        var due: [Deadline] = []
        while let next = heap.min, next.due <= now { due.append(heap.removeMin()) }
        return due
    }

    // MARK: Lost timeouts and TTL expiry

    /// Handles the lost timeouts and TTL expiries due at `now`: expiries emit their events, timed-out edges
    /// are marked for reconciling.
    mutating func handleDueDeadlines(now: Double, work: inout PendingWork) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        for deadline in Self.popDue(&matchingDeadlines, now: now) {
            switch deadline.kind {
            case .edgeTimeout(let observer, let source, let heardAt, let lostTimeout):
                guard let sighting = sightings[observer]?[source], sighting.last == heardAt else { continue }  // heard again since
                if now - heardAt <= lostTimeout {  // due early by rounding: check again later
                    matchingDeadlines.insert(deadline)
                    continue
                }
                markSubscriptions(of: observer, viewing: source, lostTimeout: lostTimeout, in: &work)
                if case .session(let other) = source {
                    markSubscriptions(of: other, viewing: .session(observer), lostTimeout: lostTimeout, in: &work)
                }
            case .publicationExpiry(let id, let op, let expires):
                guard let publication = sessions[id]?.publications[op], publication.expires == expires else { continue }
                countPublicationBytes(-Self.heldBytes(of: publication.message), app: sessions[id]?.appID ?? "")
                sessions[id]?.publications[op] = nil
                events.append(.expired(id, op))
                markPeers(of: id, in: &work)
            case .subscriptionExpiry(let id, let op, let expires):
                guard let subscription = sessions[id]?.subscriptions[op], subscription.expires == expires else { continue }
                for message in subscription.reported.keys.sorted(by: Self.eventOrder) { events.append(.lost(id, op, message)) }
                sessions[id]?.subscriptions[op] = nil
                events.append(.expired(id, op))
            case .rotation, .graceEnd, .retiredMemoryEnd:
                continue
            }
        }
        return events
    }

    /// Marks the subscriptions of `observer` with this lost timeout (s) for recomputing what `source` supports.
    mutating func markSubscriptions(of observer: SessionID, viewing source: Source, lostTimeout: Double,
                                    in work: inout PendingWork) {
        guard let subscriptions = sessions[observer]?.subscriptions else { return }
        for (op, subscription) in subscriptions where subscription.lostTimeout == lostTimeout {
            work.mark(SubscriptionKey(session: observer, operation: op), source: source)
        }
    }

    // MARK: Tokens

    /// Random draws before a short token space is searched in order (and a long one given up on).
    static let tokenDraws = 10_000

    /// A token neither in use nor retired within `retiredMemory`, or nil when none can be found: every token
    /// of a short space is taken (a length of 0 to 2 bytes, in tests or from a damaged snapshot), or, for a
    /// longer one, `tokenDraws` random draws all hit taken tokens.
    mutating func freshToken(now: Double) -> [UInt8]? {
        func isFree(_ token: [UInt8]) -> Bool {
            tokenOwners[token] == nil && retired[token].map({ now - $0 > Self.retiredMemory }) ?? true
        }
        for _ in 0..<Self.tokenDraws {
            var token = [UInt8](repeating: 0, count: tokenLength)
            for i in token.indices { token[i] = UInt8.random(in: 0...255, using: &generator) }
            if isFree(token) { return token }
        }
        guard tokenLength <= 2 else { return nil }
        // At most 65 536 tokens: the first free one in order, if any.
        for value in 0..<(1 << (8 * tokenLength)) {
            let token = (0..<tokenLength).map { UInt8(truncatingIfNeeded: value >> (8 * $0)) }
            if isFree(token) { return token }
        }
        return nil
    }

    /// Issues a new token to session `id` (retiring its old one); without a free token the session keeps
    /// what it has (or broadcasts nothing).
    mutating func issueToken(for id: SessionID, now: Double) -> [MatcherEvent] {
        guard let token = freshToken(now: now) else { return [] }
        if let old = sessions[id]?.token {
            let validUntil = now + rotationGrace
            tokenOwners[old] = TokenOwner(session: id, validUntil: validUntil)
            scheduleToken(.graceEnd(token: old, validUntil: validUntil), due: validUntil)
            retire(old, now: now)
        }
        tokenOwners[token] = TokenOwner(session: id, validUntil: nil)
        sessions[id]?.token = token
        sessions[id]?.tokenIssued = now
        if let due = Self.dueTime(after: now, plus: rotationInterval) { scheduleToken(.rotation(id, issuedAt: now), due: due) }
        return [.broadcastToken(id, token)]
    }

    /// Remembers `token` as retired at `now` (s), so it is not reissued for `retiredMemory`.
    mutating func retire(_ token: [UInt8], now: Double) {
        retired[token] = now
        if let due = Self.dueTime(after: now, plus: Self.retiredMemory) {
            scheduleToken(.retiredMemoryEnd(token: token, retiredAt: now), due: due)
        }
    }

    /// Rotates the tokens due at `now` (each session at most once per tick) and forgets ended grace periods
    /// and retired tokens past their memory.
    mutating func rotateTokens(now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        for deadline in Self.popDue(&tokenDeadlines, now: now) {
            switch deadline.kind {
            case .rotation(let id, let issuedAt):
                guard let session = sessions[id], session.broadcasts, session.tokenIssued == issuedAt else { continue }
                if now - issuedAt >= rotationInterval {
                    events += issueToken(for: id, now: now)
                } else {
                    tokenDeadlines.insert(deadline)  // due early by rounding
                }
            case .graceEnd(let token, let validUntil):
                guard let owner = tokenOwners[token], owner.validUntil == validUntil else { continue }
                if now > validUntil { tokenOwners[token] = nil } else { tokenDeadlines.insert(deadline) }
            case .retiredMemoryEnd(let token, let retiredAt):
                guard retired[token] == retiredAt else { continue }
                if now - retiredAt > Self.retiredMemory { retired[token] = nil } else { tokenDeadlines.insert(deadline) }
            case .edgeTimeout, .publicationExpiry, .subscriptionExpiry:
                continue
            }
        }
        return events
    }
}
