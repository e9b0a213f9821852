import SottoDSP
import Testing

/// Splits `x` into pieces of pseudo-random lengths (1 to `longest` samples), the same for a seed.
private func pieces(_ x: [Float], longest: Int, seed: UInt64) -> [[Float]] {
    var state = seed
    var result: [[Float]] = []
    var index = 0
    while index < x.count {
        state = state &* 6364136223846793005 &+ 1442695040888963407
        let length = 1 + Int((state >> 33) % UInt64(longest))
        result.append(Array(x[index..<min(x.count, index + length)]))
        index += length
    }
    return result
}

private func noise(_ count: Int, seed: UInt64) -> [Float] {
    var state = seed
    return (0..<count).map { _ in
        state = state &* 6364136223846793005 &+ 1442695040888963407
        return Float(Int64(bitPattern: state) >> 40) / Float(1 << 23)
    }
}

@Suite struct StreamingDSPTests {
    /// Overlap-add in blocks gives the whole-buffer convolution, whatever the pieces the signal comes in.
    @Test(arguments: [(1, 100_000), (700, 5_000), (20_000, 70_000)])
    func overlapAddEqualsWholeConvolution(responseLength: Int, signalLength: Int) throws {
        let h = noise(responseLength, seed: 3), x = noise(signalLength, seed: 4)
        let whole = try fftConvolve(x, h)
        let convolver = try OverlapAddConvolver(response: h, minimumBlock: 4_096)
        var streamed: [Float] = []
        for piece in pieces(x, longest: 9_000, seed: 5) { streamed += convolver.process(piece) }
        streamed += convolver.finish()
        #expect(streamed.count == whole.count)
        let peak = whole.map(abs).max()!
        let worst = zip(streamed, whole).map { abs($0 - $1) }.max()!
        #expect(worst < 1e-5 * peak * Float(responseLength).squareRoot(), "largest difference \(worst) of a peak of \(peak)")
    }

    /// The streaming resampler is the whole-buffer one, bit for bit, for ratios up and down.
    @Test(arguments: [1.000_3, 0.999_7, 44_100.0 / 48_000, 48_000.0 / 44_100, 2.5, 0.125])
    func streamingResamplerIsBitExact(ratio: Double) {
        let x = noise(30_011, seed: 9)
        let whole = Resampler.resample(x, ratio: ratio)
        var resampler = StreamingResampler(ratio: ratio)
        var streamed: [Float] = []
        for piece in pieces(x, longest: 3_000, seed: 11) { streamed += resampler.process(piece) }
        streamed += resampler.finish()
        #expect(streamed.count == whole.count)
        #expect(streamed == whole)
    }

    /// A transform that cannot be made is an error, not the end of the program.
    @Test func impossibleTransformsAreErrors() {
        #expect(throws: FFTError.self) { try RealFFT(checkedSize: 0) }
        #expect(throws: FFTError.self) { try InverseRealFFT(checkedSize: 1 << 40) }
        #expect(throws: FFTError.self) { try ComplexFFT(checkedSize: -4, direction: .forward) }
        #expect((try? RealFFT(checkedSize: 4_096))?.size == 4_096)
    }
}
