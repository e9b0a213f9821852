import PropertyBased
import SottoCodes
import Testing

@Suite struct ConvolutionalCodeTests {
    @Test func k7ImpulseResponseIsTheNASACode() {
        // One 1 then the six tail zeros: generator 133 taps delays 0,2,3,5,6 and 171 taps 0,1,2,3,6.
        #expect(ConvolutionalCode.k7r12.encode([1]) == [1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 0, 1, 1])
        #expect(ConvolutionalCode.k7r12.encode([0, 0]) == [UInt8](repeating: 0, count: 16))
    }

    @Test(arguments: allCodes.map(\.name))
    func freeDistanceMatchesPublishedValue(name: String) throws {
        let entry = try #require(allCodes.first { $0.name == name })
        #expect(entry.code.computedFreeDistance == entry.freeDistance)
    }

    @Test func shapes() {
        #expect(ConvolutionalCode.k7r12.rate == 2)
        #expect(ConvolutionalCode.k9r13.rate == 3)
        #expect(ConvolutionalCode.k9r12.stateCount == 256)
        #expect(ConvolutionalCode.k7r12.codedBitCount(messageBits: 88) == 188)
        #expect(ConvolutionalCode.k9r13.codedBitCount(messageBits: 88) == 288)
        for entry in allCodes {
            #expect(entry.code.encode([1, 0, 1]).count == entry.code.codedBitCount(messageBits: 3))
        }
    }

    @Test func encodingIsLinear() async {
        await propertyCheck(input: Gen.uint8(in: 0...1).array(of: 40), Gen.uint8(in: 0...1).array(of: 40)) { a, b in
            for entry in allCodes {
                let sum = zip(a, b).map { $0 ^ $1 }
                let coded = zip(entry.code.encode(a), entry.code.encode(b)).map { $0 ^ $1 }
                #expect(entry.code.encode(sum) == coded)
            }
        }
    }

    /// One `ViterbiDecoder` used for messages of changing lengths and codes (its buffers reused, shrinking
    /// and growing) decodes exactly as a fresh `decode` does, noisy LLRs included.
    @Test func reusedViterbiDecoderMatchesAFreshDecode() {
        var state: UInt64 = 12_345
        func next() -> Float {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Float(state >> 40) / Float(1 << 24) - 0.5
        }
        for entry in allCodes {
            var decoder = ViterbiDecoder(code: entry.code)
            var bits = [UInt8](repeating: 9, count: 200)
            for length in [152, 8, 88, 1, 152, 40] {
                let message = (0..<length).map { _ in UInt8(next() > 0 ? 1 : 0) }
                let llrs = entry.code.encode(message).map { ($0 == 0 ? Float(1) : -1) + 2.5 * next() }
                llrs.withUnsafeBufferPointer { llrs in
                    bits.withUnsafeMutableBufferPointer { decoder.decode(llrs: llrs, messageBits: length, into: $0) }
                }
                #expect(Array(bits[0..<length]) == entry.code.decode(llrs: llrs, messageBits: length), "\(entry.name) \(length)")
            }
        }
    }

    @Test func noiselessRoundTrip() async {
        await propertyCheck(count: 40, input: Gen.uint8(in: 0...1).array(of: 8...152)) { message in
            for entry in allCodes {
                let llrs = entry.code.encode(message).map { $0 == 0 ? Float(4) : -4 }
                #expect(entry.code.decode(llrs: llrs, messageBits: message.count) == message, "\(entry.name)")
            }
        }
    }

    @Test(arguments: allCodes.map(\.name))
    func correctsAnyPatternWithinHalfTheFreeDistance(name: String) throws {
        // Hard-decision Viterbi is maximum likelihood for a binary symmetric channel, and the zero-tail code's
        // minimum distance is the free distance: any (dfree − 1) / 2 errors, anywhere, must be corrected.
        let entry = try #require(allCodes.first { $0.name == name })
        let correctable = (entry.freeDistance - 1) / 2
        var rng = SplitMix64(seed: 0xC0DE)
        for trial in 0..<60 {
            let message = rng.bits(8 + Int(rng.next(below: 145)))
            var coded = entry.code.encode(message)
            for position in rng.distinctIndices(correctable, below: coded.count) { coded[position] ^= 1 }
            let llrs = coded.map { $0 == 0 ? Float(1) : -1 }
            #expect(entry.code.decode(llrs: llrs, messageBits: message.count) == message, "trial \(trial)")
        }
    }

    @Test func correctsScatteredGroupsOfErrors() {
        // K = 7, rate 1/2: groups of 4 errors, groups 60 trellis steps apart, 152-bit messages.
        let code = ConvolutionalCode.k7r12
        var rng = SplitMix64(seed: 77)
        for _ in 0..<30 {
            let message = rng.bits(152)
            var coded = code.encode(message)
            for start in stride(from: 0, to: coded.count - 20, by: 120) {
                for offset in rng.distinctIndices(4, below: 20) { coded[start + offset] ^= 1 }
            }
            let llrs = coded.map { $0 == 0 ? Float(1) : -1 }
            #expect(code.decode(llrs: llrs, messageBits: 152) == message)
        }
    }

    @Test func sixErrorsInOneWindowCanDefeatK7() {
        // The bound is tight: the codeword of a single 1 differs from all-zeros in 10 places; sending zeros and
        // flipping 6 of those places makes the single-1 message the closer codeword.
        let code = ConvolutionalCode.k7r12
        let zeros = [UInt8](repeating: 0, count: 20)
        var message = zeros
        message[5] = 1
        let codeword = code.encode(message)
        var received = [UInt8](repeating: 0, count: codeword.count)
        var flipped = 0
        for i in codeword.indices where codeword[i] == 1 && flipped < 6 {
            received[i] = 1
            flipped += 1
        }
        let llrs = received.map { $0 == 0 ? Float(1) : -1 }
        #expect(code.decode(llrs: llrs, messageBits: 20) == message)
    }

    @Test func erasuresAreHarmlessWithoutNoise() {
        var rng = SplitMix64(seed: 5)
        for entry in allCodes {
            let message = rng.bits(88)
            var llrs = entry.code.encode(message).map { $0 == 0 ? Float(3) : -3 }
            for position in rng.distinctIndices(llrs.count / 4, below: llrs.count) { llrs[position] = 0 }
            #expect(entry.code.decode(llrs: llrs, messageBits: 88) == message, "\(entry.name)")
        }
    }

    @Test func softDecisionBeatsHardDecisionOnAWGN() {
        // BPSK, Eb/N0 = 3 dB, 64-bit frames: soft Viterbi gains about 2 dB over hard decisions.
        let code = ConvolutionalCode.k7r12
        var rng = SplitMix64(seed: 2024)
        var noise = GaussianSource(seed: 99)
        var softErrors = 0, hardErrors = 0
        let trials = 300
        for _ in 0..<trials {
            let message = rng.bits(64)
            let llrs = bpskLLRs(code.encode(message), ebN0dB: 3, codeRate: 0.5, noise: &noise)
            if code.decode(llrs: llrs, messageBits: 64) != message { softErrors += 1 }
            let hard = llrs.map { $0 >= 0 ? Float(1) : -1 }
            if code.decode(llrs: hard, messageBits: 64) != message { hardErrors += 1 }
        }
        #expect(hardErrors > 30)
        #expect(3 * softErrors < hardErrors, "soft \(softErrors) vs hard \(hardErrors) frame errors of \(trials)")
    }

    @Test func strongerCodesDoBetterAtTheSameEbN0() {
        // At 2 dB the rate 1/3, K = 9 code (dfree 18) must beat the rate 1/2, K = 7 code (dfree 10).
        var rng = SplitMix64(seed: 31)
        var noise = GaussianSource(seed: 32)
        var weak = 0, strong = 0
        for _ in 0..<300 {
            let message = rng.bits(88)
            let a = bpskLLRs(ConvolutionalCode.k7r12.encode(message), ebN0dB: 2, codeRate: 0.5, noise: &noise)
            if ConvolutionalCode.k7r12.decode(llrs: a, messageBits: 88) != message { weak += 1 }
            let b = bpskLLRs(ConvolutionalCode.k9r13.encode(message), ebN0dB: 2, codeRate: 1.0 / 3, noise: &noise)
            if ConvolutionalCode.k9r13.decode(llrs: b, messageBits: 88) != message { strong += 1 }
        }
        #expect(strong < weak, "K9r13 \(strong) vs K7r12 \(weak) frame errors")
    }

    @Test func pathMetricIsTheCorrelation() {
        let code = ConvolutionalCode.k7r12
        let message: [UInt8] = [1, 0, 1]
        let coded = code.encode(message)
        let llrs: [Float] = coded.indices.map { Float($0 + 1) }
        let expected = coded.indices.reduce(Float(0)) { $0 + (coded[$1] == 0 ? 1 : -1) * Float($1 + 1) / 2 }
        #expect(code.pathMetric(message: message, llrs: llrs) == expected)
    }
}
