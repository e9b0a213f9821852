import RealModule
import SottoDSP

/// Channel-aware (coherent) symbol detection for reverberant rooms: the receiver's second opinion when
/// the noncoherent tone-energy metric fails.
///
/// In a room the previous symbols' reverberant tails are as loud as the current tone, which defeats any
/// detector that looks at tone energies alone. But the room is a linear filter that hardly changes during
/// one frame, and the frame starts with two known chirps: from them this detector estimates the room's
/// impulse response in complex baseband (regularised least squares, taps expected to decay), and then
/// decides the symbols one by one, subtracting the predicted echoes of everything already decided and
/// comparing what remains with every candidate (this symbol, next symbol) pair passed through the
/// estimated room. The reverberation becomes signal instead of interference.
///
/// Work happens on a grid of `samplesPerSymbol` samples per symbol in the transmitter's own time base:
/// the receiver's baseband is interpolated at the frame's estimated start and time scale and de-rotated,
/// so clock and Doppler offsets are taken out before anything else; a decision-directed phase loop
/// follows what remains. The parts, each in its own file: `CandidateShapes` (the known waveforms, built
/// once per profile and rate), `RoomEstimator` (the room fit, solved by `HermitianSystem` in SottoDSP)
/// and `SequenceDecision` (the symbol-by-symbol decision); this type interpolates the grid and runs them.
/// Built lazily, the first time a receiver needs it.
final class CoherentDetector {
    let profile: Profile
    /// The known waveforms and the grid's geometry (shared between receivers of the same profile and rate).
    let shapes: CandidateShapes
    let estimator: RoomEstimator
    let decision: SequenceDecision
    /// Half-length (baseband samples) of the interpolation kernel.
    static let interpolationHalfWidth = 8
    /// Precursor length (s): the room model's reach before the detected start.
    static var precursorDuration: Double { CandidateShapes.precursorDuration }

    /// A detector for the token frames of `profile`, or its alias frames (`aliasPreamble`: two up-chirps).
    init(profile: Profile, basebandRate: Double, centerFrequency: Double, aliasPreamble: Bool = false,
         tuning: ReceiverTuning = .standard) {
        self.profile = profile
        shapes = CandidateShapes.shared(profile: profile, basebandRate: basebandRate, centerFrequency: centerFrequency,
                                        aliasPreamble: aliasPreamble)
        estimator = RoomEstimator(shapes: shapes)
        decision = SequenceDecision(shapes: shapes, tuning: tuning)
    }

    /// Grid samples of the window each symbol is decided over (two symbols: the current and the next).
    var decisionWindow: Int { 2 * shapes.samplesPerSymbol }

    private var gridRate: Double { shapes.gridRate }
    private var basebandRate: Double { shapes.basebandRate }
    private var centerFrequency: Double { shapes.centerFrequency }

    // MARK: One frame

    /// The detector's state for one frame being received.
    final class Frame {
        let start: Double            // baseband samples, fractional
        let scale: Double            // time scale (stretch)
        let noiseVariance: Double    // complex noise variance per baseband sample
        /// Grid samples interpolated so far (interleaved complex), from grid index -origin.
        var grid: [Float] = []
        let origin: Int
        /// Room model (interleaved complex, `channelTaps`), window offset, prediction of what was decided.
        var channel: [Float] = []
        var windowOffset = 0
        var predicted: [Float] = []
        /// Decided tones, the accumulated phase at the next symbol, and the phase loop.
        var decided: [Int] = []
        var phase = 0.0
        var rotation = (re: 1.0, im: 0.0)
        var frequency = 0.0
        /// Per symbol: the 16 costs (squared distance of the best pair with each current value).
        var costs: [Float] = []
        /// Candidate parts through the room as seen in a symbol's window (the same for every symbol of a
        /// parity): part 1 by [parity][previous * 16 + current], part 2 by [parity][current * 16 + next].
        var tables: [SequenceDecision.FilteredParts] = []
        var residual: [Float] = []
        var failed = false
        /// What was transmitted, as far as decided (interleaved complex, by grid index from the frame start).
        var sent: [Float] = []
        /// The room model's first tap within 5 dB of its strongest (the direct sound, as far as the fit sees it).
        var firstStrongTap = 0
        /// Share of the preamble's power the room model does not explain.
        var unexplained = 1.0
        /// Symbols to take as sent instead of the decisions (see `redecided`); empty on a first pass.
        var hints: [Int] = []
        /// Long rooms: each symbol's echoes are predicted from the expected waveform under its values'
        /// posteriors rather than from the decided value alone (`ReceiverTuning.softScale`). There a
        /// quarter to a third of the decisions are wrong, and each wrong one subtracted a wrong echo from
        /// the next 70 ms of symbols: with the sent symbols' echoes instead (known for the experiment),
        /// 16-byte frames in the long synthetic room decoded 37 of 40 instead of 25.
        var softFeedback = false
        /// Soft feedback: running level of the best candidates' costs (squared distance over a decision
        /// window, per symbol).
        var residualLevel = 0.0
        init(start: Double, scale: Double, noiseVariance: Double, origin: Int) {
            self.start = start
            self.scale = scale
            self.noiseVariance = noiseVariance
            self.origin = origin
        }

        /// Grid sample `n` (from the frame start) as (re, im).
        @inline(__always) func sample(_ n: Int) -> (Double, Double) {
            let i = 2 * (n + origin)
            return (Double(grid[i]), Double(grid[i + 1]))
        }

        /// Adds transmitted sample (re, im) at grid index `m`, passed through the room model (`channel`, whose
        /// first `precursorTaps` taps precede the direct sound), to the prediction.
        @inline(__always) func addConvolved(re: Float, im: Float, at m: Int, precursorTaps: Int) {
            let taps = channel.count / 2
            let base = m - precursorTaps + origin
            channel.withUnsafeBufferPointer { h in
                predicted.withUnsafeMutableBufferPointer { p in
                    // Taps whose output lands inside the prediction.
                    let low = max(0, -base), high = min(taps, p.count / 2 - base)
                    guard low < high, let h = h.baseAddress, let p = p.baseAddress else { return }
                    for l in low..<high {
                        let hr = h[2 * l], hi = h[2 * l + 1]
                        p[2 * (base + l)] += hr * re - hi * im
                        p[2 * (base + l) + 1] += hr * im + hi * re
                    }
                }
            }
        }
    }

    func makeFrame(start: Double, scale: Double, noiseVariance: Double) -> Frame {
        Frame(start: start, scale: scale, noiseVariance: max(noiseVariance, 1e-20),
              origin: shapes.precursorTaps + 1)
    }

    /// A frame started where `frame`'s room fit puts the direct sound, when that is earlier than its symbol
    /// windows can reach: the preamble detector locked onto a reflection louder than the direct sound (far from
    /// the speaker in a reverberant room, where the reflections' sum outweighs it). Nil when the fit did not
    /// place the direct sound too early (or was not made).
    func reanchored(_ frame: Frame) -> Frame? {
        guard !frame.channel.isEmpty, frame.unexplained < 1 else { return nil }
        let early = shapes.precursorTaps - frame.firstStrongTap
        guard early > shapes.guardSamples / 2 else { return nil }
        let shift = Double(early) / gridRate * basebandRate * frame.scale
        let moved = makeFrame(start: frame.start - shift, scale: frame.scale, noiseVariance: frame.noiseVariance)
        moved.softFeedback = frame.softFeedback
        return moved
    }

    /// Baseband position (fractional samples) of grid index `n` of `frame`.
    private func basebandPosition(_ frame: Frame, _ n: Int) -> Double {
        frame.start + Double(n) / gridRate * basebandRate * frame.scale
    }

    /// True when the baseband holds what symbols 0..<`symbols` need (up to `available` samples written).
    func isAvailable(_ frame: Frame, symbols: Int, available: Int) -> Bool {
        requiredSamples(start: frame.start, scale: frame.scale, symbols: symbols) <= available
    }

    /// Baseband samples that must have been written before symbols 0..<`symbols` of a frame detected at
    /// `start` (baseband samples) with time scale `scale` can be decided.
    func requiredSamples(start: Double, scale: Double, symbols: Int) -> Int {
        let last = start + Double(shapes.windowEnd(symbols - 1)) / gridRate * basebandRate * scale
        return Int((last + Double(Self.interpolationHalfWidth) + 1).rounded(.down)) + 1
    }

    /// Processes symbols until `symbols` are decided (the caller checked `isAvailable`), then returns their
    /// log-likelihoods (16 per symbol), or nil when the room could not be estimated.
    func likelihoods(_ frame: Frame, symbols: Int, history: BasebandHistory) -> [Float]? {
        guard !frame.failed else { return nil }
        interpolate(frame, upTo: shapes.windowEnd(symbols - 1), history: history)
        if frame.channel.isEmpty && !estimator.estimate(frame) { frame.failed = true; return nil }
        while frame.decided.count < symbols { decision.decideNext(frame) }
        // Noise for the metric: the measured noise, or what the best candidates leave unexplained when the
        // room model is the larger error (so that a poor model does not make overconfident decisions).
        var residuals = (0..<symbols).map { k in frame.costs[16 * k..<16 * k + 16].min() ?? 0 }
        residuals.sort()
        let window = Double(decisionWindow)
        let variance = Float(max(frame.noiseVariance, Double(residuals[residuals.count / 2]) / window))
        return frame.costs[0..<(16 * symbols)].map { -$0 / variance }
    }

    /// A second pass for a frame whose first one failed: the room fitted again over everything decided so far
    /// (`symbols` symbols, not just the preamble: many more equations, so a much better model), and the
    /// symbols decided again from the start with it. Nil when the fit fails.
    func refined(_ frame: Frame, symbols: Int) -> Frame? {
        guard !frame.failed, frame.decided.count >= symbols else { return nil }
        let second = Frame(start: frame.start, scale: frame.scale, noiseVariance: frame.noiseVariance, origin: frame.origin)
        second.grid = frame.grid
        let support = shapes.preambleLength - shapes.guardSamples + symbols * shapes.samplesPerSymbol
        guard estimator.estimate(second, source: frame.sent, support: support) else { return nil }
        return second
    }

    /// A second pass for a frame whose first one failed in a long room: the same room model, the symbols
    /// decided again from the start, each one's costs measured as before but the echoes predicted from
    /// `hints` (what the code's decision of the failed pass re-encodes to) instead of from the decisions.
    /// In a long room a quarter to a third of the decisions are wrong and each wrong one subtracts a wrong
    /// echo from the next ones; the code's decision has far fewer wrong symbols. Nil when the first pass
    /// had no room model.
    func redecided(_ frame: Frame, hints: [Int]) -> Frame? {
        guard !frame.failed, !frame.channel.isEmpty else { return nil }
        let second = Frame(start: frame.start, scale: frame.scale, noiseVariance: frame.noiseVariance, origin: frame.origin)
        second.grid = frame.grid
        second.channel = frame.channel
        second.windowOffset = frame.windowOffset
        second.tables = frame.tables
        second.residual = frame.residual
        second.unexplained = frame.unexplained
        second.hints = hints
        estimator.startPrediction(second)
        return second
    }

    /// Interpolates the baseband at the frame's grid up to grid index `end` (exclusive), de-rotating the
    /// carrier shift a time scale leaves: windowed-sinc interpolation (Blackman window).
    private func interpolate(_ frame: Frame, upTo end: Int, history: BasebandHistory) {
        let real = history.real, imaginary = history.imaginary, mask = history.mask
        let have = frame.grid.count / 2
        let total = end + frame.origin
        guard total > have else { return }
        frame.grid.reserveCapacity(2 * total)
        let half = Self.interpolationHalfWidth
        let rotationRate = -2 * Double.pi * centerFrequency * (1 - frame.scale) / gridRate
        // The kernel at x = m - fraction, from three sines and cosines of the fraction per grid sample
        // instead of three per tap: sin(pi (m - f)) = (-1)^(m+1) sin(pi f), and the Blackman window's
        // cos(pi (m - f) / half) by the angle difference (its cos(2 ...) as 2 cos^2 - 1).
        let taps = 2 * half
        var tapCos = [Double](repeating: 0, count: taps), tapSin = tapCos
        for t in 0..<taps {
            let m = Double(t - half + 1)
            tapCos[t] = Double.cos(Double.pi * m / Double(half)); tapSin[t] = Double.sin(Double.pi * m / Double(half))
        }
        for index in have..<total {
            let n = index - frame.origin
            let position = basebandPosition(frame, n)
            let base = Int(position.rounded(.down))
            let fraction = position - Double(base)
            let sinFraction = Double.sin(Double.pi * fraction)
            let windowCos = Double.cos(Double.pi * fraction / Double(half)), windowSin = Double.sin(Double.pi * fraction / Double(half))
            var accR = 0.0, accI = 0.0
            for t in 0..<taps {
                let m = t - half + 1
                let x = Double(m) - fraction
                let sinc = abs(x) < 1e-9 ? 1.0 : (m & 1 == 0 ? -sinFraction : sinFraction) / (Double.pi * x)
                let c = tapCos[t] * windowCos + tapSin[t] * windowSin
                let w = 0.42 + 0.5 * c + 0.08 * (2 * c * c - 1)
                let weight = sinc * w
                accR += weight * Double(real[(base + m) & mask])
                accI += weight * Double(imaginary[(base + m) & mask])
            }
            let angle = rotationRate * Double(n)
            let c = Double.cos(angle), s = Double.sin(angle)
            frame.grid.append(Float(accR * c - accI * s))
            frame.grid.append(Float(accR * s + accI * c))
        }
    }
}
