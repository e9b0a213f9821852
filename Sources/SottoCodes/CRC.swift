/// CRC-16 with the CCITT polynomial 0x1021, processed most significant bit first, no reflection and no final XOR,
/// from a caller-chosen initial value.
///
/// With `initial: 0` this is CRC-16/XMODEM; with `initial: 0xFFFF` it is CRC-16/CCITT-FALSE. The modem seeds the
/// register per profile so that a frame of one profile never checks under another.
///
/// ```swift
/// CRC16.checksum(Array("123456789".utf8), initial: 0)        // 0x31C3
/// ```
public enum CRC16 {
    /// The generator polynomial x^16 + x^12 + x^5 + 1, without its x^16 term.
    public static let polynomial: UInt16 = 0x1021

    /// Byte-at-a-time lookup table: the register update for each value of the high byte.
    static let table: [UInt16] = (0..<256).map { value in
        var crc = UInt16(value) << 8
        for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ polynomial : crc << 1 }
        return crc
    }

    /// The CRC of `bytes`, starting the register at `initial`.
    public static func checksum(_ bytes: some Collection<UInt8>, initial: UInt16) -> UInt16 {
        table.withUnsafeBufferPointer { table in
            var crc = initial
            for byte in bytes {
                crc = (crc << 8) ^ table[Int(UInt8(truncatingIfNeeded: crc >> 8) ^ byte)]
            }
            return crc
        }
    }
}

/// The standard (IEEE 802.3, zlib, PNG) CRC-32: reflected polynomial 0xEDB88320, initial value and final XOR
/// 0xFFFFFFFF. For longer frames than CRC-16 protects well.
///
/// ```swift
/// CRC32.checksum(Array("123456789".utf8))        // 0xCBF43926
/// ```
public enum CRC32 {
    /// The reflected generator polynomial.
    public static let reflectedPolynomial: UInt32 = 0xEDB8_8320

    /// Byte-at-a-time lookup table for the reflected register.
    static let table: [UInt32] = (0..<256).map { value in
        var crc = UInt32(value)
        for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ reflectedPolynomial : crc >> 1 }
        return crc
    }

    /// The CRC-32 of `bytes`.
    public static func checksum(_ bytes: some Collection<UInt8>) -> UInt32 {
        table.withUnsafeBufferPointer { table in
            var crc: UInt32 = 0xFFFF_FFFF
            for byte in bytes {
                crc = (crc >> 8) ^ table[Int(UInt8(truncatingIfNeeded: crc) ^ byte)]
            }
            return crc ^ 0xFFFF_FFFF
        }
    }
}
