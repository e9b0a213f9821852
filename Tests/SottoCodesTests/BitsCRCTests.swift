import PropertyBased
import SottoCodes
import Testing

@Suite struct BitsTests {
    @Test func unpackIsMostSignificantBitFirst() {
        #expect(Bits.unpack([0x80]) == [1, 0, 0, 0, 0, 0, 0, 0])
        #expect(Bits.unpack([0x01, 0xA5]) == [0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 0, 1, 0, 1])
        #expect(Bits.unpack([UInt8]()) == [])
        #expect(Bits.pack([1, 0, 0, 0, 0, 0, 0, 1]) == [0x81])
    }

    @Test func roundTrips() async {
        await propertyCheck(input: Gen.uint8().array(of: 0...32)) { bytes in
            let bits = Bits.unpack(bytes)
            #expect(bits.count == 8 * bytes.count)
            #expect(bits.allSatisfy { $0 <= 1 })
            #expect(Bits.pack(bits) == bytes)
        }
    }

    @Test func packUsesOnlyTheLowestBit() {
        #expect(Bits.pack([3, 2, 2, 2, 2, 2, 2, 5]) == [0x81])
    }
}

@Suite struct CRCTests {
    let check = Array("123456789".utf8)

    @Test func crc16KnownVectors() {
        #expect(CRC16.checksum(check, initial: 0) == 0x31C3)        // CRC-16/XMODEM
        #expect(CRC16.checksum(check, initial: 0xFFFF) == 0x29B1)   // CRC-16/CCITT-FALSE
        #expect(CRC16.checksum(check, initial: 0x1D0F) == 0xE5CC)   // CRC-16/SPI-FUJITSU (AUG-CCITT)
        #expect(CRC16.checksum([UInt8](), initial: 0xBEEF) == 0xBEEF)
    }

    @Test func crc16AcceptsSlicesAndOtherCollections() {
        let padded = [0xAA] + check + [0x55]
        #expect(CRC16.checksum(padded[1..<10], initial: 0) == 0x31C3)
        #expect(CRC16.checksum("123456789".utf8, initial: 0) == 0x31C3)
    }

    @Test func crc32KnownVectors() {
        #expect(CRC32.checksum(check) == 0xCBF4_3926)
        #expect(CRC32.checksum([UInt8]()) == 0)
        #expect(CRC32.checksum(Array("a".utf8)) == 0xE8B7_BE43)
    }

    @Test func appendingTheCRC16LeavesAZeroResidue() async {
        await propertyCheck(input: Gen.uint8().array(of: 0...24), Gen.uint16()) { bytes, initial in
            let crc = CRC16.checksum(bytes, initial: initial)
            #expect(CRC16.checksum(bytes + [UInt8(crc >> 8), UInt8(crc & 0xFF)], initial: initial) == 0)
        }
    }

    @Test func differentInitialValuesSeparateProfiles() {
        // A frame checked under one seed fails under another (the modem's per-profile seeding).
        let frame: [UInt8] = [0x12, 1, 2, 3, 4, 5, 6, 7, 8]
        #expect(CRC16.checksum(frame, initial: 0x1D0F) != CRC16.checksum(frame, initial: 0x1D0F &+ 0x3B71))
    }

    @Test func crc16DetectsEverySingleAndDoubleBitError() {
        let frame = Bits.unpack([0x42, 0x10, 0x99, 0xFE, 0x00, 0x31, 0x7A, 0x5C, 0xC3])
        let good = CRC16.checksum(Bits.pack(frame), initial: 0xFFFF)
        for i in frame.indices {
            for j in i..<frame.count {
                var corrupted = frame
                corrupted[i] ^= 1
                if j != i { corrupted[j] ^= 1 }
                #expect(CRC16.checksum(Bits.pack(corrupted), initial: 0xFFFF) != good)
            }
        }
    }
}
