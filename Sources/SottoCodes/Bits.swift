/// Conversion between bytes and bit arrays (one `UInt8` per bit, value 0 or 1), most significant bit first.
///
/// ```swift
/// Bits.unpack([0x80])                    // [1, 0, 0, 0, 0, 0, 0, 0]
/// Bits.pack([1, 0, 0, 0, 0, 0, 0, 1])    // [0x81]
/// ```
public enum Bits {
    /// Expands bytes into bits, most significant bit first: `0x80` becomes `[1, 0, 0, 0, 0, 0, 0, 0]`.
    /// - Returns: `8 * bytes.count` values, each 0 or 1.
    public static func unpack(_ bytes: some Collection<UInt8>) -> [UInt8] {
        let total = 8 * bytes.count
        return [UInt8](unsafeUninitializedCapacity: total) { buffer, initialized in
            var i = 0
            for byte in bytes {
                for shift in stride(from: 7, through: 0, by: -1) {
                    buffer[i] = (byte >> UInt8(shift)) & 1
                    i += 1
                }
            }
            initialized = i
        }
    }

    /// Packs bits (most significant bit first) into bytes; the inverse of ``unpack(_:)``.
    ///
    /// Only the lowest bit of each element is used.
    /// - Precondition: `bits.count` is a multiple of 8.
    public static func pack(_ bits: some Collection<UInt8>) -> [UInt8] {
        precondition(bits.count % 8 == 0, "Bits.pack needs a multiple of 8 bits, got \(bits.count)")
        return [UInt8](unsafeUninitializedCapacity: bits.count / 8) { buffer, initialized in
            initialized = pack(bits, into: buffer)
        }
    }

    /// ``pack(_:)`` into `bytes` without allocating; returns the number of bytes written (`bits.count / 8`).
    /// - Precondition: `bits.count` is a multiple of 8 and `bytes` holds `bits.count / 8`.
    @discardableResult
    public static func pack(_ bits: some Collection<UInt8>, into bytes: UnsafeMutableBufferPointer<UInt8>) -> Int {
        precondition(bits.count % 8 == 0 && bytes.count >= bits.count / 8,
                     "Bits.pack: \(bits.count) bits into \(bytes.count) bytes")
        var byte: UInt8 = 0
        var filled = 0
        var i = 0
        for bit in bits {
            byte = byte << 1 | (bit & 1)
            filled += 1
            if filled == 8 {
                bytes[i] = byte
                i += 1
                byte = 0
                filled = 0
            }
        }
        return i
    }
}
