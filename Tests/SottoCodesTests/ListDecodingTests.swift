import SottoCodes
import Testing

@Suite struct ListDecodingTests {
    @Test func firstCandidateIsTheViterbiPathAndMetricsDescend() {
        var rng = SplitMix64(seed: 8)
        var noise = GaussianSource(seed: 9)
        for entry in allCodes {
            for _ in 0..<20 {
                let message = rng.bits(88)
                let llrs = bpskLLRs(entry.code.encode(message), ebN0dB: 1, codeRate: 1 / Double(entry.code.rate),
                                    noise: &noise)
                let candidates = entry.code.listCandidates(llrs: llrs, messageBits: 88, listSize: 8)
                #expect(candidates.count == 8)
                #expect(candidates.first?.bits == entry.code.decode(llrs: llrs, messageBits: 88))
                #expect(Set(candidates.map(\.bits)).count == candidates.count, "candidates are distinct")
                for (a, b) in zip(candidates, candidates.dropFirst()) {
                    #expect(a.metric >= b.metric - 1e-3)
                }
                for candidate in candidates {
                    #expect(candidate.bits.count == 88)
                    let recomputed = entry.code.pathMetric(message: candidate.bits, llrs: llrs)
                    #expect(abs(candidate.metric - recomputed) <= 1e-3 * max(1, abs(recomputed)))
                }
                #expect(entry.code.listDecode(llrs: llrs, messageBits: 88, listSize: 8) == candidates.map(\.bits))
            }
        }
    }

    /// One decoder reused across messages of different lengths (longer first, so stale buffer contents would
    /// show) offers exactly the candidates a fresh decode lists, and stops at the one its check accepts.
    @Test func aReusedListDecoderMatchesFreshDecodesAndStopsWhenAccepted() {
        var rng = SplitMix64(seed: 21)
        var noise = GaussianSource(seed: 22)
        for entry in allCodes {
            var decoder = ListViterbiDecoder(code: entry.code)
            for length in [152, 8, 88, 1, 152, 40] {
                let message = rng.bits(length)
                let llrs = bpskLLRs(entry.code.encode(message), ebN0dB: 1, codeRate: 1 / Double(entry.code.rate), noise: &noise)
                let fresh = entry.code.listCandidates(llrs: llrs, messageBits: length, listSize: 8)
                var offered: [(bits: [UInt8], metric: Float)] = []
                let accepted = llrs.withUnsafeBufferPointer { llrs in
                    decoder.decode(llrs: llrs, messageBits: length, listSize: 8) { bits, metric in
                        offered.append((Array(bits), metric))
                        return false
                    }
                }
                #expect(!accepted && offered.map(\.bits) == fresh.map(\.bits) && offered.map(\.metric) == fresh.map(\.metric),
                        "\(entry.name) \(length)")
                // Accepting the third candidate ends the search there.
                guard fresh.count >= 3 else { continue }
                var seen = 0
                let third = llrs.withUnsafeBufferPointer { llrs in
                    decoder.decode(llrs: llrs, messageBits: length, listSize: 8) { bits, _ in
                        seen += 1
                        return Array(bits) == fresh[2].bits
                    }
                }
                #expect(third && seen == 3, "\(entry.name) \(length)")
            }
        }
    }

    @Test func listIsExactlyTheBestPathsByExhaustiveSearch() {
        // 10 message bits: 1024 paths, few enough to rank them all.
        let code = ConvolutionalCode.k7r12
        var noise = GaussianSource(seed: 1234)
        for _ in 0..<5 {
            let llrs = (0..<code.codedBitCount(messageBits: 10)).map { _ in Float(2 * noise.next()) }
            var all: [Float] = []
            for value in 0..<1024 {
                let message = (0..<10).map { UInt8((value >> (9 - $0)) & 1) }
                all.append(code.pathMetric(message: message, llrs: llrs))
            }
            all.sort(by: >)
            let list = code.listCandidates(llrs: llrs, messageBits: 10, listSize: 20)
            #expect(list.count == 20)
            for (candidate, expected) in zip(list, all) {
                #expect(abs(candidate.metric - expected) < 1e-3)
            }
        }
    }

    @Test func shortMessagesReturnEveryPath() {
        let list = ConvolutionalCode.k7r12.listDecode(llrs: [Float](repeating: 1, count: 20), messageBits: 2, listSize: 10)
        #expect(Set(list).count == 4)
        #expect(list.first == [0, 0])
        #expect(ConvolutionalCode.k7r12.listDecode(llrs: [], messageBits: 0, listSize: 3) == [[]])
        #expect(ConvolutionalCode.k7r12.listDecode(llrs: [1, 1], messageBits: 4, listSize: 0).isEmpty)
    }

    @Test func listContainsTheMessageMoreOftenThanViterbiFindsIt() {
        // Low SNR (1 dB BPSK, K = 7 rate 1/2, 88-bit frames): the list of 8 must hold the sent frame more often.
        let code = ConvolutionalCode.k7r12
        var rng = SplitMix64(seed: 4)
        var noise = GaussianSource(seed: 5)
        var top1 = 0, inList = 0
        let trials = 200
        for _ in 0..<trials {
            let message = rng.bits(88)
            let llrs = bpskLLRs(code.encode(message), ebN0dB: 1, codeRate: 0.5, noise: &noise)
            let list = code.listDecode(llrs: llrs, messageBits: 88, listSize: 8)
            if list.first == message { top1 += 1 }
            if list.contains(message) { inList += 1 }
        }
        #expect(top1 < trials - 20, "the SNR is low enough for Viterbi to fail often (\(top1) of \(trials))")
        #expect(inList >= top1 + 10, "list \(inList) vs top-1 \(top1) of \(trials)")
    }
}
