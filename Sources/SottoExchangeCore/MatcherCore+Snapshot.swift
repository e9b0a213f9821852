import HeapModule
import SwiftProtobuf
#if canImport(FoundationEssentials)
import FoundationEssentials  // Data, protobuf's bytes
#else
import Foundation
#endif

// Snapshots: the whole state of a core as bytes, so that a replica that joins late (or restarts) starts
// from the state at some log position instead of replaying the whole log. Everything round-trips exactly
// except the random generator, which the restoring caller supplies.
//
// Layout:
//
//     magic "SMCS" | format version (UInt32, little-endian) | state length (UInt64, little-endian)
//     | FNV-1a 64 checksum of the state (UInt64, little-endian) | state
//
// and the state is a protobuf message, `MatcherState` of Snapshot/matcher_snapshot.proto (format 6). Format 5,
// the same message before link adaptation, is read as format 6 without it; format 4, written by hand before, is
// still read (Snapshot/LegacySnapshot.swift).

/// Why ``MatcherCore/init(snapshot:generator:)`` refused a snapshot.
public enum MatcherSnapshotError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The bytes do not start with a matcher snapshot's magic ("SMCS").
    case notASnapshot
    /// The snapshot was written in format `found`; this build writes format `supported` (and reads it and
    /// the formats before it that ``MatcherCore/legacySnapshotFormatVersions`` lists).
    case unsupportedVersion(found: UInt32, supported: UInt32)
    /// The snapshot is `size` bytes, shorter than the `expected` its header announces: cut off.
    case truncated(size: Int, expected: UInt64)
    /// The snapshot is damaged: its checksum does not match, it has bytes past its end, or its state does
    /// not decode to a valid core (the reason says which, and where).
    case corrupt(String)

    /// What is wrong with the snapshot, in a sentence.
    public var description: String {
        switch self {
        case .notASnapshot: return "not a matcher snapshot: it does not start with \"SMCS\""
        case .unsupportedVersion(let found, let supported):
            return "matcher snapshot format \(found) is not supported: this build reads format \(supported) only"
        case .truncated(let size, let expected):
            return "matcher snapshot is truncated: \(size) bytes, its header announces \(expected)"
        case .corrupt(let reason): return "matcher snapshot is corrupt: \(reason)"
        }
    }
}

extension MatcherCore {
    /// The snapshot format this build writes (protobuf, matcher_snapshot.proto). Bump it on a change to what
    /// is encoded that older builds must not read: a snapshot of an unknown format is refused with
    /// ``MatcherSnapshotError/unsupportedVersion(found:supported:)``.
    public static let snapshotFormatVersion: UInt32 = 6
    /// Older formats this build still reads: 5, the protobuf message before link adaptation (read as format 6
    /// without it: link adaptation off), and 4, written by hand (read by Snapshot/LegacySnapshot.swift).
    public static let legacySnapshotFormatVersions: Set<UInt32> = [4, 5]
    /// The formats that are `MatcherState` messages (5 has no link adaptation).
    static let protobufSnapshotFormatVersions: Set<UInt32> = [5, 6]
    /// First bytes of every snapshot.
    static let snapshotMagic: [UInt8] = Array("SMCS".utf8)
    /// Header size (bytes): magic, format version, state length, checksum.
    static let snapshotHeaderSize = snapshotMagic.count + MemoryLayout<UInt32>.size + 2 * MemoryLayout<UInt64>.size
    /// Token lengths a snapshot may hold (bytes): a damaged length beyond this would make the next token
    /// allocate without bound.
    static let snapshotTokenLengths = 0...1024
    /// FNV-1a 64 offset basis and prime.
    static let checksumBasis: UInt64 = 0xCBF2_9CE4_8422_2325, checksumPrime: UInt64 = 0x0000_0100_0000_01B3

    /// The whole state of the core but its random generator, as bytes for ``init(snapshot:generator:)``:
    /// the configuration, sessions with their publications and subscriptions (and what each has found and
    /// from which sources), beacons, tokens (current, in grace and retired), sightings and pending
    /// deadlines. A core restored from it, given a generator in the state this core's is in, answers every
    /// later input as this one does (the order of events of different subscriptions within one input aside,
    /// which follows dictionary order). Never fails, though a core made with a token length beyond 1024
    /// bytes could not be restored from it.
    public func snapshot() -> [UInt8] {
        // Encoding a message of plain fields cannot fail (no required fields, no Any).
        let state: [UInt8] = (try? stateMessage().serializedBytes()) ?? []
        var bytes = Self.snapshotMagic
        Self.append(Self.snapshotFormatVersion, to: &bytes)
        Self.append(UInt64(state.count), to: &bytes)
        Self.append(Self.checksum(state[...]), to: &bytes)
        return bytes + state
    }

    /// A core in the state `snapshot` (made by ``snapshot()``, of this build or of one writing an older format
    /// this build reads) describes, drawing its tokens from `generator` (not part of the snapshot).
    /// - Parameters:
    ///   - snapshot: the bytes ``snapshot()`` made.
    ///   - generator: where the restored core draws its tokens from.
    /// - Throws: ``MatcherSnapshotError`` for anything but a whole, undamaged snapshot of
    ///   ``snapshotFormatVersion`` or one of ``legacySnapshotFormatVersions``; never traps, whatever the bytes.
    public init(snapshot: [UInt8], generator: any RandomNumberGenerator & Sendable) throws(MatcherSnapshotError) {
        guard snapshot.starts(with: Self.snapshotMagic) else { throw .notASnapshot }
        let versionEnd = Self.snapshotMagic.count + MemoryLayout<UInt32>.size
        guard snapshot.count >= versionEnd else { throw .truncated(size: snapshot.count, expected: UInt64(Self.snapshotHeaderSize)) }
        let version = Self.readLittleEndian(UInt32.self, from: snapshot, at: Self.snapshotMagic.count)
        guard version == Self.snapshotFormatVersion || Self.legacySnapshotFormatVersions.contains(version) else {
            throw .unsupportedVersion(found: version, supported: Self.snapshotFormatVersion)
        }
        guard snapshot.count >= Self.snapshotHeaderSize else {
            throw .truncated(size: snapshot.count, expected: UInt64(Self.snapshotHeaderSize))
        }
        let length = Self.readLittleEndian(UInt64.self, from: snapshot, at: versionEnd)
        let checksum = Self.readLittleEndian(UInt64.self, from: snapshot, at: versionEnd + MemoryLayout<UInt64>.size)
        let (expected, overflow) = UInt64(Self.snapshotHeaderSize).addingReportingOverflow(length)
        guard !overflow else { throw .corrupt("the header announces \(length) bytes of state") }
        guard UInt64(snapshot.count) >= expected else { throw .truncated(size: snapshot.count, expected: expected) }
        guard UInt64(snapshot.count) == expected else {
            throw .corrupt("\(UInt64(snapshot.count) - expected) bytes past the end its header announces")
        }
        guard Self.checksum(snapshot[Self.snapshotHeaderSize...]) == checksum else { throw .corrupt("its checksum does not match") }
        if Self.protobufSnapshotFormatVersions.contains(version) {
            let state: SnapshotState
            do { state = try SnapshotState(serializedBytes: Array(snapshot[Self.snapshotHeaderSize...])) } catch {
                throw .corrupt("the state does not decode (\(error))")
            }
            try self.init(state: state, generator: generator)
        } else {
            try self.init(legacyState: snapshot, from: Self.snapshotHeaderSize, generator: generator)
        }
        recountPublicationBytes()
    }

    // MARK: Header

    /// FNV-1a, 64 bits: detects damaged bytes (not tampering).
    static func checksum(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        bytes.withUnsafeBufferPointer { buffer in
            var hash = checksumBasis
            for byte in buffer { hash = (hash ^ UInt64(byte)) &* checksumPrime }
            return hash
        }
    }

    static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    /// The little-endian integer at `offset`; the caller has checked the length.
    static func readLittleEndian<T: FixedWidthInteger>(_: T.Type, from bytes: [UInt8], at offset: Int) -> T {
        var value: T = 0
        for index in 0..<MemoryLayout<T>.size { value |= T(bytes[offset + index]) << (8 * index) }
        return value
    }

    // MARK: The state as a message (matcher_snapshot.proto)

    func stateMessage() -> SnapshotState {
        var state = SnapshotState()
        state.tokenLength = Int64(tokenLength)
        state.rotationInterval = rotationInterval
        state.rotationGrace = rotationGrace
        state.sessions = Dictionary(uniqueKeysWithValues: sessions.map { ($0.key.value, $0.value.message) })
        state.beacons = beacons.map { id, beacon in beacon.message(id: id, rotation: rotations[id]) }
        state.tokenOwners = tokenOwners.map { token, owner in
            var message = SnapshotProto.TokenOwner()
            message.token = Data(token)
            message.session = owner.session.value
            if let validUntil = owner.validUntil { message.validUntil = validUntil }
            return message
        }
        state.retired = retired.map { SnapshotProto.TokenTime(token: $0.key, time: $0.value) }
        state.sightings = Dictionary(uniqueKeysWithValues: sightings.map { observer, heard in
            (observer.value, SnapshotProto.Sightings.with { $0.sources = heard.map(SnapshotProto.SourceSighting.init) })
        })
        state.hearers = hearers.map { source, sessions in
            SnapshotProto.Hearers.with {
                $0.source = source.message
                $0.sessions = sessions.map(\.value)
            }
        }
        state.matchingDeadlines = matchingDeadlines.unordered.map(\.message)
        state.tokenDeadlines = tokenDeadlines.unordered.map(\.message)
        state.deadlineSequence = deadlineSequence
        if let turns { state.turns = turns.message }
        if let linkAdaptation { state.linkAdaptation = linkAdaptation.message }
        return state
    }

    /// A core in the state `state` describes; checked as the inputs that made it were.
    init(state: SnapshotState, generator: any RandomNumberGenerator & Sendable) throws(MatcherSnapshotError) {
        guard let tokenLength = Int(exactly: state.tokenLength), Self.snapshotTokenLengths.contains(tokenLength) else {
            throw .corrupt("token length \(state.tokenLength)")
        }
        self.init(tokenLength: tokenLength, rotationInterval: state.rotationInterval, rotationGrace: state.rotationGrace,
                  generator: generator)
        for (id, session) in state.sessions { sessions[SessionID(id)] = try Session(session) }
        for beacon in state.beacons {
            beacons[Array(beacon.id)] = RegisteredBeacon(appID: beacon.appID, attachments: beacon.attachments.map(\.value), isPublic: beacon.public)
            if beacon.hasRotationKey {
                do {
                    rotations[Array(beacon.id)] = try BeaconRotation(key: try BeaconIdentityKey(bytes: Array(beacon.rotationKey)),
                                                                     period: beacon.rotationPeriod)
                } catch {
                    throw .corrupt("a beacon rotation is invalid (\(error))")
                }
            }
        }
        for owner in state.tokenOwners {
            tokenOwners[Array(owner.token)] = TokenOwner(session: SessionID(owner.session), validUntil: owner.hasValidUntil ? owner.validUntil : nil)
        }
        for token in state.retired { retired[Array(token.token)] = token.time }
        for (observer, heard) in state.sightings {
            for item in heard.sources { sightings[SessionID(observer), default: [:]][try Source(item.source)] = Sighting(item.sighting) }
        }
        for item in state.hearers { hearers[try Source(item.source)] = Set(item.sessions.map(SessionID.init)) }
        let matching = try state.matchingDeadlines.map(Deadline.init), token = try state.tokenDeadlines.map(Deadline.init)
        // A deadline is scheduled only when finite; a NaN would break the heap's order.
        guard matching.allSatisfy(\.due.isFinite), token.allSatisfy(\.due.isFinite) else { throw .corrupt("a deadline is never due") }
        matchingDeadlines = Heap(matching)
        tokenDeadlines = Heap(token)
        deadlineSequence = state.deadlineSequence
        turns = state.hasTurns ? try BroadcastCoordinator(state.turns) : nil
        linkAdaptation = state.hasLinkAdaptation ? try LinkAdaptation(state.linkAdaptation) : nil
    }
}

/// The generated messages of matcher_snapshot.proto, by shorter names.
typealias SnapshotState = Sotto_Exchange_Snapshot_V1_MatcherState
enum SnapshotProto {
    typealias Session = Sotto_Exchange_Snapshot_V1_Session
    typealias Message = Sotto_Exchange_Snapshot_V1_Message
    typealias Strategy = Sotto_Exchange_Snapshot_V1_Strategy
    typealias Filter = Sotto_Exchange_Snapshot_V1_Filter
    typealias Publication = Sotto_Exchange_Snapshot_V1_Publication
    typealias Subscription = Sotto_Exchange_Snapshot_V1_Subscription
    typealias Supporters = Sotto_Exchange_Snapshot_V1_Supporters
    typealias SupportedBy = Sotto_Exchange_Snapshot_V1_SupportedBy
    typealias Reported = Sotto_Exchange_Snapshot_V1_Reported
    typealias Source = Sotto_Exchange_Snapshot_V1_Source
    typealias Sighting = Sotto_Exchange_Snapshot_V1_Sighting
    typealias SourceSighting = Sotto_Exchange_Snapshot_V1_SourceSighting
    typealias Sightings = Sotto_Exchange_Snapshot_V1_Sightings
    typealias Hearers = Sotto_Exchange_Snapshot_V1_Hearers
    typealias Beacon = Sotto_Exchange_Snapshot_V1_Beacon
    typealias TokenOwner = Sotto_Exchange_Snapshot_V1_TokenOwner
    typealias TokenTime = Sotto_Exchange_Snapshot_V1_TokenTime
    typealias Deadline = Sotto_Exchange_Snapshot_V1_Deadline
    typealias Turns = Sotto_Exchange_Snapshot_V1_Turns
    typealias LinkAdaptation = Sotto_Exchange_Snapshot_V1_LinkAdaptation
}

// MARK: Values

extension SnapshotProto.Message {
    init(_ message: Message) {
        self.init()
        namespace = message.namespace
        type = message.type
        content = Data(message.content)
    }

    /// As the core holds it: checked when it entered the core (the reserved namespace is the core's own).
    var value: Message { Message(delivered: namespace, type: type, content: Array(content)) }
}

extension SnapshotProto.Strategy {
    /// The discovery modes by their number in the message.
    static let modes: [Strategy.DiscoveryMode] = [.broadcast, .scan, .both]

    init(_ strategy: Strategy) {
        self.init()
        discoveryMode = DiscoveryMode(rawValue: Self.modes.firstIndex(of: strategy.discoveryMode) ?? 0) ?? .broadcast
        earshot = strategy.distanceType == .earshot
        lowPower = strategy.lowPower
        if case .seconds(let seconds) = strategy.ttl { ttlSeconds = Int64(seconds) }
    }

    /// Checked like a strategy made with ``Strategy/init(discoveryMode:distanceType:ttl:lowPower:)``.
    func value() throws(MatcherSnapshotError) -> Strategy {
        guard Self.modes.indices.contains(discoveryMode.rawValue) else { throw .corrupt("unknown discovery mode \(discoveryMode.rawValue)") }
        let mode = Self.modes[discoveryMode.rawValue]
        guard !hasTtlSeconds || Int(exactly: ttlSeconds) != nil else { throw .corrupt("a TTL of \(ttlSeconds) s") }
        do {
            return try Strategy(discoveryMode: mode, distanceType: earshot ? .earshot : .default,
                                ttl: hasTtlSeconds ? .seconds(Int(ttlSeconds)) : .infinite, lowPower: lowPower)
        } catch {
            throw .corrupt("a strategy is invalid (\(error))")
        }
    }
}

extension SnapshotProto.Filter {
    init(_ filter: MessageFilter) {
        self.init()
        includes = filter.includes.map { include in
            SnapshotProto.Filter.Include.with {
                switch include {
                case .allMyTypes: $0.allMyTypes = true
                case .namespacedType(let namespace, let type): $0.namespacedType = .with { $0.namespace = namespace; $0.type = type }
                case .audioBytes(let length): $0.audioBytes = Int64(length)
                case .beaconIDs: $0.beaconIds = true
                }
            }
        }
    }

    /// Checked like a filter made with ``MessageFilter/init(_:)``.
    func value() throws(MatcherSnapshotError) -> MessageFilter {
        var values: [MessageFilter.Include] = []
        for include in includes {
            switch include.kind {
            case .allMyTypes: values.append(.allMyTypes)
            case .namespacedType(let body): values.append(.namespacedType(namespace: body.namespace, type: body.type))
            case .audioBytes(let length): values.append(.audioBytes(Int(clamping: length)))
            case .beaconIds: values.append(.beaconIDs)
            case nil: throw .corrupt("a filter include of no kind")
            }
        }
        do { return try MessageFilter(values) } catch { throw .corrupt("a filter is invalid (\(error))") }
    }
}

extension SnapshotProto.TokenTime {
    init(token: [UInt8], time: Double) {
        self.init()
        self.token = Data(token)
        self.time = time
    }
}

extension MatcherCore.Source {
    var message: SnapshotProto.Source {
        SnapshotProto.Source.with {
            switch self {
            case .session(let id): $0.session = id.value
            case .beacon(let id): $0.beacon = Data(id)
            case .audio(let bytes): $0.audio = Data(bytes)
            }
        }
    }

    init(_ message: SnapshotProto.Source) throws(MatcherSnapshotError) {
        switch message.kind {
        case .session(let id): self = .session(SessionID(id))
        case .beacon(let id): self = .beacon(Array(id))
        case .audio(let bytes): self = .audio(Array(bytes))
        case nil: throw .corrupt("a source of no kind")
        }
    }
}

extension MatcherCore.Sighting {
    init(_ message: SnapshotProto.Sighting) { self.init(last: message.last, snr: message.snr, level: message.level) }
}

extension SnapshotProto.SourceSighting {
    init(_ source: MatcherCore.Source, _ sighting: MatcherCore.Sighting) {
        self.init()
        self.source = source.message
        self.sighting = .with {
            $0.last = sighting.last
            $0.snr = sighting.snr
            $0.level = sighting.level
        }
    }
}

// MARK: Sessions

extension MatcherCore.Session {
    var message: SnapshotProto.Session {
        var message = SnapshotProto.Session()
        message.appID = appID
        message.broadcasts = broadcasts
        if let token { message.token = Data(token) }
        message.tokenIssued = tokenIssued
        message.publications = Dictionary(uniqueKeysWithValues: publications.map { op, publication in
            (Int64(op.value), SnapshotProto.Publication.with {
                $0.message = .init(publication.message)
                $0.strategy = .init(publication.strategy)
                if let expires = publication.expires { $0.expires = expires }
            })
        })
        message.subscriptions = Dictionary(uniqueKeysWithValues: subscriptions.map { (Int64($0.key.value), $0.value.message) })
        return message
    }

    init(_ message: SnapshotProto.Session) throws(MatcherSnapshotError) {
        self.init(appID: message.appID, broadcasts: message.broadcasts, token: message.hasToken ? Array(message.token) : nil,
                  tokenIssued: message.tokenIssued)
        for (op, publication) in message.publications {
            publications[OperationID(Int(op))] = MatcherCore.Publication(message: publication.message.value, strategy: try publication.strategy.value(),
                                                                         expires: publication.hasExpires ? publication.expires : nil)
        }
        for (op, subscription) in message.subscriptions { subscriptions[OperationID(Int(op))] = try MatcherCore.Subscription(subscription) }
    }
}

extension MatcherCore.Subscription {
    var message: SnapshotProto.Subscription {
        var message = SnapshotProto.Subscription()
        message.filter = .init(filter)
        message.strategy = .init(strategy)
        message.lostTimeout = lostTimeout
        if let expires { message.expires = expires }
        message.supporters = supporters.map { held, sources in
            SnapshotProto.Supporters.with {
                $0.message = .init(held)
                $0.sources = sources.map(SnapshotProto.SourceSighting.init)
            }
        }
        message.supportedBy = supportedBy.map { source, messages in
            SnapshotProto.SupportedBy.with {
                $0.source = source.message
                $0.messages = messages.map(SnapshotProto.Message.init)
            }
        }
        message.reported = reported.map { held, snr in
            SnapshotProto.Reported.with {
                $0.message = .init(held)
                $0.snr = snr
            }
        }
        return message
    }

    init(_ message: SnapshotProto.Subscription) throws(MatcherSnapshotError) {
        self.init(filter: try message.filter.value(), strategy: try message.strategy.value(), lostTimeout: message.lostTimeout,
                  expires: message.hasExpires ? message.expires : nil)
        for item in message.supporters {
            var sources: [MatcherCore.Source: MatcherCore.Sighting] = [:]
            for source in item.sources { sources[try MatcherCore.Source(source.source)] = MatcherCore.Sighting(source.sighting) }
            supporters[item.message.value] = sources
        }
        for item in message.supportedBy { supportedBy[try MatcherCore.Source(item.source)] = item.messages.map(\.value) }
        for item in message.reported { reported[item.message.value] = item.snr }
    }
}

extension MatcherCore.RegisteredBeacon {
    func message(id: [UInt8], rotation: BeaconRotation?) -> SnapshotProto.Beacon {
        var message = SnapshotProto.Beacon()
        message.id = Data(id)
        message.appID = appID
        message.attachments = attachments.map(SnapshotProto.Message.init)
        message.public = isPublic
        if let rotation {
            message.rotationKey = Data(rotation.key.bytes)
            message.rotationPeriod = rotation.period
        }
        return message
    }
}

// MARK: Deadlines

extension MatcherCore.Deadline {
    var message: SnapshotProto.Deadline {
        var message = SnapshotProto.Deadline()
        message.due = due
        message.sequence = sequence
        func expiry(_ id: SessionID, _ op: OperationID, _ expires: Double) -> SnapshotProto.Deadline.OperationExpiry {
            .with {
                $0.session = id.value
                $0.operation = Int64(op.value)
                $0.expires = expires
            }
        }
        switch kind {
        case .edgeTimeout(let observer, let source, let heardAt, let lostTimeout):
            message.edgeTimeout = .with {
                $0.observer = observer.value
                $0.source = source.message
                $0.heardAt = heardAt
                $0.lostTimeout = lostTimeout
            }
        case .publicationExpiry(let id, let op, let expires): message.publicationExpiry = expiry(id, op, expires)
        case .subscriptionExpiry(let id, let op, let expires): message.subscriptionExpiry = expiry(id, op, expires)
        case .rotation(let id, let issuedAt):
            message.rotation = .with {
                $0.session = id.value
                $0.issuedAt = issuedAt
            }
        case .graceEnd(let token, let validUntil): message.graceEnd = .init(token: token, time: validUntil)
        case .retiredMemoryEnd(let token, let retiredAt): message.retiredMemoryEnd = .init(token: token, time: retiredAt)
        }
        return message
    }

    init(_ message: SnapshotProto.Deadline) throws(MatcherSnapshotError) {
        let kind: Kind
        switch message.kind {
        case .edgeTimeout(let body):
            kind = .edgeTimeout(observer: SessionID(body.observer), source: try MatcherCore.Source(body.source), heardAt: body.heardAt,
                                lostTimeout: body.lostTimeout)
        case .publicationExpiry(let body): kind = .publicationExpiry(SessionID(body.session), OperationID(Int(body.operation)), expires: body.expires)
        case .subscriptionExpiry(let body): kind = .subscriptionExpiry(SessionID(body.session), OperationID(Int(body.operation)), expires: body.expires)
        case .rotation(let body): kind = .rotation(SessionID(body.session), issuedAt: body.issuedAt)
        case .graceEnd(let body): kind = .graceEnd(token: Array(body.token), validUntil: body.time)
        case .retiredMemoryEnd(let body): kind = .retiredMemoryEnd(token: Array(body.token), retiredAt: body.time)
        case nil: throw .corrupt("a deadline of no kind")
        }
        self.init(due: message.due, sequence: message.sequence, kind: kind)
    }
}

// MARK: Turns

/// The turns are part of the replicated state: every replica of a cluster, restored or not, plans the same
/// rounds for the same hearings.
extension BroadcastCoordinator {
    var message: SnapshotProto.Turns {
        var message = SnapshotProto.Turns()
        message.rules = .with {
            $0.slotGuard = rules.slotGuard
            $0.lead = rules.lead
            $0.openGap = rules.openGap
            $0.refresh = rules.refresh
            $0.memory = rules.memory
            $0.hold = rules.hold
            $0.aliasRoomSize = Int64(rules.aliasRoomSize)
            $0.horizon = rules.horizon
            $0.settle = rules.settle
            $0.fullTokenEvery = rules.fullTokenEvery
        }
        message.heard = Dictionary(uniqueKeysWithValues: heard.map { speaker, listeners in
            (speaker.value, SnapshotProto.Turns.Heard.with { $0.listeners = Self.byID(listeners) })
        })
        message.airtimes = Self.byID(airtimes)
        message.aliasAirtimes = Self.byID(aliasAirtimes)
        message.aliases = Self.byID(aliases.mapValues(UInt32.init))
        message.roomOf = Self.byID(roomOf.mapValues(\.value))
        message.lastFullToken = Self.byID(lastFullToken)
        message.followUntil = Self.byID(followUntil)
        message.slotsEnd = Self.byID(slotsEnd)
        message.lastSlot = Self.byID(lastSlot)
        message.quietUntil = Self.byID(quietUntil)
        if let lastPlan { message.lastPlan = lastPlan }
        message.recentSlots = recentSlots.map { slot in
            .with { $0.session = slot.session.value; $0.start = slot.start; $0.end = slot.end; $0.judged = slot.judged }
        }
        message.sharedAir = sharedAir.sorted { ($0.key.first.value, $0.key.second.value) < ($1.key.first.value, $1.key.second.value) }
            .map { pair, learnt in .with { $0.first = pair.first.value; $0.second = pair.second.value; $0.learnt = learnt } }
        if let newRoomsEnd { message.newRoomsEnd = newRoomsEnd }
        return message
    }

    init(_ message: SnapshotProto.Turns) throws(MatcherSnapshotError) {
        let r = message.rules
        let times = [r.slotGuard, r.lead, r.openGap, r.refresh, r.memory, r.hold, r.horizon, r.settle, r.fullTokenEvery]
        guard times.allSatisfy({ $0.isFinite && $0 >= 0 }) else { throw .corrupt("the turns' rules \(times)") }
        guard let aliasRoomSize = Int(exactly: r.aliasRoomSize), aliasRoomSize >= 0 else { throw .corrupt("the turns' alias room size \(r.aliasRoomSize)") }
        self.init(rules: Rules(slotGuard: r.slotGuard, lead: r.lead, openGap: r.openGap, refresh: r.refresh, memory: r.memory, hold: r.hold,
                               aliasRoomSize: aliasRoomSize, horizon: r.horizon, settle: r.settle, fullTokenEvery: r.fullTokenEvery))
        heard = Self.bySession(message.heard.mapValues { Self.bySession($0.listeners) })
        airtimes = Self.bySession(message.airtimes)
        aliasAirtimes = Self.bySession(message.aliasAirtimes)
        guard message.aliases.values.allSatisfy({ $0 <= UInt32(Payload.maxRoomAlias) }) else { throw .corrupt("a room alias is out of range") }
        for (session, alias) in message.aliases { setAlias(UInt16(alias), of: SessionID(session)) }
        roomOf = Self.bySession(message.roomOf.mapValues(SessionID.init))
        lastFullToken = Self.bySession(message.lastFullToken)
        followUntil = Self.bySession(message.followUntil)
        slotsEnd = Self.bySession(message.slotsEnd)
        lastSlot = Self.bySession(message.lastSlot)
        quietUntil = Self.bySession(message.quietUntil)
        lastPlan = message.hasLastPlan ? message.lastPlan : nil
        recentSlots = message.recentSlots.map { PlannedSlot(session: SessionID($0.session), start: $0.start, end: $0.end, judged: $0.judged) }
        guard zip(recentSlots, recentSlots.dropFirst()).allSatisfy({ $0.start <= $1.start }), recentSlots.allSatisfy({ $0.end >= $0.start }) else {
            throw .corrupt("the turns' recent slots are out of order")
        }
        for item in message.sharedAir {
            guard item.first != item.second else { throw .corrupt("a session shares the air with itself") }
            sharedAir[SessionPair(SessionID(item.first), SessionID(item.second))] = item.learnt
        }
        newRoomsEnd = message.hasNewRoomsEnd ? message.newRoomsEnd : nil
        try validateRestoredTimes()
    }

    /// Refuses restored times that would turn into NaN or overflow when a schedule is put on the wire, and
    /// frame airtimes out of range.
    func validateRestoredTimes() throws(MatcherSnapshotError) {
        var times: [Double] = heard.values.flatMap(\.values)
        for values in [slotsEnd, lastSlot, quietUntil, lastFullToken, followUntil] { times += values.values }
        times += recentSlots.flatMap { [$0.start, $0.end] }
        times += sharedAir.values
        times += [lastPlan ?? 0, newRoomsEnd ?? 0]
        guard times.allSatisfy({ $0.isFinite && abs($0) < 1e12 }) else { throw .corrupt("a time of the turns is not finite") }
        guard (Array(airtimes.values) + aliasAirtimes.values).allSatisfy({ $0 > 0 && $0 <= Double(ExchangeLimits.maxFrameAirtimeMs) / 1000 }) else {
            throw .corrupt("a frame airtime of the turns is out of range")
        }
    }

    static func byID<Value>(_ values: [SessionID: Value]) -> [String: Value] {
        Dictionary(uniqueKeysWithValues: values.map { ($0.key.value, $0.value) })
    }

    static func bySession<Value>(_ values: [String: Value]) -> [SessionID: Value] {
        Dictionary(uniqueKeysWithValues: values.map { (SessionID($0.key), $0.value) })
    }
}

// MARK: Link adaptation

/// Link adaptation is part of the replicated state: every replica, restored or not, moves the same sessions for
/// the same hearings.
extension LinkAdaptation {
    var message: SnapshotProto.LinkAdaptation {
        var message = SnapshotProto.LinkAdaptation()
        message.rules = .with {
            $0.window = rules.window
            $0.minimumHearings = Int64(rules.minimumHearings)
            $0.robustBelow = rules.robustBelow
            $0.standardAbove = rules.standardAbove
            $0.recovery = rules.recovery
            $0.unheardFor = rules.unheardFor
        }
        message.links = Dictionary(uniqueKeysWithValues: links.map { session, link in
            (session.value, SnapshotProto.LinkAdaptation.Link.with {
                $0.profile = link.profile == .robust ? .robust : .default
                $0.hearings = link.hearings.map { hearing in .with { $0.time = hearing.time; $0.snr = hearing.snr } }
                $0.hears = BroadcastCoordinator.byID(link.hears)
                $0.heardBy = BroadcastCoordinator.byID(link.heardBy)
                if let strongSince = link.strongSince { $0.strongSince = strongSince }
                if let unheardSince = link.unheardSince { $0.unheardSince = unheardSince }
            })
        })
        return message
    }

    init(_ message: SnapshotProto.LinkAdaptation) throws(MatcherSnapshotError) {
        let r = message.rules
        let times = [r.window, r.recovery, r.unheardFor]
        guard times.allSatisfy({ $0.isFinite && $0 >= 0 }), r.robustBelow.isFinite, r.standardAbove.isFinite else {
            throw .corrupt("the link adaptation's rules \(times + [r.robustBelow, r.standardAbove])")
        }
        guard let minimumHearings = Int(exactly: r.minimumHearings), (0...Rules.maximumHearings).contains(minimumHearings) else {
            throw .corrupt("the link adaptation's minimum hearings \(r.minimumHearings)")
        }
        self.init(rules: Rules(window: r.window, minimumHearings: minimumHearings, robustBelow: r.robustBelow,
                               standardAbove: r.standardAbove, recovery: r.recovery, unheardFor: r.unheardFor))
        for (session, item) in message.links {
            var link = Link()
            switch item.profile {
            case .default: link.profile = .standard
            case .robust: link.profile = .robust
            case .UNRECOGNIZED(let value): throw .corrupt("an unknown link profile \(value)")
            }
            guard item.hearings.count <= Rules.maximumHearings else { throw .corrupt("\(item.hearings.count) hearings of one link") }
            link.hearings = item.hearings.map { Hearing(time: $0.time, snr: $0.snr) }
            link.hears = BroadcastCoordinator.bySession(item.hears)
            link.heardBy = BroadcastCoordinator.bySession(item.heardBy)
            link.strongSince = item.hasStrongSince ? item.strongSince : nil
            link.unheardSince = item.hasUnheardSince ? item.unheardSince : nil
            let linkTimes = link.hearings.flatMap { [$0.time, $0.snr] } + link.hears.values + link.heardBy.values
                + [link.strongSince ?? 0, link.unheardSince ?? 0]
            guard linkTimes.allSatisfy({ $0.isFinite && abs($0) < 1e12 }) else { throw .corrupt("a time of the link adaptation is not finite") }
            links[SessionID(session)] = link
        }
        rebuildDue()
    }
}
