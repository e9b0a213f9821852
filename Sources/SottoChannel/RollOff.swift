import RealModule

/// A speaker's and microphone's loss at high frequencies: a cascade of second-order Butterworth low-pass sections
/// at one corner (Hz), 12 dB per octave each, as many as the slope asks (rounded; at least one).
///
/// Small phone speakers and some microphones' ports lose 20-40 dB across 18-20 kHz against their mid band
/// (CHANNEL.md); this is the model the simulator and the sweeps apply for them. One owner; it keeps the sections'
/// state across calls, so that a stream filtered block by block equals the whole filtered at once.
public struct RollOffFilter: Sendable {
    /// Corner frequency (Hz).
    public let cornerHz: Double
    /// Slope above the corner (dB per octave), as made: a multiple of 12.
    public let slopeDBPerOctave: Double
    /// Sample rate (Hz).
    public let sampleRate: Double
    private let b0: Double, b1: Double, b2: Double, a1: Double, a2: Double
    /// Each section's (x1, x2, y1, y2).
    private var state: [(Double, Double, Double, Double)]

    /// The default slope (dB per octave): two sections.
    public static let defaultSlope = 24.0

    /// - Parameters:
    ///   - cornerHz: the corner (Hz); at or above half the sample rate the filter passes everything.
    ///   - slopeDBPerOctave: the slope above the corner (dB per octave), rounded to a multiple of 12.
    ///   - sampleRate: the signal's rate (Hz).
    public init(cornerHz: Double, slopeDBPerOctave: Double = RollOffFilter.defaultSlope, sampleRate: Double) {
        self.cornerHz = cornerHz
        self.sampleRate = sampleRate
        let sections = max(1, Int((slopeDBPerOctave / 12).rounded()))
        self.slopeDBPerOctave = 12 * Double(sections)
        let w0 = 2 * Double.pi * min(cornerHz, 0.499 * sampleRate) / sampleRate
        let alpha = Double.sin(w0) / (2 * 0.7071067811865476)
        let cosW = Double.cos(w0)
        let a0 = 1 + alpha
        b0 = (1 - cosW) / 2 / a0
        b1 = (1 - cosW) / a0
        b2 = b0
        a1 = -2 * cosW / a0
        a2 = (1 - alpha) / a0
        state = cornerHz < sampleRate / 2 ? Array(repeating: (0, 0, 0, 0), count: sections) : []
    }

    /// Filters `x` in place, going on from the previous call.
    /// - Parameter x: the next samples.
    public mutating func process(_ x: inout [Float]) {
        for s in state.indices {
            var (x1, x2, y1, y2) = state[s]
            for i in x.indices {
                let input = Double(x[i])
                let output = b0 * input + b1 * x1 + b2 * x2 - a1 * y1 - a2 * y2
                x2 = x1; x1 = input; y2 = y1; y1 = output
                x[i] = Float(output)
            }
            state[s] = (x1, x2, y1, y2)
        }
    }

    /// The filter's loss at `frequency` (dB, positive: weaker), from its transfer function.
    /// - Parameter frequency: the frequency (Hz), below half the sample rate.
    public func attenuationDB(at frequency: Double) -> Double {
        guard !state.isEmpty else { return 0 }
        let w = 2 * Double.pi * frequency / sampleRate
        // H(e^jw) = (b0 + b1 e^-jw + b2 e^-2jw) / (1 + a1 e^-jw + a2 e^-2jw), per section.
        func magnitudeSquared(_ c0: Double, _ c1: Double, _ c2: Double) -> Double {
            let re = c0 + c1 * Double.cos(w) + c2 * Double.cos(2 * w)
            let im = -c1 * Double.sin(w) - c2 * Double.sin(2 * w)
            return re * re + im * im
        }
        let section = magnitudeSquared(b0, b1, b2) / max(magnitudeSquared(1, a1, a2), 1e-300)
        return -10 * Double.log10(max(section, 1e-300)) * Double(state.count)
    }

    /// The corner (Hz) that makes a filter of `slopeDBPerOctave` lose `lossDB` at `frequency`, found by bisection
    /// between 100 Hz and just under half the sample rate.
    /// - Parameters:
    ///   - lossDB: the loss wanted (dB).
    ///   - frequency: where (Hz).
    ///   - slopeDBPerOctave: the filter's slope (dB per octave).
    ///   - sampleRate: the signal's rate (Hz).
    /// - Returns: the corner (Hz), or nil for a loss of 0 dB or less.
    public static func corner(forLossDB lossDB: Double, at frequency: Double, slopeDBPerOctave: Double = defaultSlope,
                              sampleRate: Double) -> Double? {
        guard lossDB > 0 else { return nil }
        var low = 100.0, high = 0.499 * sampleRate
        for _ in 0..<60 {
            let middle = (low * high).squareRoot()
            let loss = RollOffFilter(cornerHz: middle, slopeDBPerOctave: slopeDBPerOctave, sampleRate: sampleRate).attenuationDB(at: frequency)
            if loss > lossDB { low = middle } else { high = middle }
        }
        return (low * high).squareRoot()
    }
}
