import RealModule
import SottoCodes
import SottoDSP

/// A deterministic pseudo-random generator (xoshiro256**, seeded through SplitMix64): the same sequence
/// on every platform and run, so simulations and fixtures are reproducible.
public struct SeededRandom: RandomNumberGenerator, Sendable {
    private var s: (UInt64, UInt64, UInt64, UInt64)

    public init(seed: UInt64) {
        var seeder = SplitMix64(seed: seed)
        s = (seeder.next(), seeder.next(), seeder.next(), seeder.next())
    }

    public mutating func next() -> UInt64 {
        let result = ((s.1 &* 5) << 7 | (s.1 &* 5) >> 57) &* 9
        let t = s.1 << 17
        s.2 ^= s.0; s.3 ^= s.1; s.1 ^= s.2; s.0 ^= s.3
        s.2 ^= t
        s.3 = s.3 << 45 | s.3 >> 19
        return result
    }

    /// Uniform in [0, 1).
    public mutating func uniform() -> Double { Double(next() >> 11) * 0x1p-53 }

    /// Standard normal N(0, 1) (Box-Muller).
    public mutating func gaussian() -> Double {
        let u1 = max(uniform(), 1e-300), u2 = uniform()
        return (-2 * Double.log(u1)).squareRoot() * Double.cos(2 * Double.pi * u2)
    }
}

/// Channel impairments as plain functions on sample buffers (Float, full scale = 1) at a sample rate
/// in Hz. Powers are mean squares; levels in dB.
public enum Channel {
    /// Mean square of `x`.
    public static func power(_ x: [Float]) -> Double {
        guard !x.isEmpty else { return 0 }
        return x.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(x.count)
    }

    /// Adds white Gaussian noise so that `signalPower` over the noise power (over the whole 0...fs/2
    /// band) is `snrDB`.
    public static func addWhiteNoise(_ x: inout [Float], snrDB: Double, signalPower: Double, rng: inout SeededRandom) {
        let sigma = Float((signalPower / Double.pow(10, snrDB / 10)).squareRoot())
        for i in x.indices { x[i] += sigma * Float(rng.gaussian()) }
    }

    /// Adds Gaussian noise confined to `band` (Hz) with total power `power`.
    /// - Throws: `FFTError` when the transforms cannot be allocated or planned (out of memory).
    public static func addBandLimitedNoise(_ x: inout [Float], sampleRate: Double, band: ClosedRange<Double>, power: Double, rng: inout SeededRandom) throws(FFTError) {
        guard !x.isEmpty else { return }
        let size = fastFFTSize(atLeast: x.count)
        let forward = try RealFFT(checkedSize: size), inverse = try InverseRealFFT(checkedSize: size)
        for i in 0..<size { forward.input[i] = Float(rng.gaussian()) }
        forward.execute()
        for k in 0...(size / 2) {
            let f = Double(k) * sampleRate / Double(size)
            let keep: Float = band.contains(f) ? 1 : 0
            inverse.input[2 * k] = forward.output[2 * k] * keep
            inverse.input[2 * k + 1] = forward.output[2 * k + 1] * keep
        }
        inverse.execute()
        var noise = Array(inverse.output[0..<x.count])
        let scale = Float((power / max(Self.power(noise), 1e-30)).squareRoot())
        for i in noise.indices { x[i] += scale * noise[i] }
        noise.removeAll()
    }

    /// A receiver whose sample clock runs `ppm` parts per million fast (positive) records the signal
    /// stretched by 1 + ppm x 1e-6: more samples, every tone lower by the same factor. The same model
    /// covers Doppler (a source moving away stretches the signal).
    public static func clockOffset(_ x: [Float], ppm: Double) -> [Float] {
        Resampler.resample(x, ratio: 1 + ppm * 1e-6)
    }

    /// Resamples from `from` Hz to `to` Hz.
    public static func resample(_ x: [Float], from: Double, to: Double) -> [Float] {
        from == to ? x : Resampler.resample(x, ratio: to / from)
    }

    /// Speaker and microphone roll-off (``RollOffFilter``): a cascade of second-order Butterworth low-pass sections
    /// at `cornerHz`, 12 dB/octave each, rounded to the nearest whole number of sections.
    /// - Parameters:
    ///   - x: the samples, filtered in place.
    ///   - sampleRate: their rate (Hz).
    ///   - cornerHz: the corner (Hz).
    ///   - slopeDBPerOctave: the slope above it (dB per octave).
    public static func rollOff(_ x: inout [Float], sampleRate: Double, cornerHz: Double, slopeDBPerOctave: Double = RollOffFilter.defaultSlope) {
        var filter = RollOffFilter(cornerHz: cornerHz, slopeDBPerOctave: slopeDBPerOctave, sampleRate: sampleRate)
        filter.process(&x)
    }

    /// Hard clipping at +-`level` (full scale = 1).
    public static func clip(_ x: inout [Float], level: Float) {
        for i in x.indices { x[i] = min(level, max(-level, x[i])) }
    }

    /// 16-bit quantisation, with triangular (TPDF) dither when `dither` is true.
    public static func quantize16(_ x: inout [Float], rng: inout SeededRandom, dither: Bool = true) {
        let step: Float = 1 / 32768
        for i in x.indices {
            let d: Float = dither ? Float(rng.uniform() - rng.uniform()) * step : 0
            let q = ((x[i] + d) / step).rounded() * step
            x[i] = min(32767 * step, max(-1, q))
        }
    }

    /// Adds `interference` (from sample `offset` of `x` on) scaled so that `signalPower` over its power is `sirDB`.
    public static func mix(_ x: inout [Float], interference: [Float], sirDB: Double, signalPower: Double, offset: Int = 0) {
        let p = power(interference)
        guard p > 0 else { return }
        let gain = Float((signalPower / Double.pow(10, sirDB / 10) / p).squareRoot())
        for (i, v) in interference.enumerated() where offset + i >= 0 && offset + i < x.count { x[offset + i] += gain * v }
    }

    /// Power of the active part of `x`: the mean square over samples whose 10 ms RMS is within 40 dB of
    /// the loudest 10 ms (the convention for SNR: silence around a burst does not count).
    public static func activePower(_ x: [Float], sampleRate: Double) -> Double {
        let window = max(1, Int(0.01 * sampleRate))
        var blocks: [Double] = []
        var index = 0
        while index < x.count {
            let end = min(x.count, index + window)
            blocks.append(x[index..<end].reduce(0.0) { $0 + Double($1) * Double($1) } / Double(end - index))
            index = end
        }
        guard let loudest = blocks.max(), loudest > 0 else { return 0 }
        let active = blocks.filter { $0 >= loudest * 1e-4 }
        return active.reduce(0, +) / Double(active.count)
    }
}
