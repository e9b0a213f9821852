/// Identifies a client session (one process using one sound card).
public struct SessionID: Sendable, Hashable, Codable, CustomStringConvertible {
    public let value: String
    public init(_ value: String) { self.value = value }
    public var description: String { value }
}

/// Identifies a publication or subscription within a session.
public struct OperationID: Sendable, Hashable, Codable {
    public let value: Int
    public init(_ value: Int) { self.value = value }
}

/// What the matcher core is told: commands, observations and clock ticks.
public enum MatcherInput: Sendable {
    case openSession(SessionID, appID: String, broadcasts: Bool)
    case closeSession(SessionID)
    case publish(SessionID, OperationID, Message, Strategy)
    case unpublish(SessionID, OperationID)
    case subscribe(SessionID, OperationID, MessageFilter, Strategy, lostTimeout: Double)
    case unsubscribe(SessionID, OperationID)
    /// A beacon and its attachments; `publicVisibility` lets every app receive them. A rotating beacon
    /// (EID-like) is registered under its stable `id` and broadcasts `rotation.id(at:)` instead.
    case registerBeacon(id: [UInt8], appID: String, attachments: [Message], publicVisibility: Bool, rotation: BeaconRotation?)
    /// `observer` decoded a frame carrying `payload`, with this SNR (dB) and received level (dBFS).
    case observe(SessionID, Payload, snr: Double, level: Double)
    /// Time passes: expiries and lost timeouts.
    case tick
}

/// What the matcher core answers.
public enum MatcherEvent: Sendable, Hashable {
    /// The session must broadcast this token (new or rotated).
    case broadcastToken(SessionID, [UInt8])
    case found(SessionID, OperationID, Message)
    case lost(SessionID, OperationID, Message)
    /// Received SNR (dB) of a found message changed by 6 dB or more; with its received level (dBFS).
    case signalChanged(SessionID, OperationID, Message, snr: Double, level: Double)
    case expired(SessionID, OperationID)
    /// The observer heard a token that resolves to nothing: it should stop reporting it for a while.
    case invalidToken(SessionID, [UInt8])
}

/// The matcher: a pure state machine (inputs and the current time in, events out; no clock, no I/O),
/// so that one process can embed it behind an actor and a network service can host the same core.
///
/// A subscription of session A sees a message M when M is published by a session B ≠ A of the same app
/// (or is a public beacon attachment), the filter accepts M, both operations are alive, and A and B are
/// in earshot: either heard the other within the subscription's lost timeout. Audio-bytes messages and
/// beacon IDs are sources heard directly. Found and lost strictly alternate per (subscription, message).
public struct MatcherCore: Sendable {
    /// Token length (bytes).
    public let tokenLength: Int
    /// Token rotation interval (s) and grace period during which the old token still resolves (s).
    public let rotationInterval: Double
    public let rotationGrace: Double
    /// How long retired tokens are never reissued (s).
    public static let retiredMemory = 86_400.0

    private var generator: any RandomNumberGenerator & Sendable

    private struct Publication { var message: Message; var expires: Double? }
    private struct Subscription { var filter: MessageFilter; var expires: Double?; var lostTimeout: Double; var visible: [Message: Double] = [:] }
    private struct Session {
        var appID: String
        var broadcasts: Bool
        var token: [UInt8]?
        var tokenIssued: Double = 0
        var publications: [OperationID: Publication] = [:]
        var subscriptions: [OperationID: Subscription] = [:]
    }
    private enum Source: Hashable { case session(SessionID), beacon([UInt8]), audio([UInt8]) }
    private struct Sighting { var last: Double; var snr: Double; var level: Double }

    private var sessions: [SessionID: Session] = [:]
    private var beacons: [[UInt8]: (appID: String, attachments: [Message], isPublic: Bool)] = [:]
    private var rotations: [[UInt8]: BeaconRotation] = [:]
    private var tokenOwners: [[UInt8]: (session: SessionID, validUntil: Double?)] = [:]
    private var retired: [[UInt8]: Double] = [:]
    /// observer -> source -> last sighting.
    private var sightings: [SessionID: [Source: Sighting]] = [:]

    public init(tokenLength: Int = 8, rotationInterval: Double = 900, rotationGrace: Double = 10,
                generator: any RandomNumberGenerator & Sendable = SystemRandomNumberGenerator()) {
        self.tokenLength = tokenLength
        self.rotationInterval = rotationInterval
        self.rotationGrace = rotationGrace
        self.generator = generator
    }

    /// Applies one input at time `now` (s, monotonic).
    public mutating func handle(_ input: MatcherInput, now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        switch input {
        case .openSession(let id, let appID, let broadcasts):
            sessions[id] = Session(appID: appID, broadcasts: broadcasts)
            if broadcasts { events += issueToken(for: id, now: now) }
        case .closeSession(let id):
            // Session end: everything its subscriptions had found is lost, at once.
            for (op, subscription) in sessions[id]?.subscriptions ?? [:] {
                for message in subscription.visible.keys.sorted(by: { $0.description < $1.description }) { events.append(.lost(id, op, message)) }
            }
            if let token = sessions[id]?.token { tokenOwners[token] = nil; retired[token] = now }
            sessions[id] = nil
            sightings[id] = nil
            for observer in sightings.keys { sightings[observer]?[.session(id)] = nil }
        case .publish(let id, let op, let message, let strategy):
            sessions[id]?.publications[op] = Publication(message: message, expires: strategy.seconds.map { now + $0 })
        case .unpublish(let id, let op):
            sessions[id]?.publications[op] = nil
        case .subscribe(let id, let op, let filter, let strategy, let lostTimeout):
            sessions[id]?.subscriptions[op] = Subscription(filter: filter, expires: strategy.seconds.map { now + $0 }, lostTimeout: lostTimeout)
        case .unsubscribe(let id, let op):
            sessions[id]?.subscriptions[op] = nil
        case .registerBeacon(let beaconID, let appID, let attachments, let isPublic, let rotation):
            beacons[beaconID] = (appID, attachments, isPublic)
            rotations[beaconID] = rotation
        case .observe(let observer, let payload, let snr, let level):
            guard sessions[observer] != nil else { break }
            let source: Source
            switch payload {
            case .audioBytes(let bytes): source = .audio(bytes)
            case .beacon(let heard): source = .beacon(resolveBeacon(heard, now: now))
            case .token(let token):
                guard let owner = tokenOwners[token], owner.validUntil.map({ now <= $0 }) ?? true,
                      sessions[owner.session] != nil else {
                    events.append(.invalidToken(observer, token))
                    return events
                }
                if owner.session == observer { return events }  // own token: the self-check's business
                source = .session(owner.session)
            }
            let previous = sightings[observer]?[source]
            // Exponentially weighted: later sightings count more (like Nearby's BLE signal).
            let smoothed = previous.map { 0.7 * $0.snr + 0.3 * snr } ?? snr
            let smoothedLevel = previous.map { 0.7 * $0.level + 0.3 * level } ?? level
            sightings[observer, default: [:]][source] = Sighting(last: now, snr: smoothed, level: smoothedLevel)
        case .tick:
            events += rotateTokens(now: now)
        }
        events += expire(now: now)
        events += reconcile(now: now)
        return events
    }

    // MARK: Tokens

    private mutating func freshToken(now: Double) -> [UInt8] {
        while true {
            var token = [UInt8](repeating: 0, count: tokenLength)
            for i in token.indices { token[i] = UInt8.random(in: 0...255, using: &generator) }
            if tokenOwners[token] == nil && retired[token].map({ now - $0 > Self.retiredMemory }) ?? true { return token }
        }
    }

    private mutating func issueToken(for id: SessionID, now: Double) -> [MatcherEvent] {
        let token = freshToken(now: now)
        if let old = sessions[id]?.token {
            tokenOwners[old] = (id, now + rotationGrace)
            retired[old] = now
        }
        tokenOwners[token] = (id, nil)
        sessions[id]?.token = token
        sessions[id]?.tokenIssued = now
        return [.broadcastToken(id, token)]
    }

    private mutating func rotateTokens(now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        for (id, session) in sessions where session.broadcasts && now - session.tokenIssued >= rotationInterval {
            events += issueToken(for: id, now: now)
        }
        tokenOwners = tokenOwners.filter { $0.value.validUntil.map { now <= $0 } ?? true }
        retired = retired.filter { now - $0.value <= Self.retiredMemory }
        return events
    }

    // MARK: Expiry and matching

    private mutating func expire(now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        for (id, session) in sessions {
            for (op, publication) in session.publications where publication.expires.map({ now >= $0 }) ?? false {
                sessions[id]?.publications[op] = nil
                events.append(.expired(id, op))
            }
            for (op, subscription) in session.subscriptions where subscription.expires.map({ now >= $0 }) ?? false {
                for message in subscription.visible.keys.sorted(by: { $0.description < $1.description }) { events.append(.lost(id, op, message)) }
                sessions[id]?.subscriptions[op] = nil
                events.append(.expired(id, op))
            }
        }
        return events
    }

    /// Messages a source offers to an observer of app `appID`.
    private func messages(of source: Source, forApp appID: String) -> [Message] {
        switch source {
        case .audio(let bytes):
            return (try? AudioBytes.message(bytes)).map { [$0] } ?? []
        case .beacon(let beaconID):
            var result = [Message(reservedType: ExchangeLimits.beaconIDType, content: beaconID)]
            if let beacon = beacons[beaconID], beacon.isPublic || beacon.appID == appID { result += beacon.attachments }
            return result
        case .session(let id):
            guard let session = sessions[id], session.appID == appID else { return [] }
            return session.publications.values.map(\.message)
        }
    }

    /// Recomputes what every subscription sees; emits found, lost and signal changes.
    private mutating func reconcile(now: Double) -> [MatcherEvent] {
        var events: [MatcherEvent] = []
        for (id, session) in sessions {
            for (op, subscription) in session.subscriptions {
                // Sources in earshot: heard by this session, or (for sessions) having heard it.
                var best: [Message: Sighting] = [:]
                var sources: [Source: Sighting] = [:]
                for (source, sighting) in sightings[id] ?? [:] where now - sighting.last <= subscription.lostTimeout {
                    sources[source] = sighting
                }
                for (other, seen) in sightings where other != id {
                    if let sighting = seen[.session(id)], now - sighting.last <= subscription.lostTimeout,
                       sighting.snr > sources[.session(other)]?.snr ?? -.infinity {
                        sources[.session(other)] = sighting
                    }
                }
                for (source, sighting) in sources {
                    if case .session(let other) = source, other == id { continue }
                    for message in messages(of: source, forApp: session.appID)
                    where subscription.filter.accepts(message) && sighting.snr > best[message]?.snr ?? -.infinity {
                        best[message] = sighting
                    }
                }
                let before = subscription.visible
                for message in before.keys.sorted(by: { $0.description < $1.description }) where best[message] == nil {
                    events.append(.lost(id, op, message))
                }
                var reported: [Message: Double] = [:]
                for message in best.keys.sorted(by: { $0.description < $1.description }) {
                    let snr = best[message]!.snr
                    if let previous = before[message] {
                        if abs(snr - previous) >= 6 {
                            events.append(.signalChanged(id, op, message, snr: snr, level: best[message]!.level))
                            reported[message] = snr
                        } else {
                            reported[message] = previous
                        }
                    } else {
                        events.append(.found(id, op, message))
                        reported[message] = snr
                    }
                }
                sessions[id]?.subscriptions[op]?.visible = reported
            }
        }
        return events
    }

    /// The stable ID of the beacon that broadcast `heard`: itself for fixed beacons, or the rotating beacon
    /// whose current or previous ID it is (one period of grace for sightings in flight).
    private func resolveBeacon(_ heard: [UInt8], now: Double) -> [UInt8] {
        if beacons[heard] != nil && rotations[heard] == nil { return heard }
        for (stable, rotation) in rotations {
            let slot = Int64((now / rotation.period).rounded(.down))
            if rotation.id(at: slot, length: stable.count) == heard || rotation.id(at: slot - 1, length: stable.count) == heard {
                return stable
            }
        }
        return heard
    }

    /// The token a session currently broadcasts.
    public func token(of id: SessionID) -> [UInt8]? { sessions[id]?.token }
}

/// How a rotating (EID-like) beacon changes its ID: every `period` seconds it broadcasts a new ID derived
/// from a secret `key` shared with the matcher, so the beacon cannot be tracked by its ID but the matcher
/// still knows which beacon it is.
public struct BeaconRotation: Sendable, Hashable, Codable {
    public let key: UInt64
    /// Seconds between ID changes.
    public let period: Double

    public init(key: UInt64, period: Double) {
        self.key = key
        self.period = period
    }

    /// The ID broadcast during time slot `slot` (time / period), `length` bytes.
    public func id(at slot: Int64, length: Int) -> [UInt8] {
        var state = key ^ (UInt64(bitPattern: slot) &* 0x9E37_79B9_7F4A_7C15)
        var bytes: [UInt8] = []
        while bytes.count < length {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            for shift in stride(from: 0, to: 64, by: 8) where bytes.count < length { bytes.append(UInt8(truncatingIfNeeded: z >> UInt64(shift))) }
        }
        return bytes
    }

    /// The ID broadcast at time `t` (s).
    public func id(atTime t: Double, length: Int) -> [UInt8] { id(at: Int64((t / period).rounded(.down)), length: length) }
}
