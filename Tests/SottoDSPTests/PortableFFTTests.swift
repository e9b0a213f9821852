import Testing
@testable import SottoDSP

/// The WebAssembly build's FFT (`PortableFFT`, Swift) against FFTW's (`ComplexFFT` natively), bin by bin.
@Suite struct PortableFFTTests {
    /// Every size of the form 2^a 3^b 5^c up to `limit` (the receiver's sizes are all of this form: `fastFFTSize`).
    static func smoothSizes(upTo limit: Int) -> [Int] { (1...limit).filter { isSmoothFFTSize($0) } }

    /// Largest distance between the two outputs' bins, over the root-mean-square bin magnitude.
    static func relativeError(size: Int, direction: FFTDirection, seed: UInt64) -> Float {
        let portable = PortableFFT(size: size, direction: direction)
        let reference = ComplexFFT(size: size, direction: direction)
        let block = PartialRealFFTTests.noise(2 * size, seed: seed)
        for i in 0..<(2 * size) { portable.input[i] = block[i]; reference.input[i] = block[i] }
        portable.execute()
        reference.execute()
        var error: Float = 0, energy: Float = 0
        for k in 0..<size {
            let dr = portable.output[2 * k] - reference.output[2 * k], di = portable.output[2 * k + 1] - reference.output[2 * k + 1]
            error = max(error, (dr * dr + di * di).squareRoot())
            energy += reference.output[2 * k] * reference.output[2 * k] + reference.output[2 * k + 1] * reference.output[2 * k + 1]
        }
        return error / (energy / Float(size)).squareRoot()
    }

    /// Every smooth size up to 16 384, both directions: FFTW's bins up to float round-off.
    @Test(arguments: [FFTDirection.forward, .inverse])
    func everySmoothSizeMatchesFFTW(direction: FFTDirection) {
        for size in Self.smoothSizes(upTo: 16_384) {
            let error = Self.relativeError(size: size, direction: direction, seed: UInt64(size))
            #expect(error < 2e-6, "size \(size): \(error)")
        }
    }

    /// Sizes with other prime factors (a direct DFT of that radix): still FFTW's bins.
    @Test(arguments: [7, 11, 13, 14, 49, 77, 121, 210, 1001, 2 * 4 * 7 * 11])
    func otherPrimeFactorsMatchFFTW(size: Int) {
        #expect(Self.relativeError(size: size, direction: .forward, seed: 3) < 1e-5)
        #expect(Self.relativeError(size: size, direction: .inverse, seed: 4) < 1e-5)
    }

    /// A second run on the same input gives the same output (no state left between runs), and an impulse
    /// gives a flat spectrum.
    @Test func repeatableAndExact() {
        let fft = PortableFFT(size: 432, direction: .forward)
        fft.input[2] = 1  // x[1] = 1: X[k] = exp(-2 pi i k / n), magnitude 1
        fft.execute()
        let first = Array(fft.output)
        fft.execute()
        #expect(Array(fft.output) == first)
        #expect(fft.input[2] == 1 && fft.input[0] == 0)  // the input is left as it was
        for k in 0..<432 {
            let magnitude = (first[2 * k] * first[2 * k] + first[2 * k + 1] * first[2 * k + 1]).squareRoot()
            #expect(abs(magnitude - 1) < 1e-6)
        }
    }

    /// The real transforms the wasm build's `RealFFT` and `InverseRealFFT` run (``PortableFFT/executeReal(_:into:)``
    /// and ``PortableFFT/executeInverseReal(_:into:)``) against FFTW's r2c and c2r, for every smooth size up to
    /// 4 096, odd sizes included: the same bins, and the same real block back.
    @Test func realTransformsMatchFFTWsR2CAndC2R() {
        for size in Self.smoothSizes(upTo: 4_096) {
            let block = PartialRealFFTTests.noise(size, seed: UInt64(size) + 7)
            let bins = size / 2 + 1
            let portable = PortableFFT(size: size, direction: .forward)
            let spectrum = UnsafeMutableBufferPointer<Float>.allocate(capacity: 2 * bins)
            defer { spectrum.deallocate() }
            block.withUnsafeBufferPointer { portable.executeReal($0, into: spectrum) }
            let reference = RealFFT(size: size)
            for i in 0..<size { reference.input[i] = block[i] }
            reference.execute()
            var error: Float = 0, energy: Float = 0
            for i in 0..<(2 * bins) {
                error = max(error, abs(spectrum[i] - reference.output[i]))
                energy += reference.output[i] * reference.output[i]
            }
            #expect(error / (energy / Float(bins)).squareRoot() < 2e-6, "r2c, size \(size)")

            // The inverse of FFTW's spectrum (c2r destroys its input, so it gets a copy), both unnormalised.
            let inverse = PortableFFT(size: size, direction: .inverse)
            let back = UnsafeMutableBufferPointer<Float>.allocate(capacity: size)
            defer { back.deallocate() }
            let referenceSpectrum = Array(reference.output)
            referenceSpectrum.withUnsafeBufferPointer { inverse.executeInverseReal($0, into: back) }
            let referenceInverse = InverseRealFFT(size: size)
            for i in 0..<(2 * bins) { referenceInverse.input[i] = referenceSpectrum[i] }
            referenceInverse.execute()
            var inverseError: Float = 0, roundTrip: Float = 0
            for i in 0..<size {
                inverseError = max(inverseError, abs(back[i] - referenceInverse.output[i]))
                roundTrip = max(roundTrip, abs(back[i] / Float(size) - block[i]))
            }
            // Unnormalised (n times the block): compared per sample over n, against FFTW's and against the block.
            #expect(inverseError / Float(size) < 2e-6, "c2r, size \(size): \(inverseError)")
            #expect(roundTrip < 1e-5, "the round trip of size \(size): \(roundTrip)")
        }
    }
}
