import HeapModule

// Snapshots: the whole state of a core as bytes, so that a replica that joins late (or restarts) starts
// from the state at some log position instead of replaying the whole log. Everything round-trips exactly
// except the random generator, which the restoring caller supplies.
//
// Layout (encodings in SnapshotCoding.swift):
//
//     magic "SMCS" | format version (UInt32, little-endian) | state length (UInt64, little-endian)
//     | FNV-1a 64 checksum of the state (UInt64, little-endian) | state
//
// and the state is, in this order: token length, rotation interval, rotation grace, sessions, beacons,
// rotations, token owners, retired tokens, sightings, hearers, the matching deadlines and the token
// deadlines (each heap's elements as an array, in the heap's storage order) and the deadline sequence.

/// Why ``MatcherCore/init(snapshot:generator:)`` refused a snapshot.
public enum MatcherSnapshotError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The bytes do not start with a matcher snapshot's magic ("SMCS").
    case notASnapshot
    /// The snapshot was written in format `found`; this build reads format `supported` only.
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
    /// The snapshot format this build writes and reads. Bump it on any change to what is encoded (or how):
    /// a snapshot of another format is then refused with ``MatcherSnapshotError/unsupportedVersion(found:supported:)``.
    public static let snapshotFormatVersion: UInt32 = 4
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
        var writer = SnapshotWriter()
        writer.bytes = Self.snapshotMagic
        writer.bytes.append(contentsOf: [UInt8](repeating: 0, count: Self.snapshotHeaderSize - Self.snapshotMagic.count))
        writer.write(tokenLength)
        writer.write(rotationInterval)
        writer.write(rotationGrace)
        writer.write(sessions)
        writer.write(beacons)
        writer.write(rotations)
        writer.write(tokenOwners)
        writer.write(retired)
        writer.write(sightings)
        writer.write(hearers)
        writer.write(Array(matchingDeadlines.unordered))
        writer.write(Array(tokenDeadlines.unordered))
        writer.write(deadlineSequence)
        writer.write(turns)

        var header: [UInt8] = []
        Self.append(Self.snapshotFormatVersion, to: &header)
        Self.append(UInt64(writer.bytes.count - Self.snapshotHeaderSize), to: &header)
        Self.append(Self.checksum(writer.bytes[Self.snapshotHeaderSize...]), to: &header)
        writer.bytes.replaceSubrange(Self.snapshotMagic.count..<Self.snapshotHeaderSize, with: header)
        return writer.bytes
    }

    /// A core in the state `snapshot` (made by ``snapshot()``) describes, drawing its tokens from
    /// `generator` (not part of the snapshot).
    /// - Throws: ``MatcherSnapshotError`` for anything but a whole, undamaged snapshot of
    ///   ``snapshotFormatVersion``; never traps, whatever the bytes.
    public init(snapshot: [UInt8], generator: any RandomNumberGenerator & Sendable) throws(MatcherSnapshotError) {
        guard snapshot.starts(with: Self.snapshotMagic) else { throw .notASnapshot }
        let versionEnd = Self.snapshotMagic.count + MemoryLayout<UInt32>.size
        guard snapshot.count >= versionEnd else { throw .truncated(size: snapshot.count, expected: UInt64(Self.snapshotHeaderSize)) }
        let version = Self.readLittleEndian(UInt32.self, from: snapshot, at: Self.snapshotMagic.count)
        guard version == Self.snapshotFormatVersion else {
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

        var reader = SnapshotReader(snapshot, from: Self.snapshotHeaderSize)
        let tokenLength = try reader.read(Int.self)
        guard Self.snapshotTokenLengths.contains(tokenLength) else { throw .corrupt("token length \(tokenLength)") }
        self.init(tokenLength: tokenLength, rotationInterval: try reader.read(), rotationGrace: try reader.read(),
                  generator: generator)
        sessions = try reader.read()
        beacons = try reader.read()
        rotations = try reader.read()
        tokenOwners = try reader.read()
        retired = try reader.read()
        sightings = try reader.read()
        hearers = try reader.read()
        let matching: [Deadline] = try reader.read(), token: [Deadline] = try reader.read()
        // A deadline is scheduled only when finite; a NaN would break the heap's order.
        guard matching.allSatisfy(\.due.isFinite), token.allSatisfy(\.due.isFinite) else { throw .corrupt("a deadline is never due") }
        matchingDeadlines = Heap(matching)
        tokenDeadlines = Heap(token)
        deadlineSequence = try reader.read()
        turns = try reader.read()
        recountPublicationBytes()
        guard reader.remaining == 0 else { throw .corrupt("\(reader.remaining) bytes after the state") }
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
}

// MARK: Encoding of the state's types (fields in declaration order; enum tags in case order)

/// The turns are part of the replicated state: every replica of a cluster, restored or not, plans the same
/// rounds for the same hearings.
extension BroadcastCoordinator: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        for value in [rules.slotGuard, rules.lead, rules.openGap, rules.refresh, rules.memory, rules.hold] { writer.write(value) }
        writer.write(rules.aliasRoomSize)
        for value in [rules.horizon, rules.settle, rules.fullTokenEvery] { writer.write(value) }
        writer.write(heard)
        writer.write(airtimes)
        writer.write(aliasAirtimes)
        writer.write(aliases.mapValues { Int($0) })
        writer.write(roomOf)
        writer.write(lastFullToken)
        writer.write(followUntil)
        writer.write(slotsEnd)
        writer.write(lastSlot)
        writer.write(quietUntil)
        writer.write(lastPlan)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        var values: [Double] = []
        for _ in 0..<6 { values.append(try reader.read(Double.self)) }
        guard values.allSatisfy({ $0.isFinite && $0 >= 0 }) else { throw .corrupt("the turns' rules \(values)") }
        let aliasRoomSize = try reader.read(Int.self)
        guard aliasRoomSize >= 0 else { throw .corrupt("the turns' alias room size \(aliasRoomSize)") }
        for _ in 0..<3 { values.append(try reader.read(Double.self)) }
        guard values.allSatisfy({ $0.isFinite && $0 >= 0 }) else { throw .corrupt("the turns' rules \(values)") }
        self.init(rules: Rules(slotGuard: values[0], lead: values[1], openGap: values[2], refresh: values[3],
                               memory: values[4], hold: values[5], aliasRoomSize: aliasRoomSize, horizon: values[6],
                               settle: values[7], fullTokenEvery: values[8]))
        heard = try reader.read()
        airtimes = try reader.read()
        aliasAirtimes = try reader.read()
        let aliasValues: [SessionID: Int] = try reader.read()
        guard aliasValues.values.allSatisfy({ (0...Int(Payload.maxRoomAlias)).contains($0) }) else { throw .corrupt("a room alias is out of range") }
        for (session, alias) in aliasValues { setAlias(UInt16(alias), of: session) }
        roomOf = try reader.read()
        lastFullToken = try reader.read()
        followUntil = try reader.read()
        slotsEnd = try reader.read()
        lastSlot = try reader.read()
        quietUntil = try reader.read()
        lastPlan = try reader.read()
        // Times that would turn into NaN or overflow when a schedule is put on the wire.
        let times = heard.values.flatMap(\.values) + slotsEnd.values + lastSlot.values + quietUntil.values + lastFullToken.values + followUntil.values + [lastPlan ?? 0]
        guard times.allSatisfy({ $0.isFinite && abs($0) < 1e12 }) else { throw .corrupt("a time of the turns is not finite") }
        guard (Array(airtimes.values) + aliasAirtimes.values).allSatisfy({ $0 > 0 && $0 <= Double(ExchangeLimits.maxFrameAirtimeMs) / 1000 }) else {
            throw .corrupt("a frame airtime of the turns is out of range")
        }
    }
}

extension SessionID: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) { writer.write(value) }
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self.init(try reader.read(String.self)) }
}

extension OperationID: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) { writer.write(value) }
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self.init(try reader.read(Int.self)) }
}

extension Message: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(namespace)
        writer.write(type)
        writer.write(content)
    }

    /// As the core holds it: checked when it entered the core (the reserved namespace is the core's own).
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(delivered: try reader.read(), type: try reader.read(), content: try reader.read())
    }
}

extension MessageFilter: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.writeVarint(UInt64(includes.count))
        for include in includes {
            switch include {
            case .allMyTypes: writer.writeByte(0)
            case .namespacedType(let namespace, let type):
                writer.writeByte(1)
                writer.write(namespace)
                writer.write(type)
            case .audioBytes(let length):
                writer.writeByte(2)
                writer.write(length)
            case .beaconIDs: writer.writeByte(3)
            }
        }
    }

    /// Checked like a filter made with ``init(_:)``.
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        var includes: [Include] = []
        for _ in 0..<(try reader.readCount()) {
            switch try reader.readTag(upTo: 3, of: "filter include") {
            case 0: includes.append(.allMyTypes)
            case 1: includes.append(.namespacedType(namespace: try reader.read(), type: try reader.read()))
            case 2: includes.append(.audioBytes(try reader.read()))
            default: includes.append(.beaconIDs)
            }
        }
        do {
            try self.init(includes)
        } catch {
            throw .corrupt("a filter is invalid (\(error)), before byte \(reader.offset)")
        }
    }
}

extension Strategy: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        switch discoveryMode {
        case .broadcast: writer.writeByte(0)
        case .scan: writer.writeByte(1)
        case .both: writer.writeByte(2)
        }
        // The distance type, and low power in bit 1 (a snapshot without low power reads as before it existed).
        let low: UInt8 = lowPower ? 2 : 0
        switch distanceType {
        case .default: writer.writeByte(0 | low)
        case .earshot: writer.writeByte(1 | low)
        }
        switch ttl {
        case .seconds(let seconds):
            writer.writeByte(0)
            writer.write(seconds)
        case .infinite: writer.writeByte(1)
        }
    }

    /// Checked like a strategy made with ``init(discoveryMode:distanceType:ttl:lowPower:)``.
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let modes: [DiscoveryMode] = [.broadcast, .scan, .both], distances: [DistanceType] = [.default, .earshot]
        let mode = modes[Int(try reader.readTag(upTo: UInt8(modes.count - 1), of: "discovery mode"))]
        let distanceTag = try reader.readTag(upTo: 3, of: "distance type")
        let distance = distances[Int(distanceTag & 1)]
        let ttl: TTL = try reader.readTag(upTo: 1, of: "TTL") == 0 ? .seconds(try reader.read()) : .infinite
        do {
            try self.init(discoveryMode: mode, distanceType: distance, ttl: ttl, lowPower: distanceTag & 2 != 0)
        } catch {
            throw .corrupt("a strategy is invalid (\(error)), before byte \(reader.offset)")
        }
    }
}

extension BeaconRotation: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.writeBytes(key.bytes)
        writer.write(period)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let key = Array(try reader.readBytes())
        let period: Double = try reader.read()
        do {
            try self.init(key: try BeaconIdentityKey(bytes: key), period: period)
        } catch {
            throw .corrupt("a beacon rotation is invalid (\(error)), before byte \(reader.offset)")
        }
    }
}

extension MatcherCore.Publication: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(message)
        writer.write(strategy)
        writer.write(expires)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(message: try reader.read(), strategy: try reader.read(), expires: try reader.read())
    }
}

extension MatcherCore.Subscription: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(filter)
        writer.write(strategy)
        writer.write(lostTimeout)
        writer.write(expires)
        writer.write(supporters)
        writer.write(supportedBy)
        writer.write(reported)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(filter: try reader.read(), strategy: try reader.read(), lostTimeout: try reader.read(),
                  expires: try reader.read(), supporters: try reader.read(), supportedBy: try reader.read(),
                  reported: try reader.read())
    }
}

extension MatcherCore.Session: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(appID)
        writer.write(broadcasts)
        writer.write(token)
        writer.write(tokenIssued)
        writer.write(publications)
        writer.write(subscriptions)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(appID: try reader.read(), broadcasts: try reader.read(), token: try reader.read(),
                  tokenIssued: try reader.read(), publications: try reader.read(), subscriptions: try reader.read())
    }
}

extension MatcherCore.RegisteredBeacon: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(appID)
        writer.write(attachments)
        writer.write(isPublic)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(appID: try reader.read(), attachments: try reader.read(), isPublic: try reader.read())
    }
}

extension MatcherCore.TokenOwner: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(session)
        writer.write(validUntil)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(session: try reader.read(), validUntil: try reader.read())
    }
}

extension MatcherCore.Source: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        switch self {
        case .session(let id):
            writer.writeByte(0)
            writer.write(id)
        case .beacon(let id):
            writer.writeByte(1)
            writer.write(id)
        case .audio(let bytes):
            writer.writeByte(2)
            writer.write(bytes)
        }
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        switch try reader.readTag(upTo: 2, of: "source") {
        case 0: self = .session(try reader.read())
        case 1: self = .beacon(try reader.read())
        default: self = .audio(try reader.read())
        }
    }
}

extension MatcherCore.Sighting: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(last)
        writer.write(snr)
        writer.write(level)
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(last: try reader.read(), snr: try reader.read(), level: try reader.read())
    }
}

extension MatcherCore.Deadline: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.write(due)
        writer.write(sequence)
        switch kind {
        case .edgeTimeout(let observer, let source, let heardAt, let lostTimeout):
            writer.writeByte(0)
            writer.write(observer)
            writer.write(source)
            writer.write(heardAt)
            writer.write(lostTimeout)
        case .publicationExpiry(let id, let operation, let expires):
            writer.writeByte(1)
            writer.write(id)
            writer.write(operation)
            writer.write(expires)
        case .subscriptionExpiry(let id, let operation, let expires):
            writer.writeByte(2)
            writer.write(id)
            writer.write(operation)
            writer.write(expires)
        case .rotation(let id, let issuedAt):
            writer.writeByte(3)
            writer.write(id)
            writer.write(issuedAt)
        case .graceEnd(let token, let validUntil):
            writer.writeByte(4)
            writer.write(token)
            writer.write(validUntil)
        case .retiredMemoryEnd(let token, let retiredAt):
            writer.writeByte(5)
            writer.write(token)
            writer.write(retiredAt)
        }
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let due = try reader.read(Double.self), sequence = try reader.read(UInt64.self)
        let kind: Kind
        switch try reader.readTag(upTo: 5, of: "deadline") {
        case 0: kind = .edgeTimeout(observer: try reader.read(), source: try reader.read(), heardAt: try reader.read(), lostTimeout: try reader.read())
        case 1: kind = .publicationExpiry(try reader.read(), try reader.read(), expires: try reader.read())
        case 2: kind = .subscriptionExpiry(try reader.read(), try reader.read(), expires: try reader.read())
        case 3: kind = .rotation(try reader.read(), issuedAt: try reader.read())
        case 4: kind = .graceEnd(token: try reader.read(), validUntil: try reader.read())
        default: kind = .retiredMemoryEnd(token: try reader.read(), retiredAt: try reader.read())
        }
        self.init(due: due, sequence: sequence, kind: kind)
    }
}
