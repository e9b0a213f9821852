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
    private let spectra: UnsafeMutableBufferPointer<Float>
    /// Input window: `templateLength - 1` history samples then new ones (interleaved re, im).
    private let window: UnsafeMutableBufferPointer<Float>
    private var windowCount: Int
    /// Prefix sums of |x|^2 over the window (Double for stability), for the per-position energy.
    private let energyPrefix: UnsafeMutableBufferPointer<Double>
    private let output: UnsafeMutableBufferPointer<Float>

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
        spectra = .allocate(capacity: 2 * fftSize * templates.count)
        spectra.initialize(repeating: 0)
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
        window = .allocate(capacity: 2 * fftSize)
        window.initialize(repeating: 0)
        windowCount = 0
        energyPrefix = .allocate(capacity: fftSize + 1)
        energyPrefix.initialize(repeating: 0)
        output = .allocate(capacity: hop * templates.count)
        output.initialize(repeating: 0)
    }

    deinit {
        spectra.deallocate()
        window.deallocate()
        energyPrefix.deallocate()
        output.deallocate()
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
            let w = window, at = windowCount
            for i in 0..<take {
                w[2 * (at + i)] = real[consumed + i]
                w[2 * (at + i) + 1] = imaginary[consumed + i]
            }
            windowCount += take
            consumed += take
            if windowCount == fftSize { runBlock(emit: emit) }
        }
    }

    private func runBlock(emit: (UnsafeBufferPointer<Float>, Int) -> Void) {
        let w = window, prefix = energyPrefix, out = output, spec = spectra
        let fin = forward.input, fout = forward.output, iin = inverse.input, iout = inverse.output
        fin.baseAddress!.update(from: w.baseAddress!, count: 2 * fftSize)
        var sum = 0.0
        prefix[0] = 0
        for i in 0..<fftSize {
            sum += Double(w[2 * i] * w[2 * i] + w[2 * i + 1] * w[2 * i + 1])
            prefix[i + 1] = sum
        }
        forward.execute()
        do {
            for t in 0..<templateCount {
                let base = 2 * t * fftSize
                for k in 0..<fftSize {
                    let xr = fout[2 * k], xi = fout[2 * k + 1]
                    let tr = spec[base + 2 * k], ti = spec[base + 2 * k + 1]
                    iin[2 * k] = xr * tr - xi * ti
                    iin[2 * k + 1] = xr * ti + xi * tr
                }
                inverse.execute()
                // Linear correlation is valid for lags 0..<hop (the template fits in the window).
                for n in 0..<hop {
                    let re = iout[2 * n], im = iout[2 * n + 1]
                    let e = prefix[n + templateLength] - prefix[n]
                    out[t * hop + n] = e > 1e-30 ? min(1, Float(Double(re * re + im * im) / e)) : 0
                }
            }
        }
        emit(UnsafeBufferPointer(out), hop)
        // Keep the last templateLength - 1 samples.
        let keep = templateLength - 1
        w.baseAddress!.update(from: w.baseAddress! + 2 * hop, count: 2 * keep)
        windowCount = keep
    }
}
