import RealModule

/// An instantaneous-frequency trajectory made of linear segments (constant tones and linear chirps),
/// smoothed by a Gaussian pulse so that every frequency change is gradual (GFSK), and synthesised with
/// continuous phase and a constant envelope.
///
/// This is how Sotto avoids clicks: the phase never jumps, the frequency never jumps, and the only
/// amplitude changes are the raised-cosine fades at the start and end of the burst.
///
/// Times are in seconds from the start of the burst, frequencies in Hz.
public struct FrequencyTrajectory: Sendable {
    /// One linear piece: the frequency goes from `startFrequency` to `endFrequency` over `duration`.
    public struct Segment: Sendable, Hashable {
        /// Frequency at the start of the segment (Hz).
        public var startFrequency: Double
        /// Frequency at the end of the segment (Hz); equal to `startFrequency` for a tone.
        public var endFrequency: Double
        /// Duration (s), > 0.
        public var duration: Double

        /// A segment of constant frequency.
        public static func tone(_ frequency: Double, duration: Double) -> Segment {
            Segment(startFrequency: frequency, endFrequency: frequency, duration: duration)
        }

        /// A linear chirp.
        public static func chirp(from start: Double, to end: Double, duration: Double) -> Segment {
            Segment(startFrequency: start, endFrequency: end, duration: duration)
        }
    }

    /// The pieces, in order.
    public var segments: [Segment]
    /// Standard deviation of the Gaussian smoothing pulse in time (s); 0 means no smoothing.
    public var smoothingSigma: Double
    /// Duration of each raised-cosine fade (s), at the start and at the end.
    public var fadeDuration: Double

    public init(segments: [Segment], smoothingSigma: Double, fadeDuration: Double) {
        self.segments = segments
        self.smoothingSigma = smoothingSigma
        self.fadeDuration = fadeDuration
    }

    /// Gaussian smoothing sigma (s) for a given bandwidth-time product and symbol time, the usual GFSK
    /// parametrisation: sigma = sqrt(ln 2) / (2 pi B) with B = BT / symbolTime.
    public static func gaussianSigma(bandwidthTime: Double, symbolTime: Double) -> Double {
        Double.log(2.0).squareRoot() / (2 * Double.pi * bandwidthTime / symbolTime)
    }

    /// Total duration (s).
    public var duration: Double { segments.reduce(0) { $0 + $1.duration } }

    /// Number of samples at `sampleRate` (Hz).
    public func sampleCount(sampleRate: Double) -> Int { Int((duration * sampleRate).rounded(.up)) }

    /// Breakpoints of the piecewise-linear frequency: at `time`, the value jumps by `valueJump` (Hz) and the
    /// slope by `slopeJump` (Hz/s).
    private struct Breakpoint {
        var time: Double
        var valueJump: Double
        var slopeJump: Double
    }

    private func breakpoints() -> (baseValue: Double, points: [Breakpoint]) {
        guard let first = segments.first else { return (0, []) }
        var points: [Breakpoint] = []
        var time = 0.0
        var previousEndValue = first.startFrequency
        var previousSlope = 0.0
        for segment in segments {
            let slope = (segment.endFrequency - segment.startFrequency) / segment.duration
            points.append(Breakpoint(time: time, valueJump: segment.startFrequency - previousEndValue,
                                     slopeJump: slope - previousSlope))
            time += segment.duration
            previousEndValue = segment.endFrequency
            previousSlope = slope
        }
        // After the last segment the frequency stays where it ended (the fade-out covers it).
        points.append(Breakpoint(time: time, valueJump: 0, slopeJump: -previousSlope))
        return (first.startFrequency, points)
    }

    /// Calls `body(n, frequency)` with the smoothed instantaneous frequency (Hz) of every sample
    /// `n` in `0..<count` at `sampleRate`. Linear time in `count` plus breakpoints.
    @inline(__always)
    private func forEachFrequency(sampleRate: Double, count: Int, _ body: (Int, Double) -> Void) {
        let (base, points) = breakpoints()
        let sigma = smoothingSigma
        let reach = 6 * sigma
        // Breakpoints fully in the past contribute an exact linear term.
        var settledValue = base
        var settledSlopeSum = 0.0     // sum of slope jumps of settled points
        var settledSlopeOffset = 0.0  // sum of slopeJump * time of settled points
        var firstActive = 0
        let invSigma = sigma > 0 ? 1 / sigma : 0
        let invSqrt2 = 1 / 2.0.squareRoot()
        let invSqrt2Pi = 1 / (2 * Double.pi).squareRoot()
        for n in 0..<count {
            let t = Double(n) / sampleRate
            while firstActive < points.count && points[firstActive].time < t - reach {
                settledValue += points[firstActive].valueJump
                settledSlopeSum += points[firstActive].slopeJump
                settledSlopeOffset += points[firstActive].slopeJump * points[firstActive].time
                firstActive += 1
            }
            var f = settledValue + settledSlopeSum * t - settledSlopeOffset
            var i = firstActive
            while i < points.count && points[i].time <= t + reach {
                let p = points[i]
                let d = t - p.time
                if sigma > 0 {
                    let x = d * invSigma
                    let cdf = 0.5 * (1 + Double.erf(x * invSqrt2))
                    let pdf = invSqrt2Pi * Double.exp(-0.5 * x * x)
                    f += p.valueJump * cdf + p.slopeJump * (d * cdf + sigma * pdf)
                } else if d >= 0 {
                    f += p.valueJump + p.slopeJump * d
                }
                i += 1
            }
            body(n, f)
        }
    }

    /// Raised-cosine envelope value at sample `n` of `count`.
    @inline(__always)
    private func envelope(_ n: Int, count: Int, fadeSamples: Double) -> Double {
        guard fadeSamples > 0 else { return 1 }
        let fromStart = Double(n) + 0.5
        let fromEnd = Double(count - n) - 0.5
        let edge = min(fromStart, fromEnd)
        if edge >= fadeSamples { return 1 }
        return 0.5 - 0.5 * Double.cos(Double.pi * edge / fadeSamples)
    }

    /// Real passband samples at `sampleRate` (Hz) with peak `amplitude` (full scale = 1), written into
    /// `output` (which must hold `sampleCount(sampleRate:)` samples).
    public func synthesize(sampleRate: Double, amplitude: Float, into output: UnsafeMutableBufferPointer<Float>) {
        let count = min(output.count, sampleCount(sampleRate: sampleRate))
        let fadeSamples = fadeDuration * sampleRate
        var phase = 0.0  // cycles, kept in [0, 1)
        let a = Double(amplitude)
        forEachFrequency(sampleRate: sampleRate, count: count) { n, f in
            output[n] = Float(a * envelope(n, count: count, fadeSamples: fadeSamples) * Double.sin(2 * Double.pi * phase))
            phase += f / sampleRate
            phase -= phase.rounded(.down)
        }
    }

    /// Convenience: real passband samples at `sampleRate` (Hz) with peak `amplitude`.
    public func synthesize(sampleRate: Double, amplitude: Float) -> [Float] {
        let count = sampleCount(sampleRate: sampleRate)
        return [Float](unsafeUninitializedCapacity: count) { buffer, initialized in
            synthesize(sampleRate: sampleRate, amplitude: amplitude, into: buffer)
            initialized = count
        }
    }

    /// The analytic (complex) signal shifted down by `centerFrequency` (Hz), at `sampleRate`, unit
    /// amplitude, with the same envelope: the template a baseband receiver correlates against.
    public func synthesizeBaseband(sampleRate: Double, centerFrequency: Double) -> (real: [Float], imaginary: [Float]) {
        let count = sampleCount(sampleRate: sampleRate)
        var re = [Float](repeating: 0, count: count)
        var im = [Float](repeating: 0, count: count)
        let fadeSamples = fadeDuration * sampleRate
        var phase = 0.0
        forEachFrequency(sampleRate: sampleRate, count: count) { n, f in
            let e = envelope(n, count: count, fadeSamples: fadeSamples)
            re[n] = Float(e * Double.cos(2 * Double.pi * phase))
            im[n] = Float(e * Double.sin(2 * Double.pi * phase))
            phase += (f - centerFrequency) / sampleRate
            phase -= phase.rounded(.down)
        }
        return (re, im)
    }
}
