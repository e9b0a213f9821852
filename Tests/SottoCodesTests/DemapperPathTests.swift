@testable import SottoCodes
import Testing

/// The 16-ary demapper (Double sums, the frame's symbols) against the general loop (Float sums, any size).
@Suite struct DemapperPathTests {
    func general(_ values: [Float]) -> [Float] {
        var out = [Float](repeating: .nan, count: 4)
        values.withUnsafeBufferPointer { SymbolDemapper.bitLLRsAnySize(symbolLogLikelihoods: $0, bitsPerSymbol: 4, into: &out, at: 0) }
        return out
    }

    func sixteenAry(_ values: [Float]) -> [Float] {
        var out = [Float](repeating: .nan, count: 4)
        values.withUnsafeBufferPointer { SymbolDemapper.bitLLRs(symbolLogLikelihoods: $0, bitsPerSymbol: 4, into: &out, at: 0) }
        return out
    }

    /// Spreads from a fraction of a nat (noise) to thousands (a clean symbol). Up to ~690 nats between a bit's
    /// two sides the 16-ary path's Double sums hold (the general loop's Float sums underflow from ~69 and take
    /// its second pass); beyond, the 16-ary path hands the symbol to the general loop, and these check that.
    @Test(arguments: [0.3, 3, 30, 100, 300, 1_000, 3_000] as [Float])
    func agreesWithTheGeneralLoop(spread: Float) {
        var noise = GaussianSource(seed: UInt64(spread * 10))
        var rng = SplitMix64(seed: UInt64(spread * 10) + 1)
        for _ in 0..<200 {
            var values = (0..<16).map { _ in spread * Float(noise.next()) }
            // A dominant symbol, as in a frame.
            values[Int(rng.next(below: 16))] += spread * 3
            let fast = sixteenAry(values), slow = general(values)
            for (f, s) in zip(fast, slow) {
                #expect(abs(f - s) <= 1e-4 * max(1, abs(s)), "\(values): \(fast) against \(slow)")
            }
        }
    }
}
