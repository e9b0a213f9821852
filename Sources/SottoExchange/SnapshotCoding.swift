// The binary encoding of matcher snapshots, written by hand for the handful of types the core's state is made
// of: for 10 000 busy sessions (a publication, a subscription and three sightings each), synthesised Codable
// through JSONEncoder took 5.8 s to write and 5.7 s to read 40 MB, binary property lists 6.1 s and 15 s for
// 31 MB; this takes about 0.1 s and 0.25 s for 11 MB (release build). No field names, no alignment:
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

/// A value the snapshot format writes and reads.
package protocol SnapshotCodable {
    /// Appends the value's encoding.
    func write(to writer: inout SnapshotWriter)
    /// Reads a value written by `write(to:)`.
    init(from reader: inout SnapshotReader) throws(MatcherSnapshotError)
}

/// Accumulates the bytes of a snapshot.
package struct SnapshotWriter {
    /// Bytes written so far.
    package var bytes: [UInt8] = []

    /// An empty writer.
    package init() {}

    /// Appends `value`'s encoding.
    package mutating func write(_ value: some SnapshotCodable) { value.write(to: &self) }

    /// Appends one byte.
    package mutating func writeByte(_ byte: UInt8) { bytes.append(byte) }

    /// Appends `value` as a LEB128 varint: 7 bits per byte, least significant first, high bit set on all
    /// bytes but the last.
    package mutating func writeVarint(_ value: UInt64) {
        var rest = value
        while rest >= 0x80 {
            bytes.append(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        bytes.append(UInt8(rest))
    }

    /// Appends `value` as 8 bytes, little-endian.
    package mutating func writeFixed64(_ value: UInt64) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }

    /// Appends a count, then `count` bytes.
    package mutating func writeBytes(_ data: some Collection<UInt8>) {
        writeVarint(UInt64(data.count))
        bytes.append(contentsOf: data)
    }
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
    package mutating func read<T: SnapshotCodable>(_: T.Type = T.self) throws(MatcherSnapshotError) -> T { try T(from: &self) }

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

extension UInt8: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) { writer.writeByte(self) }
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self = try reader.readByte() }
}

extension UInt64: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) { writer.writeVarint(self) }
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self = try reader.readVarint() }
}

extension Int: SnapshotCodable {
    /// Zigzag: 0, -1, 1, -2... become 0, 1, 2, 3..., so small negative numbers stay short.
    package func write(to writer: inout SnapshotWriter) {
        let value = Int64(self)
        writer.writeVarint(UInt64(bitPattern: (value << 1) ^ (value >> 63)))
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let zigzag = try reader.readVarint()
        let value = Int64(bitPattern: zigzag >> 1) ^ -Int64(bitPattern: zigzag & 1)
        guard let int = Int(exactly: value) else { throw .corrupt("integer \(value) out of range, before byte \(reader.offset)") }
        self = int
    }
}

extension Double: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) { writer.writeFixed64(bitPattern) }
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self = Double(bitPattern: try reader.readFixed64()) }
}

extension Bool: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) { writer.writeByte(self ? 1 : 0) }
    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) { self = try reader.readTag(upTo: 1, of: "Bool") == 1 }
}

extension String: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) { writer.writeBytes(utf8) }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let start = reader.offset
        guard let string = String(validating: try reader.readBytes(), as: UTF8.self) else {
            throw .corrupt("a string is not UTF-8, at byte \(start)")
        }
        self = string
    }
}

// MARK: Collections

extension Optional: SnapshotCodable where Wrapped: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        if let self {
            writer.writeByte(1)
            writer.write(self)
        } else {
            writer.writeByte(0)
        }
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        self = try reader.readTag(upTo: 1, of: "Optional") == 1 ? try reader.read(Wrapped.self) : nil
    }
}

extension Array: SnapshotCodable where Element: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.writeVarint(UInt64(count))
        for element in self { writer.write(element) }
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let count = try reader.readCount()
        self = []
        reserveCapacity(count)
        for _ in 0..<count { append(try reader.read(Element.self)) }
    }
}

extension Set: SnapshotCodable where Element: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.writeVarint(UInt64(count))
        for element in self { writer.write(element) }
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let count = try reader.readCount()
        self.init(minimumCapacity: count)
        for _ in 0..<count { insert(try reader.read(Element.self)) }
    }
}

extension Dictionary: SnapshotCodable where Key: SnapshotCodable, Value: SnapshotCodable {
    package func write(to writer: inout SnapshotWriter) {
        writer.writeVarint(UInt64(count))
        for (key, value) in self {
            writer.write(key)
            writer.write(value)
        }
    }

    package init(from reader: inout SnapshotReader) throws(MatcherSnapshotError) {
        let count = try reader.readCount()
        self.init(minimumCapacity: count)
        for _ in 0..<count {
            let key = try reader.read(Key.self)
            self[key] = try reader.read(Value.self)
        }
    }
}
