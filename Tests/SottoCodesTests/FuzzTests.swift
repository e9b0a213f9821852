import SottoCodes
import Testing

@Suite struct DecoderFuzzTests {
    @Test func arbitraryLLRsNeverTrapAndGiveTheRightCount() {
        var rng = SplitMix64(seed: 0xF022)
        let specials: [Float] = [.nan, .infinity, -.infinity, 1e30, -1e30, 0, -0.0, .leastNonzeroMagnitude,
                                 .greatestFiniteMagnitude, -.greatestFiniteMagnitude]
        for trial in 0..<300 {
            let entry = allCodes[trial % allCodes.count]
            let messageBits = Int(rng.next(below: 41))
            let expected = entry.code.codedBitCount(messageBits: messageBits)
            // Mostly the right length, sometimes short or long.
            let count = trial % 5 == 0 ? Int(rng.next(below: UInt64(2 * expected + 1))) : expected
            let llrs: [Float] = (0..<count).map { _ in
                rng.next(below: 3) == 0 ? specials[Int(rng.next(below: UInt64(specials.count)))]
                    : Float(Int64(bitPattern: rng.next()) >> 40) / 1000
            }
            let decoded = entry.code.decode(llrs: llrs, messageBits: messageBits)
            #expect(decoded.count == messageBits)
            #expect(decoded.allSatisfy { $0 <= 1 })
            let listSize = 1 + Int(rng.next(below: 8))
            let list = entry.code.listCandidates(llrs: llrs, messageBits: messageBits, listSize: listSize)
            #expect(!list.isEmpty && list.count <= listSize)
            #expect(list.first?.bits == decoded)
            #expect(list.allSatisfy { $0.bits.count == messageBits && $0.metric.isFinite })
        }
    }

    @Test func nanReadsAsZero() {
        var rng = SplitMix64(seed: 1)
        let code = ConvolutionalCode.k9r12
        let message = rng.bits(40)
        var llrs = code.encode(message).map { $0 == 0 ? Float(2) : -2 }
        var zeroed = llrs
        for p in rng.distinctIndices(30, below: llrs.count) {
            llrs[p] = .nan
            zeroed[p] = 0
        }
        #expect(code.decode(llrs: llrs, messageBits: 40) == message)
        #expect(code.listDecode(llrs: llrs, messageBits: 40, listSize: 4)
                == code.listDecode(llrs: zeroed, messageBits: 40, listSize: 4))
        // All NaN: every path ties; still the right shape, still distinct candidates.
        let blank = [Float](repeating: .nan, count: code.codedBitCount(messageBits: 64))
        let list = code.listDecode(llrs: blank, messageBits: 64, listSize: 16)
        #expect(list.count == 16 && Set(list).count == 16 && list.allSatisfy { $0.count == 64 })
    }

    @Test func negativeMessageLengthDecodesNothing() {
        #expect(ConvolutionalCode.k7r12.decode(llrs: [1, 2, 3], messageBits: -4).isEmpty)
        #expect(ConvolutionalCode.k7r12.listDecode(llrs: [1, 2, 3], messageBits: -4, listSize: 2).isEmpty)
    }
}
