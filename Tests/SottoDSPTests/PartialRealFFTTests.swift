import Testing
@testable import SottoDSP

@Suite struct PartialRealFFTTests {
    /// A repeatable block of `count` values in -1...1.
    static func noise(_ count: Int, seed: UInt64) -> [Float] {
        var state = seed
        return (0..<count).map { _ in
            state = state &* 6364136223846793005 &+ 1442695040888963407
            return Float(Int64(bitPattern: state) >> 40) / Float(1 << 23)
        }
    }

    /// Largest distance between the two transforms' bins in `bins`, over the largest bin magnitude.
    static func relativeError(_ partial: PartialRealFFT, _ reference: RealFFT, bins: Range<Int>) -> Float {
        var error: Float = 0, largest: Float = 0
        for k in bins {
            let dr = partial.output[2 * k] - reference.output[2 * k], di = partial.output[2 * k + 1] - reference.output[2 * k + 1]
            error = max(error, (dr * dr + di * di).squareRoot())
            largest = max(largest, (reference.output[2 * k] * reference.output[2 * k]
                + reference.output[2 * k + 1] * reference.output[2 * k + 1]).squareRoot())
        }
        return error / largest
    }

    /// Every bin, at sizes from the smallest (one complex point) to the decoder's blocks, equals FFTW's own
    /// real transform up to float round-off.
    @Test(arguments: [2, 4, 6, 8, 10, 16, 30, 256, 4096])
    func everyBinMatchesTheRealTransform(size: Int) {
        let partial = PartialRealFFT(size: size, bins: []), reference = RealFFT(size: size)
        let block = Self.noise(size, seed: UInt64(size))
        for i in 0..<size { partial.input[i] = block[i]; reference.input[i] = block[i] }
        partial.executeAll()
        reference.execute()
        #expect(Self.relativeError(partial, reference, bins: 0..<(size / 2 + 1)) < 1e-5)
        // The input is left as it was (the bank keeps its overlap there).
        #expect((0..<size).allSatisfy { partial.input[$0] == block[$0] })
    }

    /// `execute()` computes exactly the bins asked for (overlapping and out-of-range ranges merged and
    /// clipped, ranges of any length and alignment, both ends of the spectrum) and leaves every other bin.
    @Test func onlyTheBinsAskedForAreComputed() {
        let size = 512, binCount = size / 2 + 1
        let asked = [-3..<5, 40..<47, 45..<60, 100..<101, 250..<300, 130..<130]
        let partial = PartialRealFFT(size: size, bins: asked), reference = RealFFT(size: size)
        #expect(partial.bins == [0..<5, 40..<60, 100..<101, 250..<257])
        let sentinel: Float = 12345
        for i in 0..<(2 * binCount) { partial.output[i] = sentinel }
        let block = Self.noise(size, seed: 9)
        for i in 0..<size { partial.input[i] = block[i]; reference.input[i] = block[i] }
        partial.execute()
        reference.execute()
        for range in partial.bins { #expect(Self.relativeError(partial, reference, bins: range) < 1e-5, "\(range)") }
        let untouched = (0..<binCount).filter { k in !partial.bins.contains { $0.contains(k) } }
        #expect(untouched.count == binCount - 33)
        #expect(untouched.allSatisfy { partial.output[2 * $0] == sentinel && partial.output[2 * $0 + 1] == sentinel })
    }

    /// Issue 30: the decoder's transforms can be made through throwing initialisers, so that a failure (FFTW
    /// cannot allocate or plan: out of memory) reaches the user as an error; here a size FFTW cannot take.
    @Test func transformsThatCannotBeMadeAreErrors() {
        #expect(throws: FFTError.self) { try PartialRealFFT(checkedSize: 1 << 40, bins: [0..<4]) }
        // What works through the trapping initialisers works through the throwing ones.
        let bank = try? BandDecimatorBank(checkedSampleRate: 48_000, bands: [BandSpecification(centerFrequency: 19_000, passbandHalfWidth: 1_000, minimumOutputRate: 4_000)])
        #expect(bank?.bands.count == 1)
    }
}

