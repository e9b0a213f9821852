import RealModule

/// Extracts one frequency band of a real signal as complex baseband at a lower rate: mixing, low-pass
/// filtering and decimation in one step, by fast convolution (FFTW overlap-save).
///
/// Per block, one real FFT of `blockSize` input samples; the bins around `centerFrequency` are weighted by
/// the low-pass filter's response and moved to a small complex inverse FFT of `blockSize / factor` points.
/// The output is the analytic signal of the band shifted down by the (bin-rounded) `centerFrequency`, at
/// `sampleRate / factor`, with a real cosine of amplitude 1 at `f` appearing as a complex exponential of
/// amplitude 1 at `f - centerFrequency`.
///
/// Streaming: input can arrive in chunks of any size; blocks are cut at fixed positions relative to the
/// start of the stream, so the output never depends on how the input was chunked. Output sample `j`
/// corresponds to input sample `j * factor` (the filter delay is compensated).
public final class BandDecimator {
    /// Input sample rate (Hz).
    public let sampleRate: Double
    /// Decimation factor (input samples per output sample).
    public let factor: Int
    /// Actual centre frequency (Hz): the requested one rounded to the FFT bin grid.
    public let centerFrequency: Double
    /// Output sample rate (Hz).
    public var outputRate: Double { sampleRate / Double(factor) }

    /// Input samples per FFT block.
    public let blockSize: Int
    /// New input samples consumed per block.
    let hop: Int
    /// Input samples of history each block overlaps (filter length - 1, rounded up to `factor`).
    let overlap: Int
    let centerBin: Int
    let outputSize: Int

    private let forward: RealFFT
    private let inverse: ComplexFFT
    /// Filter frequency response on the extracted bins (real, zero phase), already scaled.
    private let response: UnsafeMutableBufferPointer<Float>
    /// Input history (`overlap` samples), then pending new samples (up to `hop`).
    private let pending: UnsafeMutableBufferPointer<Float>
    /// Output of the current block (real and imaginary parts).
    private let outReal: UnsafeMutableBufferPointer<Float>
    private let outImag: UnsafeMutableBufferPointer<Float>
    private var pendingCount: Int
    /// Index of the first input sample of the next block (may be negative at the start).
    private var blockStart: Int

    /// - Parameters:
    ///   - sampleRate: input rate (Hz).
    ///   - centerFrequency: centre of the band (Hz).
    ///   - passbandHalfWidth: the band kept flat is centerFrequency ± this (Hz).
    ///   - minimumOutputRate: the output rate is at least this (Hz); it must exceed 2 x passbandHalfWidth.
    ///   - attenuationDB: stopband attenuation of the filter (dB).
    public init(sampleRate: Double, centerFrequency: Double, passbandHalfWidth: Double,
                minimumOutputRate: Double, attenuationDB: Double = 80) {
        precondition(minimumOutputRate > 2 * passbandHalfWidth && sampleRate >= minimumOutputRate)
        self.sampleRate = sampleRate
        let factor = max(1, Int((sampleRate / minimumOutputRate).rounded(.down)))
        self.factor = factor
        let outputRate = sampleRate / Double(factor)
        // Only the bins within +-outputRate/2 are kept (a brick wall in frequency), so the filter must
        // already be in its stopband there, or the cut would spread the filter in time and break the
        // overlap-save. This also keeps everything the decimation could alias out of the output.
        let stopEdge = outputRate / 2
        let transition = (stopEdge - passbandHalfWidth) / sampleRate
        let cutoff = (passbandHalfWidth + stopEdge) / 2 / sampleRate
        var taps = KaiserFIR.tapCount(transitionWidth: transition, attenuationDB: attenuationDB)
        // Make the delay (taps - 1) / 2 a whole number of output samples.
        let halfTaps = ((taps - 1) / 2 + factor - 1) / factor * factor
        taps = 2 * halfTaps + 1
        let h = KaiserFIR.lowpass(cutoff: cutoff, taps: taps, attenuationDB: attenuationDB)
        overlap = 2 * halfTaps
        // Output block of a smooth size, at least 4x the overlap for efficiency.
        var outSize = 64
        while outSize * factor < 4 * max(overlap, 1) || outSize < 256 { outSize *= 2 }
        outputSize = outSize
        blockSize = outSize * factor
        hop = blockSize - overlap
        centerBin = Int((centerFrequency / sampleRate * Double(blockSize)).rounded())
        self.centerFrequency = Double(centerBin) * sampleRate / Double(blockSize)
        forward = RealFFT(size: blockSize)
        inverse = ComplexFFT(size: outSize, direction: .inverse)

        // Filter response at the extracted bins, modulated to the centre: H(k) = LP(k - centerBin),
        // through the block's own transform (planning a second one cost as much as the first).
        let probe = forward
        for i in 0..<blockSize { probe.input[i] = 0 }
        for (i, tap) in h.enumerated() { probe.input[i] = tap }
        probe.execute()
        let scale = Float(2) / Float(blockSize)
        response = .allocate(capacity: outSize)
        response.initialize(repeating: 0)
        for q in -(outSize / 2)..<(outSize / 2) {
            let lowpassBin = abs(q)  // h is real and symmetric about its centre: |H| is even
            guard lowpassBin <= blockSize / 2 else { continue }
            let re = probe.output[2 * lowpassBin], im = probe.output[2 * lowpassBin + 1]
            let magnitude = (re * re + im * im).squareRoot()
            let slot = (q + outSize) % outSize
            // Zero phase: the filter is applied centred on each output sample, without delay.
            response[slot] = magnitude * scale
        }
        pending = .allocate(capacity: blockSize)
        pending.initialize(repeating: 0)
        outReal = .allocate(capacity: hop / factor)
        outReal.initialize(repeating: 0)
        outImag = .allocate(capacity: hop / factor)
        outImag.initialize(repeating: 0)
        // Start with half the filter's span of silence before the stream so that output 0 is input 0.
        pendingCount = halfTaps
        blockStart = -halfTaps
    }

    /// Largest input magnitude filtered (full scale = 1): 60 dB above full scale. Beyond it samples are
    /// limited, and NaN becomes 0. A Float FFT spreads a sample's round-off (about 1e-7 of it) over its
    /// whole block, so one absurd sample (1e10 in a float file) would bury everything near it.
    public static let inputLimit: Float = 1_000

    /// Feeds input samples; calls `emit(real, imaginary)` with each new run of output samples (the
    /// buffers are only valid during the call). Samples beyond ``inputLimit`` are limited to it.
    public func process(_ input: UnsafeBufferPointer<Float>,
                        emit: (UnsafeBufferPointer<Float>, UnsafeBufferPointer<Float>) -> Void) {
        var consumed = 0
        let limit = Self.inputLimit
        while consumed < input.count {
            let take = min(blockSize - pendingCount, input.count - consumed)
            Self.copyLimited(from: input.baseAddress! + consumed, to: pending.baseAddress! + pendingCount, count: take, limit: limit)
            pendingCount += take
            consumed += take
            if pendingCount == blockSize { runBlock(emit: emit) }
        }
    }

    /// Copies `count` samples, NaN made 0 and the rest limited to +-`limit`, eight at a time (the
    /// per-sample branches of the plain loop cost as much as the FFT behind it).
    @inline(__always)
    private static func copyLimited(from source: UnsafePointer<Float>, to target: UnsafeMutablePointer<Float>, count: Int, limit: Float) {
        typealias Lanes = SIMD8<Float>
        let width = Lanes.scalarCount
        let upper = Lanes(repeating: limit), lower = Lanes(repeating: -limit), zero = Lanes(repeating: 0)
        var i = 0
        while i + width <= count {
            let x = UnsafeRawPointer(source + i).loadUnaligned(as: Lanes.self)
            // Comparisons and selects, not `clamped`: its generic `pointwiseMin`/`pointwiseMax` ran one
            // lane at a time (a quarter of all decoding instructions with four profiles).
            var y = x.replacing(with: zero, where: x .!= x)
            y.replace(with: upper, where: y .> upper)
            y.replace(with: lower, where: y .< lower)
            UnsafeMutableRawPointer(target + i).storeBytes(of: y, as: Lanes.self)
            i += width
        }
        while i < count {
            let x = source[i]
            target[i] = x.isNaN ? 0 : Swift.max(-limit, Swift.min(limit, x))
            i += 1
        }
    }

    deinit {
        response.deallocate()
        pending.deallocate()
        outReal.deallocate()
        outImag.deallocate()
    }

    private func runBlock(emit: (UnsafeBufferPointer<Float>, UnsafeBufferPointer<Float>) -> Void) {
        forward.input.baseAddress!.update(from: pending.baseAddress!, count: blockSize)
        forward.execute()
        let half = outputSize / 2
        let spectrum = forward.output
        let bins = blockSize / 2 + 1
        let r = response
        let inverseInput = inverse.input
        do {
            for q in -half..<half {
                let slot = (q + outputSize) % outputSize
                let k = centerBin + q
                var re: Float = 0, im: Float = 0
                if k >= 0 && k < bins {
                    re = spectrum[2 * k]; im = spectrum[2 * k + 1]
                } else if k < 0 && -k < bins {
                    re = spectrum[-2 * k]; im = -spectrum[-2 * k + 1]
                } else if k >= bins && k < blockSize {
                    re = spectrum[2 * (blockSize - k)]; im = -spectrum[2 * (blockSize - k) + 1]
                }
                let hr = r[slot]
                inverseInput[2 * slot] = re * hr
                inverseInput[2 * slot + 1] = im * hr
            }
        }
        inverse.execute()
        // Undo the block-relative mixing phase: multiply by exp(-2 pi i centerBin * blockStart / blockSize).
        let turns = Double(((centerBin * (blockStart % blockSize)) % blockSize + blockSize) % blockSize) / Double(blockSize)
        let c = Float(Double.cos(2 * Double.pi * turns)), s = Float(-Double.sin(2 * Double.pi * turns))
        // Zero-phase filtering wraps around both ends of the block: only the middle `hop` samples are valid.
        let firstValid = overlap / 2 / factor
        let count = hop / factor
        let inverseOutput = inverse.output
        // Output sample j of this block is input sample blockStart + j*factor, filtered with a
        // zero-phase response.
        for j in 0..<count {
            let re = inverseOutput[2 * (j + firstValid)], im = inverseOutput[2 * (j + firstValid) + 1]
            outReal[j] = re * c - im * s
            outImag[j] = re * s + im * c
        }
        emit(UnsafeBufferPointer(outReal), UnsafeBufferPointer(outImag))
        // Keep the last `overlap` samples as history.
        pending.baseAddress!.update(from: pending.baseAddress! + hop, count: overlap)
        pendingCount = overlap
        blockStart += hop
    }
}
