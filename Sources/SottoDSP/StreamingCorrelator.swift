/// Streaming normalised cross-correlation of a complex signal against several complex templates, by FFT
/// overlap-save (FFTW).
///
/// For each input position `n` (the template's first sample aligned with input sample `n`) and template
/// `t`, it produces rho^2 = |sum_i x[n+i] conj(t[i])|^2 / (|t|^2 * sum_i |x[n+i]|^2), in [0, 1]: 1 for a
/// perfect (scaled) copy, about 1/length for unrelated noise, and insensitive to the signal level, so a
/// single loud impulse cannot trigger a detection.
///
/// Outputs arrive in order and do not depend on how the input was chunked. Per block, the input is
/// transformed once for every template; a template's correlation is computed only when the consumer asks
/// for it, so a detector that needs its second template only near peaks of the first skips most of that
/// work. Templates may differ in length (the preambles of profiles that share a baseband): the block fits
/// the longest, and every template's positions come out together, a block at a time.
public final class StreamingCorrelator {
    /// Length of the longest template (samples): a position comes out once this many samples from it have
    /// arrived.
    public let templateLength: Int
    /// Each template's length (samples).
    public let templateLengths: [Int]
    /// Number of templates.
    public let templateCount: Int
    /// Samples per transform block: positions come out a block at a time.
    public let fftSize: Int
    let hop: Int
    private let forward: ComplexFFT
    private let inverse: ComplexFFT
    /// Conjugated template spectra T* (scaled by 1 / (fftSize * |t|)), one template after the other, in
    /// the layout the vectorised complex product reads: for bin k, `spectraReal[2k] = spectraReal[2k+1] =
    /// Re T*` and `spectraImaginary[2k] = -Im T*`, `spectraImaginary[2k+1] = Im T*`, so that the product
    /// with interleaved X is `X * spectraReal + swapPairs(X) * spectraImaginary`.
    private let spectraReal: UnsafeMutableBufferPointer<Float>
    private let spectraImaginary: UnsafeMutableBufferPointer<Float>
    /// Input window: `templateLength - 1` history samples then new ones (interleaved re, im). It is the
    /// forward transform's own input (FFTW's out-of-place complex transform leaves it as it was).
    private let window: UnsafeMutableBufferPointer<Float>
    private var windowCount: Int
    /// Prefix sums of |x|^2 over the window (Double for stability), for the per-position energy.
    private let energyPrefix: UnsafeMutableBufferPointer<Double>
    private let output: UnsafeMutableBufferPointer<Float>
    /// The distinct template lengths, and for template t the index of its own among them.
    private let distinctLengths: [Int]
    private let lengthIndex: [Int]
    /// 1 / (energy of the input under a template) at each lag of the current block: one row of `hop`
    /// values per distinct length.
    private let inverseWindowEnergy: UnsafeMutableBufferPointer<Float>
    /// Which templates' rows of `output` hold the current block (bit t for template t), and which lengths'
    /// rows of `inverseWindowEnergy` (bit i for `distinctLengths[i]`).
    private var computedTemplates: UInt64 = 0
    private var computedEnergies: UInt64 = 0

    /// Transform size for templates of `templateLength` samples: the largest power of two below four
    /// template lengths (at least 256), so a block yields between one and three template lengths of new
    /// positions.
    ///
    /// Powers of two because with the `FFTW_ESTIMATE` plans used here a complex transform of 600, 750 or 900
    /// points cost 2.6, 5.7 and 3.7 ns a point against 0.9-1.4 ns for 256, 512 and 1 024 (measured in C on
    /// this machine). Below four lengths, not above, because positions only come out a block at a time and
    /// the receiver decides nothing beyond the correlation it has: a longer block would delay every report
    /// by up to its hop (1 024 points at 3 750 Hz delayed the default profile's reports by about 70 ms).
    static func blockSize(templateLength: Int) -> Int {
        var size = 256
        while 2 * size < 4 * templateLength { size *= 2 }
        return size
    }

    /// A correlator whose transforms are fixed by the program: ends it if FFTW cannot allocate or plan its transforms (see ``init(checkedTemplates:)``).
    /// - Parameter templates: as for ``init(checkedTemplates:)``.
    public convenience init(templates: [(real: [Float], imaginary: [Float])]) {
        do { try self.init(checkedTemplates: templates) } catch { fixedSizeFailure(error) }
    }

    /// The correlator, or an error when FFTW cannot allocate or plan its transforms (out of memory).
    /// - Parameter templates: (real, imaginary) arrays of non-zero lengths, each pair of the same length.
    public init(checkedTemplates templates: [(real: [Float], imaginary: [Float])]) throws(FFTError) {
        precondition(!templates.isEmpty && templates.count <= 64)
        precondition(templates.allSatisfy { !$0.real.isEmpty && $0.real.count == $0.imaginary.count })
        templateLengths = templates.map { $0.real.count }
        let length = templateLengths.max()!
        templateLength = length
        templateCount = templates.count
        var distinct: [Int] = []
        for length in templateLengths where !distinct.contains(length) { distinct.append(length) }
        distinctLengths = distinct
        lengthIndex = templateLengths.map { distinct.firstIndex(of: $0)! }
        fftSize = Self.blockSize(templateLength: length)
        hop = fftSize - (length - 1)
        forward = try ComplexFFT(checkedSize: fftSize, direction: .forward)
        inverse = try ComplexFFT(checkedSize: fftSize, direction: .inverse)
        let templateFFT = try ComplexFFT(checkedSize: fftSize, direction: .forward)
        spectraReal = .allocate(capacity: 2 * fftSize * templates.count)
        spectraReal.initialize(repeating: 0)
        spectraImaginary = .allocate(capacity: 2 * fftSize * templates.count)
        spectraImaginary.initialize(repeating: 0)
        for (t, template) in templates.enumerated() {
            var energy = 0.0
            for i in 0..<2 * fftSize { templateFFT.input[i] = 0 }
            for i in 0..<template.real.count {
                templateFFT.input[2 * i] = template.real[i]
                templateFFT.input[2 * i + 1] = template.imaginary[i]
                energy += Double(template.real[i] * template.real[i] + template.imaginary[i] * template.imaginary[i])
            }
            templateFFT.execute()
            let scale = Float(1 / (Double(fftSize) * energy.squareRoot()))
            for k in 0..<fftSize {
                // Correlation = IFFT(X * conj(T)).
                let real = templateFFT.output[2 * k] * scale, imaginary = -templateFFT.output[2 * k + 1] * scale
                let slot = 2 * (t * fftSize + k)
                spectraReal[slot] = real
                spectraReal[slot + 1] = real
                spectraImaginary[slot] = -imaginary
                spectraImaginary[slot + 1] = imaginary
            }
        }
        window = forward.input
        windowCount = 0
        energyPrefix = .allocate(capacity: fftSize + 1)
        energyPrefix.initialize(repeating: 0)
        output = .allocate(capacity: hop * templates.count)
        output.initialize(repeating: 0)
        inverseWindowEnergy = .allocate(capacity: hop * distinct.count)
        inverseWindowEnergy.initialize(repeating: 0)
    }

    deinit {
        spectraReal.deallocate()
        spectraImaginary.deallocate()
        energyPrefix.deallocate()
        output.deallocate()
        inverseWindowEnergy.deallocate()
    }

    /// Feeds complex samples; calls `emit(count, correlation)` for each run of `count` new positions, where
    /// `correlation(t)[j]` is rho^2 of template `t` at the j-th new position. Each template is correlated
    /// when first asked for during the call (the buffers are valid only during it). Positions are numbered
    /// from 0 in input order: a position becomes available once `templateLength - 1` further samples have
    /// arrived.
    public func process(real: UnsafeBufferPointer<Float>, imaginary: UnsafeBufferPointer<Float>,
                        emit: (_ count: Int, _ correlation: (_ template: Int) -> UnsafeBufferPointer<Float>) -> Void) {
        var consumed = 0
        while consumed < real.count {
            let take = min(fftSize - windowCount, real.count - consumed)
            // Interleaved into the forward transform's input, which is the window.
            let target = window.baseAddress! + 2 * windowCount
            let re = real.baseAddress! + consumed, im = imaginary.baseAddress! + consumed
            var i = 0
            while i < take {
                target[2 &* i] = re[i]
                target[2 &* i &+ 1] = im[i]
                i &+= 1
            }
            windowCount += take
            consumed += take
            if windowCount == fftSize { runBlock(emit: emit) }
        }
    }

    /// `prefix[i]` = the sum of |x|^2 over the first `i` of `count` interleaved complex samples (a multiple of
    /// 4), in Double. Four samples at a time: their partial sums are formed beside the running total, which
    /// takes one dependent addition per four samples (a single running sum was a chain of one per sample,
    /// about 40 % of the correlator's own loops, outside FFTW, with all four profiles on 600 s of noise; four
    /// quarters summed side by side and joined afterwards cost a second pass and scattered stores).
    @inline(__always)
    private static func prefixSums(of x: UnsafePointer<Float>, count: Int, into prefix: UnsafeMutablePointer<Double>) {
        @inline(__always) func power(_ i: Int) -> Double {
            Double(x[2 &* i] * x[2 &* i] + x[2 &* i &+ 1] * x[2 &* i &+ 1])
        }
        var total = 0.0
        prefix[0] = 0
        var i = 0
        while i < count {
            let p0 = power(i), p1 = power(i &+ 1), p2 = power(i &+ 2), p3 = power(i &+ 3)
            let first = p0 + p1, second = p2 + p3
            prefix[i &+ 1] = total + p0
            prefix[i &+ 2] = total + first
            prefix[i &+ 3] = (total + first) + p2
            total += first + second
            prefix[i &+ 4] = total
            i &+= 4
        }
    }

    /// `product = x * real + swapPairs(x) * imaginary` over `count` Floats (a multiple of 8: FFT sizes
    /// here are), eight at a time: the complex product of interleaved spectra (see `spectraReal`).
    @inline(__always)
    private static func multiply(_ x: UnsafePointer<Float>, _ real: UnsafePointer<Float>, _ imaginary: UnsafePointer<Float>,
                                 into product: UnsafeMutablePointer<Float>, count: Int) {
        typealias Lanes = SIMD8<Float>
        var i = 0
        while i + Lanes.scalarCount <= count {
            let a = UnsafeRawPointer(x + i).loadUnaligned(as: Lanes.self)
            let swapped = Lanes(a[1], a[0], a[3], a[2], a[5], a[4], a[7], a[6])
            let r = UnsafeRawPointer(real + i).loadUnaligned(as: Lanes.self)
            let m = UnsafeRawPointer(imaginary + i).loadUnaligned(as: Lanes.self)
            UnsafeMutableRawPointer(product + i).storeBytes(of: a * r + swapped * m, as: Lanes.self)
            i += Lanes.scalarCount
        }
        while i < count {
            product[i] = x[i] * real[i] + x[i ^ 1] * imaginary[i]
            i += 1
        }
    }

    /// `values[i] = 1 / values[i]` over `count` values, 0 where the value is not over `tiny` (no energy under
    /// the template), eight at a time. In Float: Double divisions, two at a time in the loop that formed the
    /// energies, were a tenth of the correlators' own time with four profiles on noise.
    @inline(__always)
    private static func invert(_ values: UnsafeMutablePointer<Float>, count: Int) {
        typealias Lanes = SIMD8<Float>
        let one = Lanes(repeating: 1), zero = Lanes(repeating: 0), floor = Lanes(repeating: tiny)
        var i = 0
        while i + Lanes.scalarCount <= count {
            let x = UnsafeRawPointer(values + i).loadUnaligned(as: Lanes.self)
            UnsafeMutableRawPointer(values + i).storeBytes(of: (one / x).replacing(with: zero, where: .!(x .> floor)), as: Lanes.self)
            i += Lanes.scalarCount
        }
        while i < count {
            values[i] = values[i] > tiny ? 1 / values[i] : 0
            i += 1
        }
    }
    /// Energies at or under this are none (an input of exact zeros, as before the stream).
    private static let tiny: Float = 1e-30

    private func runBlock(emit: (Int, (Int) -> UnsafeBufferPointer<Float>) -> Void) {
        let w = UnsafePointer(window.baseAddress!), prefix = energyPrefix.baseAddress!, out = output.baseAddress!
        let fout = UnsafePointer(forward.output.baseAddress!), iin = inverse.input.baseAddress!
        let iout = UnsafePointer(inverse.output.baseAddress!)
        let hop = hop
        Self.prefixSums(of: w, count: fftSize, into: prefix)
        forward.execute()
        computedTemplates = 0
        computedEnergies = 0
        emit(hop) { t in
            precondition(t >= 0 && t < templateCount)
            let row = out + t * hop
            if computedTemplates & (1 << t) == 0 {
                computedTemplates |= 1 << t
                // 1 / energy under the template at each lag, once per block for all templates of its length
                // (0 where there is none).
                let lengthSlot = lengthIndex[t]
                let inverseEnergy = inverseWindowEnergy.baseAddress! + lengthSlot * hop
                if computedEnergies & (1 << lengthSlot) == 0 {
                    computedEnergies |= 1 << lengthSlot
                    let length = distinctLengths[lengthSlot]
                    var n = 0
                    while n < hop {
                        inverseEnergy[n] = Float(prefix[n &+ length] - prefix[n])
                        n &+= 1
                    }
                    Self.invert(inverseEnergy, count: hop)
                }
                Self.multiply(fout, spectraReal.baseAddress! + 2 * t * fftSize,
                              spectraImaginary.baseAddress! + 2 * t * fftSize, into: iin, count: 2 * fftSize)
                inverse.execute()
                // Linear correlation is valid for lags 0..<fftSize - length + 1, which holds 0..<hop (every
                // template fits in the window from each of those lags).
                var n = 0
                while n < hop {
                    let re = iout[2 &* n], im = iout[2 &* n &+ 1]
                    row[n] = Swift.min(1, (re * re + im * im) * inverseEnergy[n])
                    n &+= 1
                }
            }
            return UnsafeBufferPointer(start: row, count: hop)
        }
        // Keep the last templateLength - 1 samples.
        let keep = templateLength - 1
        window.baseAddress!.update(from: window.baseAddress! + 2 * hop, count: 2 * keep)
        windowCount = keep
    }
}
