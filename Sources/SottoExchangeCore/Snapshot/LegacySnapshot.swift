// The hand-written binary format of matcher snapshots (format 4 and the replica's registry format 1), read
// only: snapshots an older build left in a cluster's database. This build writes protobuf
// (matcher_snapshot.proto, format 5). No field names, no alignment:
//
// - unsigned integers: LEB128 varints; signed integers: zigzag, then LEB128;
// - Double: its IEEE 754 bit pattern, 8 bytes little-endian (exact, NaN and -0 included);
// - Bool: one byte, 0 or 1; enums: a one-byte tag, then the case's values in order;
// - String: UTF-8 length (varint), then the bytes; [UInt8]: count, then the bytes;
// - arrays and sets: count, then the elements; dictionaries: count, then key, value, key, value...;
// - Optional: one byte (0: nil, 1: a value follows), then the value;
// - structs: their fields in declaration order.
//
// Reading never traps: every read checks what is left and throws `MatcherSnapshotError.corrupt`.

import HeapModule

/// A value of the hand-written snapshot format (format 4), read from an older build's snapshot.
package protocol LegacySnapshotDecodable {
    /// Reads a value of the hand-written format.
    init(from reader: inout SnapshotReader) throws(MatcherSnapshotError)
}

/// Reads the bytes of a snapshot from a start offset to the end, throwing on anything malformed.
package struct SnapshotReader {
    /// The whole snapshot.
    let bytes: [UInt8]
    /// Where the next read starts.
    private(set) var offset: Int
    /// Longest LEB128 encoding of a 64-bit value (bytes).
    static let maxVarintLength = 10

    /// A reader of `bytes` from `offset` on.
    package init(_ bytes: [UInt8], from offset: Int) {
        self.bytes = bytes
        self.offset = offset
    }

    /// Bytes not read yet.
    package var remaining: Int { bytes.count - offset }

    /// Reads a value of type `T`.
    package mutating func read<T: LegacySnapshotDecodable>(_: T.Type = T.self) throws(MatcherSnapshotError) -> T { try T(from: &self) }

    /// Reads one byte.
    package mutating func readByte() throws(MatcherSnapshotError) -> UInt8 {
        guard offset < bytes.count else { throw .corrupt("the state ends early, at byte \(offset)") }
        defer { offset += 1 }
        return bytes[offset]
    }

    /// Reads a LEB128 varint.
    package mutating func readVarint() throws(MatcherSnapshotError) -> UInt64 {
        var value: UInt64 = 0
        for index in 0..<Self.maxVarintLength {
            let byte = try readByte()
            let bits = UInt64(byte & 0x7F)
            // The tenth byte holds the 64th bit only.
            guard index < Self.maxVarintLength - 1 || bits <= 1 else { break }
            value |= bits << (7 * UInt64(index))
            if byte & 0x80 == 0 { return value }
        }
        throw .corrupt("a number is too long, before byte \(offset)")
    }

    /// Reads 8 bytes, little-endian.
    package mutating func readFixed64() throws(MatcherSnapshotError) -> UInt64 {
        guard remaining >= MemoryLayout<UInt64>.size else { throw .corrupt("the state ends early, at byte \(offset)") }
        var value: UInt64 = 0
        for index in 0..<MemoryLayout<UInt64>.size { value |= UInt64(bytes[offset + index]) << (8 * UInt64(index)) }
        offset += MemoryLayout<UInt64>.size
        return value
    }

    /// Reads a count of items that take at least one byte each: no more than the bytes left, so a damaged
    /// count can never make the reader reserve memory without bound.
    package mutating func readCount() throws(MatcherSnapshotError) -> Int {
        let count = try readVarint()
        guard count <= UInt64(remaining) else { throw .corrupt("a count of \(count) with \(remaining) bytes left, at byte \(offset)") }
        return Int(count)
    }

    /// Reads a count, then that many bytes.
    package mutating func readBytes() throws(MatcherSnapshotError) -> ArraySlice<UInt8> {
        let count = try readCount()
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    /// Reads an enum tag no greater than `last`.
    package mutating func readTag(upTo last: UInt8, of type: String) throws(MatcherSnapshotError) -> UInt8 {
        let tag = try readByte()
        guard tag <= last else { throw .corrupt("unknown \(type) \(tag), at byte \(offset - 1)") }
        return tag
    }
}

// MARK: Primitives

extension UInt8: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self = try reader.readByte() }
}

extension UInt64: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self = try reader.readVarint() }
}

extension Int: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let zigzag = try reader.readVarint()
        let value = Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1)
        guard let int = Int(exactly: value) else { throw .corrupt("integer \(value) out of range, before byte \(reader.offset)") }
        self = int
    }
}

extension Double: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self = Double(bitPattern: try reader.readFixed64()) }
}

extension Bool: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self = try reader.readTag(upTo: 1, of: "Bool") == 1 }
}

extension String: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let start = reader.offset
        guard let string = String(validating: try reader.readBytes(), as: UTF8.self) else {
            throw .corrupt("a string is not UTF-8, at byte \(start)")
        }
        self = string
    }
}

// MARK: Collections

extension Optional: LegacySnapshotDecodable where Wrapped: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self = try reader.readTag(upTo: 1, of: "Optional") == 1 ? try reader.read(Wrapped.self) : nil
    }
}

extension Array: LegacySnapshotDecodable where Element: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let count = try reader.readCount()
        self = []
        reserveCapacity(count)
        for _ in 0..<count { append(try reader.read(Element.self)) }
    }
}

extension Set: LegacySnapshotDecodable where Element: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let count = try reader.readCount()
        self.init(minimumCapacity: count)
        for _ in 0..<count { insert(try reader.read(Element.self)) }
    }
}

extension Dictionary: LegacySnapshotDecodable where Key: LegacySnapshotDecodable, Value: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let count = try reader.readCount()
        self.init(minimumCapacity: count)
        for _ in 0..<count {
            let key = try reader.read(Key.self)
            self[key] = try reader.read(Value.self)
        }
    }
}

// MARK: The core's state (format 4): token length, rotation interval, rotation grace, sessions, beacons,
// rotations, token owners, retired tokens, sightings, hearers, the matching deadlines and the token deadlines
// (each heap's elements as an array, in the heap's storage order), the deadline sequence and the turns.

extension MatcherCore {
    /// A core in the state of a format-4 snapshot, whose header (at the start of `bytes`) was checked.
    init(legacyState bytes: [UInt8], from offset: Int, generator: any RandomNumberGenerator & Sendable) throws(MatcherSnapshotError) {
        var reader = SnapshotReader(bytes, from: offset)
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
        guard reader.remaining == 0 else { throw .corrupt("\(reader.remaining) bytes after the state") }
    }
}

// MARK: The state's types (fields in declaration order; enum tags in case order)

/// The turns are part of the replicated state: every replica of a cluster, restored or not, plans the same
/// rounds for the same hearings.
extension BroadcastCoordinator: LegacySnapshotDecodable {
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
        try validateRestoredTimes()
    }
}

extension SessionID: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self.init(try reader.read(String.self)) }
}

extension OperationID: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self.init(try reader.read(Int.self)) }
}

extension Message: LegacySnapshotDecodable {
    /// As the core holds it: checked when it entered the core (the reserved namespace is the core's own).
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(delivered: try reader.read(), type: try reader.read(), content: try reader.read())
    }
}

extension MessageFilter: LegacySnapshotDecodable {
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

extension Strategy: LegacySnapshotDecodable {
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

extension BeaconRotation: LegacySnapshotDecodable {
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

extension MatcherCore.Publication: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(message: try reader.read(), strategy: try reader.read(), expires: try reader.read())
    }
}

extension MatcherCore.Subscription: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(filter: try reader.read(), strategy: try reader.read(), lostTimeout: try reader.read(),
                  expires: try reader.read(), supporters: try reader.read(), supportedBy: try reader.read(),
                  reported: try reader.read())
    }
}

extension MatcherCore.Session: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(appID: try reader.read(), broadcasts: try reader.read(), token: try reader.read(),
                  tokenIssued: try reader.read(), publications: try reader.read(), subscriptions: try reader.read())
    }
}

extension MatcherCore.RegisteredBeacon: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(appID: try reader.read(), attachments: try reader.read(), isPublic: try reader.read())
    }
}

extension MatcherCore.TokenOwner: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(session: try reader.read(), validUntil: try reader.read())
    }
}

extension MatcherCore.Source: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        switch try reader.readTag(upTo: 2, of: "source") {
        case 0: self = .session(try reader.read())
        case 1: self = .beacon(try reader.read())
        default: self = .audio(try reader.read())
        }
    }
}

extension MatcherCore.Sighting: LegacySnapshotDecodable {
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self.init(last: try reader.read(), snr: try reader.read(), level: try reader.read())
    }
}

extension MatcherCore.Deadline: LegacySnapshotDecodable {
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
