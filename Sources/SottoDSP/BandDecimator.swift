import RealModule

/// One band to extract as complex baseband: its centre (Hz), the half-width kept flat around it (Hz) and
/// the smallest output rate (Hz), which must exceed twice the half-width.
public struct BandSpecification: Hashable, Sendable {
    public var centerFrequency: Double
    public var passbandHalfWidth: Double
    public var minimumOutputRate: Double

    public init(centerFrequency: Double, passbandHalfWidth: Double, minimumOutputRate: Double) {
        self.centerFrequency = centerFrequency
        self.passbandHalfWidth = passbandHalfWidth
        self.minimumOutputRate = minimumOutputRate
    }
}

/// Extracts one frequency band of a real signal as complex baseband at a lower rate: mixing, low-pass
/// filtering and decimation in one step, by fast convolution (FFTW overlap-save).
///
/// Per block, one real FFT of `blockSize` input samples; the bins around `centerFrequency` are weighted by
/// the low-pass filter's response and moved to a small complex inverse FFT of `outputBlockSize` points.
/// The output is the analytic signal of the band shifted down by the (bin-rounded) `centerFrequency`, at
/// `outputRate` = `sampleRate * outputBlockSize / blockSize`, with a real cosine of amplitude 1 at `f`
/// appearing as a complex exponential of amplitude 1 at `f - centerFrequency`. The ratio need not be a
/// whole number: the block is a power of two and the inverse transform a fast size, whatever the rates.
/// Several bands of one input can share that real FFT: see ``BandDecimatorBank``.
///
/// Streaming: input can arrive in chunks of any size; blocks are cut at fixed positions relative to the
/// start of the stream, so the output never depends on how the input was chunked. Output sample `j`
/// corresponds to input time `j / outputRate` (the filter delay is compensated).
public final class BandDecimator {
    /// Input sample rate (Hz).
    public let sampleRate: Double
    /// Actual centre frequency (Hz): the requested one rounded to the FFT bin grid.
    public let centerFrequency: Double
    /// Output sample rate (Hz): `sampleRate * outputBlockSize / blockSize`, at least the band's minimum.
    public var outputRate: Double { sampleRate * Double(outputSize) / Double(spectrum.blockSize) }
    /// Input samples per FFT block (a power of two).
    public var blockSize: Int { spectrum.blockSize }
    /// Output samples per inverse FFT block.
    public var outputBlockSize: Int { outputSize }

    let centerBin: Int
    let outputSize: Int
    /// The block transform this band reads: its own, or the one its bank shares.
    let spectrum: BlockSpectrum
    private let ownsSpectrum: Bool
    private let inverse: ComplexFFT
    /// Filter frequency response on the extracted bins (real, zero phase), already scaled.
    private let response: UnsafeMutableBufferPointer<Float>
    /// Output of the current block (real and imaginary parts).
    private let outReal: UnsafeMutableBufferPointer<Float>
    private let outImag: UnsafeMutableBufferPointer<Float>

    /// - Parameters:
    ///   - sampleRate: input rate (Hz).
    ///   - centerFrequency: centre of the band (Hz).
    ///   - passbandHalfWidth: the band kept flat is centerFrequency ± this (Hz).
    ///   - minimumOutputRate: the output rate is at least this (Hz); it must exceed 2 x passbandHalfWidth.
    ///   - attenuationDB: stopband attenuation of the filter (dB).
    public convenience init(sampleRate: Double, centerFrequency: Double, passbandHalfWidth: Double,
                            minimumOutputRate: Double, attenuationDB: Double = 80) {
        self.init(sampleRate: sampleRate,
                  band: BandSpecification(centerFrequency: centerFrequency, passbandHalfWidth: passbandHalfWidth,
                                          minimumOutputRate: minimumOutputRate),
                  attenuationDB: attenuationDB)
    }

    /// The same, for a band given as a ``BandSpecification``.
    /// Ends the program if FFTW cannot allocate or plan its transforms (see ``init(checkedSampleRate:band:attenuationDB:)``).
    public convenience init(sampleRate: Double, band: BandSpecification, attenuationDB: Double = 80) {
        do { try self.init(checkedSampleRate: sampleRate, band: band, attenuationDB: attenuationDB) } catch { fixedSizeFailure(error) }
    }

    /// The same, or an error when FFTW cannot allocate or plan its transforms.
    /// - Parameters:
    ///   - sampleRate: input rate (Hz).
    ///   - band: the band to extract.
    ///   - attenuationDB: stopband attenuation of the filter (dB).
    public convenience init(checkedSampleRate sampleRate: Double, band: BandSpecification, attenuationDB: Double = 80) throws(FFTError) {
        let spectrum = try BlockSpectrum(sampleRate: sampleRate, bands: [band], attenuationDB: attenuationDB)
        try self.init(spectrum.designs[0], spectrum: spectrum, ownsSpectrum: true)
        spectrum.clearInput()
    }

    /// A band reading `spectrum`'s blocks; its filter response is measured through that transform, so
    /// the spectrum's input must be cleared once every band is made.
    init(_ design: LowpassDesign, spectrum: BlockSpectrum, ownsSpectrum: Bool) throws(FFTError) {
        sampleRate = spectrum.sampleRate
        self.spectrum = spectrum
        self.ownsSpectrum = ownsSpectrum
        let blockSize = spectrum.blockSize
        let outSize = design.outputSize
        outputSize = outSize
        centerBin = design.centerBin(sampleRate: sampleRate, blockSize: blockSize)
        centerFrequency = Double(centerBin) * sampleRate / Double(blockSize)
        inverse = try ComplexFFT(checkedSize: outSize, direction: .inverse)

        // Filter response at the extracted bins, modulated to the centre: H(k) = LP(k - centerBin),
        // measured through the block transform itself (planning another one costs as much again).
        let probe = spectrum.forward
        for i in 0..<blockSize { probe.input[i] = 0 }
        for (i, tap) in design.taps.enumerated() { probe.input[i] = tap }
        probe.executeAll()
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
        let count = spectrum.hop * outSize / blockSize
        outReal = .allocate(capacity: count)
        outReal.initialize(repeating: 0)
        outImag = .allocate(capacity: count)
        outImag.initialize(repeating: 0)
    }

    /// Largest input magnitude filtered (full scale = 1): 60 dB above full scale. Beyond it samples are
    /// limited, and NaN becomes 0. A Float FFT spreads a sample's round-off (about 1e-7 of it) over its
    /// whole block, so one absurd sample (1e10 in a float file) would bury everything near it.
    public static let inputLimit: Float = 1_000

    /// Feeds input samples; calls `emit(real, imaginary)` with each new run of output samples (the
    /// buffers are only valid during the call). Samples beyond ``inputLimit`` are limited to it.
    /// - Precondition: not a band of a ``BandDecimatorBank`` (those are fed through the bank).
    public func process(_ input: UnsafeBufferPointer<Float>,
                        emit: (UnsafeBufferPointer<Float>, UnsafeBufferPointer<Float>) -> Void) {
        precondition(ownsSpectrum, "a band of a BandDecimatorBank is fed through its bank")
        spectrum.process(input) { extract(emit: emit) }
    }

    deinit {
        response.deallocate()
        outReal.deallocate()
        outImag.deallocate()
    }

    /// Takes this band out of the spectrum's current block and emits its new output samples.
    func extract(emit: (UnsafeBufferPointer<Float>, UnsafeBufferPointer<Float>) -> Void) {
        let blockSize = spectrum.blockSize, blockStart = spectrum.blockStart
        let half = outputSize / 2
        let transform = spectrum.forward.output
        let bins = blockSize / 2 + 1
        let r = response
        let inverseInput = inverse.input
        if centerBin - half >= 0 && centerBin + half <= bins {
            // Every extracted bin is one of the transform's own (not a mirrored one): slots 0..<half are
            // bins centerBin..., slots half..<outputSize the bins below it; contiguous, no branch.
            let source = UnsafePointer(transform.baseAddress!), weights = UnsafePointer(r.baseAddress!)
            let target = inverseInput.baseAddress!
            Self.weigh(source + 2 * centerBin, weights, into: target, count: half)
            Self.weigh(source + 2 * (centerBin - half), weights + half, into: target + 2 * half, count: outputSize - half)
        } else {
            extractMirrored(transform, bins: bins, into: inverseInput)
        }
        finishBlock(blockStart: blockStart, emit: emit)
    }

    /// `count` interleaved complex values of `source`, each scaled by its weight, into `target`.
    @inline(__always)
    private static func weigh(_ source: UnsafePointer<Float>, _ weights: UnsafePointer<Float>,
                              into target: UnsafeMutablePointer<Float>, count: Int) {
        var i = 0
        while i < count {
            let weight = weights[i]
            target[2 &* i] = source[2 &* i] * weight
            target[2 &* i &+ 1] = source[2 &* i &+ 1] * weight
            i &+= 1
        }
    }

    /// The general case of `extract`'s bin gathering: a band reaching below 0 Hz or above half the
    /// input rate takes the mirrored (conjugate) bins there.
    private func extractMirrored(_ transform: UnsafeMutableBufferPointer<Float>, bins: Int, into inverseInput: UnsafeMutableBufferPointer<Float>) {
        let half = outputSize / 2, blockSize = spectrum.blockSize
        let r = response
        for q in -half..<half {
            let slot = (q + outputSize) % outputSize
            let k = centerBin + q
            var re: Float = 0, im: Float = 0
            if k >= 0 && k < bins {
                re = transform[2 * k]; im = transform[2 * k + 1]
            } else if k < 0 && -k < bins {
                re = transform[-2 * k]; im = -transform[-2 * k + 1]
            } else if k >= bins && k < blockSize {
                re = transform[2 * (blockSize - k)]; im = -transform[2 * (blockSize - k) + 1]
            }
            let hr = r[slot]
            inverseInput[2 * slot] = re * hr
            inverseInput[2 * slot + 1] = im * hr
        }
    }

    /// Inverse transform of the gathered bins, the block's mixing phase undone, the valid samples emitted.
    private func finishBlock(blockStart: Int, emit: (UnsafeBufferPointer<Float>, UnsafeBufferPointer<Float>) -> Void) {
        let blockSize = spectrum.blockSize
        inverse.execute()
        // Undo the block-relative mixing phase: multiply by exp(-2 pi i centerBin * blockStart / blockSize).
        let turns = Double(((centerBin * (blockStart % blockSize)) % blockSize + blockSize) % blockSize) / Double(blockSize)
        let c = Float(Double.cos(2 * Double.pi * turns)), s = Float(-Double.sin(2 * Double.pi * turns))
        // Zero-phase filtering wraps around both ends of the block: only the middle `hop` samples are valid.
        let firstValid = spectrum.overlap / 2 * outputSize / blockSize
        let count = spectrum.hop * outputSize / blockSize
        let valid = UnsafePointer(inverse.output.baseAddress! + 2 * firstValid)
        let real = outReal.baseAddress!, imaginary = outImag.baseAddress!
        // Output sample j of this block is input time blockStart + j * blockSize / outputSize, filtered
        // with a zero-phase response.
        var j = 0
        while j < count {
            let re = valid[2 &* j], im = valid[2 &* j &+ 1]
            real[j] = re * c - im * s
            imaginary[j] = re * s + im * c
            j &+= 1
        }
        emit(UnsafeBufferPointer(outReal), UnsafeBufferPointer(outImag))
    }
}

/// Several bands of one real signal, each extracted as by ``BandDecimator`` at its own rate, from one
/// real FFT per block instead of one per band: the input is transformed once for every band a decoder
/// listens to (the 18-20 kHz profiles and the audible one at 2-4 kHz).
///
/// The blocks fit every band: every band's output block is a whole number of samples, and so are the
/// hop and half the overlap in every band's output; the overlap spans the longest filter. A band of a
/// bank gives the same output as a ``BandDecimator`` of its own up to float round-off and the filters'
/// stopband (80 dB down).
///
/// One owner; not for concurrent use.
public final class BandDecimatorBank {
    /// The bands, in the order asked for; fed only through ``process(_:emit:)``.
    public let bands: [BandDecimator]
    private let spectrum: BlockSpectrum
    /// Input samples per FFT block, shared by every band (a power of two).
    public var blockSize: Int { spectrum.blockSize }

    /// - Parameters:
    ///   - sampleRate: input rate (Hz).
    ///   - bands: the bands to extract (at least one; see ``BandDecimator``'s parameters).
    ///   - attenuationDB: stopband attenuation of the filters (dB).
    /// Ends the program if FFTW cannot allocate or plan its transforms (see ``init(checkedSampleRate:bands:attenuationDB:lowLatency:)``).
    public convenience init(sampleRate: Double, bands: [BandSpecification], attenuationDB: Double = 80) {
        do { try self.init(checkedSampleRate: sampleRate, bands: bands, attenuationDB: attenuationDB) } catch { fixedSizeFailure(error) }
    }

    /// The bank, or an error when FFTW cannot allocate or plan its transforms (out of memory).
    /// - Parameters:
    ///   - sampleRate: input rate (Hz).
    ///   - bands: the bands to extract (at least one; see ``BandDecimator``'s parameters).
    ///   - attenuationDB: stopband attenuation of the filters (dB).
    ///   - lowLatency: blocks half as long or shorter (each band's output block at least 128 samples instead of
    ///     256: 2 048 input samples instead of 4 096 at 48 kHz), so that output comes out sooner after its
    ///     input (about 20 ms sooner in the median at 48 kHz), for about 40 % more CPU per input sample.
    public init(checkedSampleRate sampleRate: Double, bands: [BandSpecification], attenuationDB: Double = 80,
                lowLatency: Bool = false) throws(FFTError) {
        precondition(!bands.isEmpty)
        let spectrum = try BlockSpectrum(sampleRate: sampleRate, bands: bands, attenuationDB: attenuationDB,
                                         minimumOutput: lowLatency ? BlockSpectrum.lowLatencyOutputBlock : BlockSpectrum.minimumOutputBlock)
        self.spectrum = spectrum
        var made: [BandDecimator] = []
        for design in spectrum.designs { made.append(try BandDecimator(design, spectrum: spectrum, ownsSpectrum: false)) }
        self.bands = made
        spectrum.clearInput()
    }

    /// Feeds input samples; calls `emit(band, real, imaginary)` with each new run of output samples of
    /// band `band` (an index into ``bands``; the buffers are only valid during the call), block by block
    /// and, within a block, in the order of ``bands``.
    public func process(_ input: UnsafeBufferPointer<Float>,
                        emit: (Int, UnsafeBufferPointer<Float>, UnsafeBufferPointer<Float>) -> Void) {
        let bands = bands
        spectrum.process(input) {
            for index in bands.indices { bands[index].extract { emit(index, $0, $1) } }
        }
    }
}

/// A band's output block and low-pass filter (Kaiser window) for one block length.
struct LowpassDesign {
    let band: BandSpecification
    /// Output samples per block: the smallest ``LowpassDesign/isFastOutputSize(_:)`` size whose rate
    /// reaches the band's minimum.
    let outputSize: Int
    /// Symmetric taps, `2 * halfTaps + 1` of them (input samples).
    let taps: [Float]
    let halfTaps: Int

    /// The design for blocks of `blockSize` input samples, or nil when the band's output block would be
    /// shorter than `minimumOutputSize` (too short a block for this band).
    init?(sampleRate: Double, blockSize: Int, band: BandSpecification, minimumOutputSize: Int, attenuationDB: Double) {
        precondition(band.minimumOutputRate > 2 * band.passbandHalfWidth && sampleRate >= band.minimumOutputRate)
        self.band = band
        var size = max(16, Int((Double(blockSize) * band.minimumOutputRate / sampleRate).rounded(.up)))
        while !Self.isFastOutputSize(size) { size += 1 }
        guard size >= minimumOutputSize, size <= blockSize else { return nil }
        outputSize = size
        let outputRate = sampleRate * Double(size) / Double(blockSize)
        // Only the bins within +-outputRate/2 are kept (a brick wall in frequency), so the filter must
        // already be in its stopband there, or the cut would spread the filter in time and break the
        // overlap-save. This also keeps everything the decimation could alias out of the output.
        let stopEdge = outputRate / 2
        let transition = (stopEdge - band.passbandHalfWidth) / sampleRate
        let cutoff = (band.passbandHalfWidth + stopEdge) / 2 / sampleRate
        let count = KaiserFIR.tapCount(transitionWidth: transition, attenuationDB: attenuationDB)
        halfTaps = (count - 1) / 2
        taps = KaiserFIR.lowpass(cutoff: cutoff, taps: 2 * halfTaps + 1, attenuationDB: attenuationDB)
    }

    /// The block transform's bin nearest the band's centre, for blocks of `blockSize` samples at
    /// `sampleRate` (Hz).
    func centerBin(sampleRate: Double, blockSize: Int) -> Int {
        Int((band.centerFrequency / sampleRate * Double(blockSize)).rounded())
    }

    /// The bins of the block transform (0...blockSize/2) the band's extraction reads: the `outputSize` bins
    /// around its centre, or every bin for a band reaching below 0 Hz or above half the rate (it reads
    /// mirrored bins there).
    func binsRead(sampleRate: Double, blockSize: Int) -> Range<Int> {
        let center = centerBin(sampleRate: sampleRate, blockSize: blockSize), half = outputSize / 2
        return center - half >= 0 && center + half <= blockSize / 2 + 1 ? (center - half)..<(center + half) : 0..<(blockSize / 2 + 1)
    }

    /// Sizes of the form 2^a 3^b 5^c (FFTW's fast sizes) that are multiples of 16. Not only the sizes FFTW
    /// plans best without measuring (2^a, 3 x 2^a, 5 x 2^a: 0.84-0.94 ns a point in C here, against 1.9-2.3
    /// for 288, 360, 432 and 480 points): an inverse transform costs a tenth of the block's forward one,
    /// while every baseband sample more costs the correlator and the receiver behind it. Multiples of 16
    /// because half the overlap must be a multiple of blockSize / 2^a: with 450 points (2 x 225, the fast
    /// profile at 44.1 kHz) that was half a 4 096 block, and the block grew to 16 384.
    static func isFastOutputSize(_ n: Int) -> Bool { n >= 16 && n % 16 == 0 && isSmoothFFTSize(n) }
}

/// The blocks of input and their real FFT, shared by the bands that read them: where blocks start, what
/// they overlap, and the samples waiting for the next one.
final class BlockSpectrum {
    let sampleRate: Double
    /// Input samples per FFT block (a power of two).
    let blockSize: Int
    /// New input samples consumed per block (a whole number of every band's output samples).
    let hop: Int
    /// Input samples of history each block overlaps: twice the longest filter's half-span, rounded up so
    /// that half of it is a whole number of every band's output samples.
    let overlap: Int
    /// The transform; its input holds the history (`overlap` samples), then pending new samples (up to
    /// `hop`). Only the bins some band reads are computed (`PartialRealFFT`); its out-of-place complex
    /// transform leaves the input as it was.
    let forward: PartialRealFFT
    private var pendingCount: Int
    /// Index of the first input sample of the current block (negative at the start).
    private(set) var blockStart: Int

    /// Smallest output block of a band (samples): smaller inverse FFTs cost more per sample.
    static let minimumOutputBlock = 256
    /// Smallest output block of a band for a low-latency bank (half the hop of `minimumOutputBlock`'s blocks).
    static let lowLatencyOutputBlock = 128
    /// The bands' designs for this block length, in the order asked for.
    let designs: [LowpassDesign]

    /// Blocks of a power-of-two length (FFTW's fastest real transforms: 4 096 points cost 1.8 ns a point
    /// against 2.3-2.9 for 3 328 = 13 x 256, the block of an integer decimation by 13), the shortest at least
    /// four times its overlap for which every band's output block is at least `minimumOutput` samples
    /// (`minimumOutputBlock` unless asked for less: shorter blocks for lower latency).
    init(sampleRate: Double, bands: [BandSpecification], attenuationDB: Double,
         minimumOutput: Int = BlockSpectrum.minimumOutputBlock) throws(FFTError) {
        precondition(!bands.isEmpty)
        self.sampleRate = sampleRate
        var blockSize = 256
        while true {
            let designs = bands.compactMap {
                LowpassDesign(sampleRate: sampleRate, blockSize: blockSize, band: $0,
                              minimumOutputSize: minimumOutput, attenuationDB: attenuationDB)
            }
            if designs.count == bands.count {
                // Half the overlap and the hop must be whole numbers of every band's output samples: multiples
                // of blockSize / gcd(blockSize, outputSize), a power of two since blockSize is one.
                let granularity = designs.map { blockSize / greatestCommonDivisor(blockSize, $0.outputSize) }.max()!
                let longest = designs.map { $0.halfTaps }.max()!
                let halfSpan = (longest + granularity - 1) / granularity * granularity
                if blockSize >= 4 * 2 * halfSpan {
                    self.designs = designs
                    self.blockSize = blockSize
                    overlap = 2 * halfSpan
                    hop = blockSize - overlap
                    forward = try PartialRealFFT(checkedSize: blockSize, bins: designs.map {
                        $0.binsRead(sampleRate: sampleRate, blockSize: blockSize)
                    })
                    // Half the longest filter's span of silence before the stream, so that output 0 is input 0.
                    pendingCount = halfSpan
                    blockStart = -halfSpan
                    return
                }
            }
            blockSize *= 2
        }
    }

    /// Zeroes the input history (the bands' filter responses were measured through the transform).
    func clearInput() {
        for i in 0..<blockSize { forward.input[i] = 0 }
    }

    /// Feeds input samples; calls `block()` after each block's transform (read `forward.output` and
    /// `blockStart` then).
    func process(_ input: UnsafeBufferPointer<Float>, block: () -> Void) {
        var consumed = 0
        let limit = BandDecimator.inputLimit
        let pending = forward.input
        while consumed < input.count {
            let take = min(blockSize - pendingCount, input.count - consumed)
            Self.copyLimited(from: input.baseAddress! + consumed, to: pending.baseAddress! + pendingCount, count: take, limit: limit)
            pendingCount += take
            consumed += take
            if pendingCount == blockSize {
                forward.execute()
                block()
                // Keep the last `overlap` samples as history.
                pending.baseAddress!.update(from: pending.baseAddress! + hop, count: overlap)
                pendingCount = overlap
                blockStart += hop
            }
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
}

private func greatestCommonDivisor(_ a: Int, _ b: Int) -> Int { b == 0 ? a : greatestCommonDivisor(b, a % b) }
