import Foundation
import PropertyBased
import SottoCodes
import Testing

@Suite struct SplitMix64Tests {
    @Test func referenceOutputs() {
        // Reference sequence for seed 0 (Vigna's splitmix64.c).
        var rng = SplitMix64(seed: 0)
        #expect(rng.next() == 0xE220_A839_7B1D_CDAF)
        #expect(rng.next() == 0x6E78_9E6A_A1B9_65F4)
        #expect(rng.next() == 0x06C4_5D18_8009_454F)
    }

    @Test func boundedValuesStayInRangeAndCoverIt() {
        var rng = SplitMix64(seed: 3)
        var seen = Set<UInt64>()
        for _ in 0..<1000 {
            let value = rng.next(below: 7)
            #expect(value < 7)
            seen.insert(value)
        }
        #expect(seen.count == 7)
    }
}

@Suite struct InterleaverTests {
    @Test func isAPermutationAndInverts() async {
        await propertyCheck(input: Gen.int(in: 0...400), Gen.uint64()) { count, seed in
            let interleaver = Interleaver(count: count, seed: seed)
            #expect(interleaver.permutation.sorted() == Array(0..<count))
            let values = (0..<count).map { $0 * 7 + 1 }
            #expect(interleaver.deinterleave(interleaver.interleave(values)) == values)
            #expect(interleaver.interleave(interleaver.deinterleave(values)) == values)
            let out = interleaver.interleave(values)
            for i in 0..<count { #expect(out[i] == values[interleaver.permutation[i]]) }
        }
    }

    @Test func isDeterministicAndPinned() {
        // Pinned so that a transmitter and a receiver built anywhere agree.
        #expect(Interleaver(count: 10, seed: 1).permutation == Interleaver(count: 10, seed: 1).permutation)
        #expect(Interleaver(count: 10, seed: 1).permutation == [9, 0, 1, 4, 8, 2, 3, 7, 6, 5])
        #expect(Interleaver(count: 188, seed: 1).permutation != Interleaver(count: 188, seed: 2).permutation)
    }

    @Test func spreadsNeighbours() {
        // Adjacent outputs (the 4 bits of one symbol) come from code positions far apart on average.
        let interleaver = Interleaver(count: 188, seed: 0x5077_0F00 &+ 188)
        let gaps = zip(interleaver.permutation, interleaver.permutation.dropFirst()).map { abs($0 - $1) }
        #expect(Double(gaps.reduce(0, +)) / Double(gaps.count) > 30)
    }
}

@Suite struct SymbolDemapperTests {
    /// Exact reference in Double.
    func reference(_ values: [Float], bitsPerSymbol: Int) -> [Double] {
        (0..<bitsPerSymbol).map { b in
            let shift = bitsPerSymbol - 1 - b
            func lse(_ bit: Int) -> Double {
                let group = values.indices.filter { ($0 >> shift) & 1 == bit }.map { Double(values[$0]) }
                let top = group.max()!
                return top + Foundation.log(group.reduce(0) { $0 + exp($1 - top) })
            }
            return lse(0) - lse(1)
        }
    }

    func demap(_ values: [Float], bitsPerSymbol: Int) -> [Float] {
        var out = [Float](repeating: .nan, count: bitsPerSymbol + 2)
        values.withUnsafeBufferPointer {
            SymbolDemapper.bitLLRs(symbolLogLikelihoods: $0, bitsPerSymbol: bitsPerSymbol, into: &out, at: 1)
        }
        #expect(out[0].isNaN && out[bitsPerSymbol + 1].isNaN, "writes only its own range")
        return Array(out[1...bitsPerSymbol])
    }

    @Test(arguments: 1...5)
    func matchesExactLogSumExp(bitsPerSymbol: Int) {
        var noise = GaussianSource(seed: UInt64(bitsPerSymbol))
        for _ in 0..<50 {
            let values = (0..<(1 << bitsPerSymbol)).map { _ in Float(3 * noise.next()) }
            let got = demap(values, bitsPerSymbol: bitsPerSymbol)
            for (g, r) in zip(got, reference(values, bitsPerSymbol: bitsPerSymbol)) {
                #expect(abs(Double(g) - r) < 1e-4 * max(1, abs(r)))
            }
        }
    }

    @Test func signsFollowTheDominantSymbol() {
        var rng = SplitMix64(seed: 12)
        var noise = GaussianSource(seed: 13)
        for _ in 0..<100 {
            let sent = Int(rng.next(below: 16))
            var values = (0..<16).map { _ in Float(noise.next()) }
            values[sent] = 12
            let llrs = demap(values, bitsPerSymbol: 4)
            for b in 0..<4 {
                let bit = (sent >> (3 - b)) & 1
                #expect(bit == 0 ? llrs[b] > 0 : llrs[b] < 0)
            }
        }
    }

    @Test func hugeAndNonFiniteValuesStayFinite() {
        let cases: [[Float]] = [
            [1e4] + [Float](repeating: -1e4, count: 15),
            [Float](repeating: 0, count: 15) + [1e4],
            [3e38, -3e38] + [Float](repeating: 0, count: 14),
            [.infinity] + [Float](repeating: -.infinity, count: 15),
            [Float](repeating: -.infinity, count: 8) + [5] + [Float](repeating: -.infinity, count: 7),
            [Float](repeating: .nan, count: 16),
            [Float](repeating: -.infinity, count: 16),
            [.nan, 1e4, .infinity, -.infinity] + [Float](repeating: 1e-30, count: 12),
        ]
        for values in cases {
            let llrs = demap(values, bitsPerSymbol: 4)
            #expect(llrs.allSatisfy { $0.isFinite && abs($0) <= LLR.limit }, "\(values) -> \(llrs)")
        }
        // Symbol 0 at 1e4 over the rest at −1e4: every bit is a confident 0.
        #expect(demap(cases[0], bitsPerSymbol: 4).allSatisfy { $0 >= 1e4 - 1 })
        // Symbol 15 at 1e4 over zeros: LLR ≈ −(1e4 − log 8).
        for llr in demap(cases[1], bitsPerSymbol: 4) { #expect(abs(llr + (1e4 - Float(Foundation.log(8.0)))) < 1) }
        // Only symbol 8 (1000) possible.
        #expect(demap(cases[4], bitsPerSymbol: 4) == [-LLR.limit, LLR.limit, LLR.limit, LLR.limit])
        // Nothing possible: no information.
        #expect(demap(cases[5], bitsPerSymbol: 4) == [0, 0, 0, 0])
    }

    @Test func equalLikelihoodsGiveZero() {
        #expect(demap([Float](repeating: 7, count: 16), bitsPerSymbol: 4).allSatisfy { abs($0) < 1e-6 })
    }
}
