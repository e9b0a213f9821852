/// Streaming normalised cross-correlation of a complex signal against several complex templates of the
/// same length, by FFT overlap-save (FFTW).
///
/// For each input position `n` (the template's first sample aligned with input sample `n`) and template
/// `t`, it produces rho^2 = |sum_i x[n+i] conj(t[i])|^2 / (|t|^2 * sum_i |x[n+i]|^2), in [0, 1]: 1 for a
/// perfect (scaled) copy, about 1/length for unrelated noise, and insensitive to the signal level, so a
/// single loud impulse cannot trigger a detection.
///
/// Outputs arrive in order and do not depend on how the input was chunked.
public final class StreamingCorrelator {
    /// Template length (samples).
    public let templateLength: Int
    /// Number of templates.
    public let templateCount: Int
    let fftSize: Int
    let hop: Int
    private let forward: ComplexFFT
    private let inverse: ComplexFFT
    /// Conjugated template spectra, interleaved, one after the other, scaled by 1 / (fftSize * |t|).
    private var spectra: [Float]
    /// Input window: `templateLength - 1` history samples then new ones (interleaved re, im).
    private var window: [Float]
    private var windowCount: Int
    /// Energy per position helpers: |x|^2 of the window samples (Double prefix sums for stability).
    private var energyPrefix: [Double]
    private var output: [Float]

    /// Templates as (real, imaginary) arrays, all of the same, non-zero length.
    public init(templates: [(real: [Float], imaginary: [Float])]) {
        precondition(!templates.isEmpty)
        let length = templates[0].real.count
        precondition(length > 0 && templates.allSatisfy { $0.real.count == length && $0.imaginary.count == length })
        templateLength = length
        templateCount = templates.count
        fftSize = fastFFTSize(atLeast: max(4 * length, 256))
        hop = fftSize - (length - 1)
        forward = ComplexFFT(size: fftSize, direction: .forward)
        inverse = ComplexFFT(size: fftSize, direction: .inverse)
        let templateFFT = ComplexFFT(size: fftSize, direction: .forward)
        var spectra = [Float](repeating: 0, count: 2 * fftSize * templates.count)
        for (t, template) in templates.enumerated() {
            var energy = 0.0
            for i in 0..<2 * fftSize { templateFFT.input[i] = 0 }
            for i in 0..<length {
                templateFFT.input[2 * i] = template.real[i]
                templateFFT.input[2 * i + 1] = template.imaginary[i]
                energy += Double(template.real[i] * template.real[i] + template.imaginary[i] * template.imaginary[i])
            }
            templateFFT.execute()
            let scale = Float(1 / (Double(fftSize) * energy.squareRoot()))
            for k in 0..<fftSize {
                // Correlation = IFFT(X * conj(T)).
                spectra[2 * (t * fftSize + k)] = templateFFT.output[2 * k] * scale
                spectra[2 * (t * fftSize + k) + 1] = -templateFFT.output[2 * k + 1] * scale
            }
        }
        self.spectra = spectra
        window = [Float](repeating: 0, count: 2 * fftSize)
        windowCount = 0
        energyPrefix = [Double](repeating: 0, count: fftSize + 1)
        output = [Float](repeating: 0, count: hop * templates.count)
    }

    /// Feeds complex samples; calls `emit(rho2, count)` for each run of `count` new positions, where
    /// `rho2[t * count + j]` is template `t` at the j-th new position (valid only during the call).
    /// Positions are numbered from 0 in input order: a position becomes available once `templateLength - 1`
    /// further samples have arrived.
    public func process(real: UnsafeBufferPointer<Float>, imaginary: UnsafeBufferPointer<Float>,
                        emit: (UnsafeBufferPointer<Float>, Int) -> Void) {
        var consumed = 0
        while consumed < real.count {
            let take = min(fftSize - windowCount, real.count - consumed)
            window.withUnsafeMutableBufferPointer { w in
                for i in 0..<take {
                    w[2 * (windowCount + i)] = real[consumed + i]
                    w[2 * (windowCount + i) + 1] = imaginary[consumed + i]
                }
            }
            windowCount += take
            consumed += take
            if windowCount == fftSize { runBlock(emit: emit) }
        }
    }

    private func runBlock(emit: (UnsafeBufferPointer<Float>, Int) -> Void) {
        window.withUnsafeBufferPointer { w in
            for i in 0..<2 * fftSize { forward.input[i] = w[i] }
            var sum = 0.0
            energyPrefix[0] = 0
            for i in 0..<fftSize {
                sum += Double(w[2 * i] * w[2 * i] + w[2 * i + 1] * w[2 * i + 1])
                energyPrefix[i + 1] = sum
            }
        }
        forward.execute()
        spectra.withUnsafeBufferPointer { spec in
            for t in 0..<templateCount {
                let base = 2 * t * fftSize
                for k in 0..<fftSize {
                    let xr = forward.output[2 * k], xi = forward.output[2 * k + 1]
                    let tr = spec[base + 2 * k], ti = spec[base + 2 * k + 1]
                    inverse.input[2 * k] = xr * tr - xi * ti
                    inverse.input[2 * k + 1] = xr * ti + xi * tr
                }
                inverse.execute()
                // Linear correlation is valid for lags 0..<hop (the template fits in the window).
                for n in 0..<hop {
                    let re = inverse.output[2 * n], im = inverse.output[2 * n + 1]
                    let e = energyPrefix[n + templateLength] - energyPrefix[n]
                    output[t * hop + n] = e > 1e-30 ? min(1, Float(Double(re * re + im * im) / e)) : 0
                }
            }
        }
        output.withUnsafeBufferPointer { emit($0, hop) }
        // Keep the last templateLength - 1 samples.
        let keep = templateLength - 1
        window.withUnsafeMutableBufferPointer { w in
            for i in 0..<2 * keep { w[i] = w[2 * hop + i] }
        }
        windowCount = keep
    }
}
