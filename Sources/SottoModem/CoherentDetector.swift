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
/// follows what remains. Cost per frame (default profile, 275 taps): building the room fit's normal
/// equations and solving them by Cholesky, about 3.5 million complex multiply-adds; filtering the
/// candidate parts through the room, about 1.5 million; then about 45 000 per symbol. Built lazily, the
/// first time a receiver needs it (its tables take a few milliseconds).
final class CoherentDetector {
    let profile: Profile
    /// Grid samples per symbol.
    let samplesPerSymbol: Int
    /// Grid rate (Hz): `samplesPerSymbol` / symbol time.
    let gridRate: Double
    /// Baseband rate of the receiver (Hz) and the frequency its baseband is centred on (Hz).
    let basebandRate: Double
    let centerFrequency: Double
    /// Grid samples of the preamble (two chirps), and how many of them are known whatever the first symbol is.
    let preambleLength: Int
    let knownPreamble: Int
    /// The transmitted preamble on the grid (unit amplitude, with the fade-in), `knownPreamble` samples.
    let preambleReal: [Float], preambleImaginary: [Float]
    /// Phase (radians) of the transmitted signal at the first data symbol, in the preamble's reference.
    let dataStartPhase: Double
    /// Samples before each symbol's start covered by its candidate segment (the Gaussian transition).
    let guardSamples: Int
    /// Taps of the room model: `precursorTaps` before the detected start (the detector may lock onto a
    /// reflection stronger than the direct sound), the rest after.
    let channelTaps: Int
    let precursorTaps: Int
    /// Largest window offset (grid samples) after the symbol start: the main arrivals may come late.
    let maximumWindowOffset: Int
    /// Candidate segment length (grid samples) and the split between the part shaped by (previous,
    /// current) and the part shaped by (current, next).
    let segmentLength: Int
    let segmentSplit: Int
    /// Rate (Hz) at which the known waveforms are synthesised, as a transmitting device would.
    static let synthesisRate = 48_000.0
    /// Half-length (baseband samples) of the interpolation kernel.
    static let interpolationHalfWidth = 8
    /// Time constant of the prior on the taps' power (s): rooms decay; taps far out are expected small.
    static let tapDecayTime = 0.020
    /// Room model length after the detected start (s).
    static let channelDuration = 0.070
    /// Precursor length (s).
    static let precursorDuration = 0.004
    /// Largest share of the preamble's power the room model may leave unexplained: real frames leave
    /// 0.01-0.2 at 20 dB SNR (measured rooms and synthetic ones), detections that are not frames of this
    /// profile mostly 0.3-1.
    static let maximumUnexplained = 0.35
    /// Decision-directed phase loop gains (per symbol): phase and frequency.
    static let phaseGain = 0.3, frequencyGain = 0.02
    /// Candidate segments' phase shapes (radians, without the accumulated phase), per sub-band parity:
    /// part 1 indexed [previous tone 0...16 (16 = the chirp's end)][current], part 2 [current][next].
    private let shapes1: [[[Float]]]   // [parity][(prev * 16 + a)] -> interleaved complex, segmentSplit samples
    private let shapes2: [[[Float]]]   // [parity][(a * 16 + b)] -> interleaved complex, segmentLength - segmentSplit

    init(profile: Profile, basebandRate: Double, centerFrequency: Double) {
        self.profile = profile
        self.basebandRate = basebandRate
        self.centerFrequency = centerFrequency
        let symbolTime = profile.symbolTime
        samplesPerSymbol = max(16, Int((basebandRate * symbolTime).rounded(.up)))
        gridRate = Double(samplesPerSymbol) / symbolTime
        let preambleTime = 2 * profile.chirpDuration
        preambleLength = Int((preambleTime * gridRate).rounded())
        guardSamples = Int((0.25 * Double(samplesPerSymbol)).rounded(.up))
        precursorTaps = Int((Self.precursorDuration * gridRate).rounded())
        channelTaps = precursorTaps + Int((Self.channelDuration * gridRate).rounded())
        maximumWindowOffset = 3 * samplesPerSymbol
        segmentLength = guardSamples + 2 * samplesPerSymbol + maximumWindowOffset
        segmentSplit = guardSamples + samplesPerSymbol / 2
        knownPreamble = preambleLength - guardSamples
        let sigma = FrequencyTrajectory.gaussianSigma(bandwidthTime: profile.bandwidthTime, symbolTime: symbolTime)
        let gridRate = self.gridRate, guardSamples = self.guardSamples
        let segmentLength = self.segmentLength, segmentSplit = self.segmentSplit
        let knownPreamble = self.knownPreamble
        // Known waveforms are synthesised as the transmitter does (phase summed sample by sample at a
        // typical device rate, which a coarse grid would get wrong by up to a radian) and read at the grid
        // times by interpolating amplitude and unwrapped phase.
        func transmitted(at times: [Double]) -> [(amplitude: Double, phase: Double)] {
            var segments = Modulator.preambleSegments(profile)
            segments.append(.tone(profile.lowFrequency, duration: 3 * symbolTime))  // a dummy first symbol
            let rate = Self.synthesisRate
            let wave = FrequencyTrajectory(segments: segments, smoothingSigma: sigma, fadeDuration: profile.fadeDuration)
                .synthesizeBaseband(sampleRate: rate, centerFrequency: centerFrequency)
            var phases = [Double](repeating: 0, count: wave.real.count)
            var previous = 0.0, unwrap = 0.0
            for n in phases.indices {
                let p = Double.atan2(y: Double(wave.imaginary[n]), x: Double(wave.real[n]))
                if n > 0 { unwrap += (p - previous).remainder(dividingBy: 2 * Double.pi) - (p - previous) }
                phases[n] = p + unwrap
                previous = p
            }
            return times.map { t in
                let position = t * rate
                let n = min(max(0, Int(position.rounded(.down))), phases.count - 2)
                let w = position - Double(n)
                let a0 = Double(wave.real[n] * wave.real[n] + wave.imaginary[n] * wave.imaginary[n]).squareRoot()
                let a1 = Double(wave.real[n + 1] * wave.real[n + 1] + wave.imaginary[n + 1] * wave.imaginary[n + 1]).squareRoot()
                return ((1 - w) * a0 + w * a1, (1 - w) * phases[n] + w * phases[n + 1])
            }
        }
        let lowOffset = profile.lowFrequency - centerFrequency
        let probeTime = preambleTime + 2 * symbolTime
        let firstTimes = (0..<segmentSplit).map { preambleTime + Double($0 - guardSamples) / gridRate }
        let preambleTimes = (0..<knownPreamble).map { Double($0) / gridRate } + [probeTime] + firstTimes
        let known = transmitted(at: preambleTimes)
        let dummyFirst = Array(known.suffix(segmentSplit))
        preambleReal = known.prefix(knownPreamble).map { Float($0.amplitude * Double.cos($0.phase)) }
        preambleImaginary = known.prefix(knownPreamble).map { Float($0.amplitude * Double.sin($0.phase)) }
        // The phase at the data start: two symbols of the dummy tone before the probe (exact: the smoothing
        // preserves the phase integral, and the summation's error depends on the current frequency only,
        // which is the chirp's start frequency at both ends).
        let startPhase = known[knownPreamble].phase - 2 * Double.pi * lowOffset * 2 * symbolTime
        dataStartPhase = startPhase
        // Phase shapes of the candidate segments (GFSK: each symbol's phase ramps over its symbol time,
        // the ramp's edges smoothed by the Gaussian), plus the transmitter's summation error at its
        // current frequency, -pi (f - f0) / rate.
        func cdf(_ t: Double) -> Double { 0.5 * (1 + Double.erf(t / sigma / 2.0.squareRoot())) }
        func psi(_ t: Double) -> Double {
            let u = t / sigma
            return t * cdf(t) + sigma * Double.exp(-0.5 * u * u) / (2 * Double.pi).squareRoot()
        }
        func ramp(_ t: Double) -> Double { (psi(t) - psi(t - symbolTime)) / symbolTime }
        func pulse(_ t: Double) -> Double { cdf(t) - cdf(t - symbolTime) }  // symbolTime x ramp'
        let summation = -Double.pi / Self.synthesisRate
        let laterSymbols = (segmentLength - guardSamples) / samplesPerSymbol + 1
        let offset = { (value: Int, parity: Int) -> Double in
            profile.toneFrequency(symbolIndex: parity, value: value) - centerFrequency
        }
        // Ramp and pulse values on the grid (every time a shape needs is a whole number of grid samples from
        // a symbol boundary): index n + rampOrigin holds the value at n / gridRate.
        let rampOrigin = guardSamples + (segmentLength / samplesPerSymbol + 2) * samplesPerSymbol
        let rampCount = rampOrigin + segmentLength + samplesPerSymbol + 1
        let rampTable = (0..<rampCount).map { ramp(Double($0 - rampOrigin) / gridRate) }
        let pulseTable = (0..<rampCount).map { pulse(Double($0 - rampOrigin) / gridRate) }
        let psiTable = (0..<rampCount).map { psi(Double($0 - rampOrigin) / gridRate) }
        let cdfTable = (0..<rampCount).map { cdf(Double($0 - rampOrigin) / gridRate) }
        func rampAt(_ n: Int) -> Double { rampTable[n + rampOrigin] }
        func pulseAt(_ n: Int) -> Double { pulseTable[n + rampOrigin] }
        var first: [[[Float]]] = [], second: [[[Float]]] = []
        for parity in 0..<profile.subBands {
            var part1: [[Float]] = [], part2: [[Float]] = []
            let previousParity = (parity + profile.subBands - 1) % profile.subBands
            let nextParity = (parity + 1) % profile.subBands
            for previous in 0...16 {
                for current in 0..<16 {
                    var shape = [Float](repeating: 0, count: 2 * segmentSplit)
                    if previous == 16 {
                        // The first symbol follows the down-chirp: its part 1 is the transmitted preamble (with a
                        // dummy first tone at the chirp's end frequency) plus the smoothed step to the real one.
                        guard parity == 0 else { part1.append(shape); continue }
                        let step = profile.toneFrequency(symbolIndex: 0, value: current) - profile.lowFrequency
                        for i in 0..<segmentSplit {
                            let n = i - guardSamples
                            let phase = dummyFirst[i].phase - startPhase
                                + 2 * Double.pi * step * psiTable[n + rampOrigin] + summation * step * cdfTable[n + rampOrigin]
                            shape[2 * i] = Float(dummyFirst[i].amplitude * Double.cos(phase))
                            shape[2 * i + 1] = Float(dummyFirst[i].amplitude * Double.sin(phase))
                        }
                    } else {
                        let dPrevious = offset(previous, previousParity), dCurrent = offset(current, parity)
                        for i in 0..<segmentSplit {
                            let n = i - guardSamples
                            let f = dPrevious * pulseAt(n + samplesPerSymbol) + dCurrent * pulseAt(n)
                            let phase = 2 * Double.pi * symbolTime * (dPrevious * (rampAt(n + samplesPerSymbol) - 1) + dCurrent * rampAt(n))
                                + summation * (f - lowOffset)
                            shape[2 * i] = Float(Double.cos(phase))
                            shape[2 * i + 1] = Float(Double.sin(phase))
                        }
                    }
                    part1.append(shape)
                }
            }
            for current in 0..<16 {
                let dCurrent = offset(current, parity)
                for next in 0..<16 {
                    let dNext = offset(next, nextParity)
                    var shape = [Float](repeating: 0, count: 2 * (segmentLength - segmentSplit))
                    for i in segmentSplit..<segmentLength {
                        let n = i - guardSamples
                        // The next tone stands for every later symbol too (a late window sees them through
                        // the early arrivals, which are then the weaker ones).
                        var f = dCurrent * pulseAt(n), ramps = 0.0
                        for m in 1...laterSymbols {
                            f += dNext * pulseAt(n - m * samplesPerSymbol)
                            ramps += rampAt(n - m * samplesPerSymbol)
                        }
                        let phase = 2 * Double.pi * symbolTime * (dCurrent * rampAt(n) + dNext * ramps) + summation * (f - lowOffset)
                        shape[2 * (i - segmentSplit)] = Float(Double.cos(phase))
                        shape[2 * (i - segmentSplit) + 1] = Float(Double.sin(phase))
                    }
                    part2.append(shape)
                }
            }
            first.append(part1)
            second.append(part2)
        }
        shapes1 = first
        shapes2 = second
    }

    /// Frequency offset of tone `value` at symbol `k` from the baseband centre (Hz).
    private func toneOffset(_ k: Int, _ value: Int) -> Double {
        profile.toneFrequency(symbolIndex: k, value: value) - centerFrequency
    }

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
        var tables: [FilteredParts] = []
        var residual: [Float] = []
        var failed = false
        /// What was transmitted, as far as decided (interleaved complex, by grid index from the frame start).
        var sent: [Float] = []
        /// Share of the preamble's power the room model does not explain.
        var unexplained = 1.0
        init(start: Double, scale: Double, noiseVariance: Double, origin: Int) {
            self.start = start
            self.scale = scale
            self.noiseVariance = noiseVariance
            self.origin = origin
        }
    }

    func makeFrame(start: Double, scale: Double, noiseVariance: Double) -> Frame {
        Frame(start: start, scale: scale, noiseVariance: max(noiseVariance, 1e-20),
              origin: precursorTaps + 1)
    }

    /// Grid index (from the frame start) of the first sample symbol `k`'s window needs, and one past the last.
    private func windowEnd(_ k: Int) -> Int { preambleLength + (k + 2) * samplesPerSymbol + maximumWindowOffset }

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
        let last = start + Double(windowEnd(symbols - 1)) / gridRate * basebandRate * scale
        return Int((last + Double(Self.interpolationHalfWidth) + 1).rounded(.down)) + 1
    }

    /// Processes symbols until `symbols` are decided (the caller checked `isAvailable`), then returns their
    /// log-likelihoods (16 per symbol), or nil when the room could not be estimated.
    func likelihoods(_ frame: Frame, symbols: Int, history: BasebandHistory) -> [Float]? {
        guard !frame.failed else { return nil }
        interpolate(frame, upTo: windowEnd(symbols - 1), history: history)
        if frame.channel.isEmpty && !estimateChannel(frame) { frame.failed = true; return nil }
        while frame.decided.count < symbols { decideNext(frame) }
        // Noise for the metric: the measured noise, or what the best candidates leave unexplained when the
        // room model is the larger error (so that a poor model does not make overconfident decisions).
        var residuals = (0..<symbols).map { k in frame.costs[16 * k..<16 * k + 16].min() ?? 0 }
        residuals.sort()
        let window = Double(2 * samplesPerSymbol)
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
        let support = preambleLength - guardSamples + symbols * samplesPerSymbol
        guard estimateChannel(second, source: frame.sent, support: support) else { return nil }
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
        for index in have..<total {
            let n = index - frame.origin
            let position = basebandPosition(frame, n)
            let base = Int(position.rounded(.down))
            let fraction = position - Double(base)
            var accR = 0.0, accI = 0.0
            for m in (-half + 1)...half {
                let x = Double(m) - fraction
                let sinc = abs(x) < 1e-9 ? 1.0 : Double.sin(Double.pi * x) / (Double.pi * x)
                let w = 0.42 + 0.5 * Double.cos(Double.pi * x / Double(half)) + 0.08 * Double.cos(2 * Double.pi * x / Double(half))
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

    /// Grid sample `n` (from the frame start) as (re, im).
    @inline(__always) private func sample(_ frame: Frame, _ n: Int) -> (Double, Double) {
        let i = 2 * (n + frame.origin)
        return (Double(frame.grid[i]), Double(frame.grid[i + 1]))
    }

    /// Estimates the room from the known part of the preamble: minimises |y - X h|^2 + sum nvar / p_l |h_l|^2,
    /// with a prior tap power p_l decaying after the direct sound (the preamble is shorter than the room, so
    /// plain least squares is ill-conditioned). Then places the symbol window at the first strong arrival.
    /// With `source` (interleaved complex transmitted samples, `support` of them: a decided frame), the fit
    /// uses all of it instead of the preamble alone.
    private func estimateChannel(_ frame: Frame, source: [Float]? = nil, support: Int? = nil) -> Bool {
        let taps = channelTaps, pre = precursorTaps
        let known = support ?? knownPreamble
        // Rows: every received sample whose contributions all come from known transmitted samples.
        let firstRow = -pre, endRow = known - pre
        guard endRow - firstRow > taps / 2 else { return false }
        let preambleReal = self.preambleReal, preambleImaginary = self.preambleImaginary
        @inline(__always) func x(_ m: Int) -> (Double, Double) {
            guard m >= 0 && m < known else { return (0, 0) }
            if let source { return (Double(source[2 * m]), Double(source[2 * m + 1])) }
            return (Double(preambleReal[m]), Double(preambleImaginary[m]))
        }
        // y[n] = sum_l h_l x[n - l + pre]. Normal matrix R[i][j] = sum_n conj(x[n-i+pre]) x[n-j+pre] over the
        // rows, filled along its diagonals: R[i+1][j+1] = R[i][j] + (term of row firstRow-1) - (term of row endRow-1).
        var gramRe = [Double](repeating: 0, count: taps * taps), gramIm = gramRe
        for j in 0..<taps {
            var sr = 0.0, si = 0.0
            for n in firstRow..<endRow {
                let (ar, ai) = x(n + pre), (br, bi) = x(n - j + pre)
                sr += ar * br + ai * bi
                si += ar * bi - ai * br
            }
            gramRe[j] = sr; gramIm[j] = si
        }
        for i in 0..<(taps - 1) {
            for j in i..<(taps - 1) {
                let (ar, ai) = x(firstRow - 1 - i + pre), (br, bi) = x(firstRow - 1 - j + pre)
                let (cr, ci) = x(endRow - 1 - i + pre), (dr, di) = x(endRow - 1 - j + pre)
                gramRe[(i + 1) * taps + j + 1] = gramRe[i * taps + j] + (ar * br + ai * bi) - (cr * dr + ci * di)
                gramIm[(i + 1) * taps + j + 1] = gramIm[i * taps + j] + (ar * bi - ai * br) - (cr * di - ci * dr)
            }
        }
        var rhsRe = [Double](repeating: 0, count: taps), rhsIm = rhsRe
        var received = 0.0
        for n in firstRow..<endRow {
            let (yr, yi) = sample(frame, n)
            received += yr * yr + yi * yi
            for l in 0..<taps {
                let (ar, ai) = x(n - l + pre)
                guard ar != 0 || ai != 0 else { continue }
                rhsRe[l] += ar * yr + ai * yi
                rhsIm[l] += ar * yi - ai * yr
            }
        }
        // Prior: flat over the precursor and a few samples, then decaying; scaled to the received power.
        let decay = Self.tapDecayTime * gridRate
        let onset = pre + guardSamples / 2
        var prior = (0..<taps).map { l in Double.exp(-Double(max(0, l - onset)) / decay) }
        let rows = Double(endRow - firstRow)
        var transmitted = 0.0
        for m in 0..<known { let (a, b) = x(m); transmitted += a * a + b * b }
        let nvar = frame.noiseVariance
        let gain = max(received / rows - nvar, 1e-3 * received / rows) / max(transmitted / Double(known), 1e-12)
        let total = prior.reduce(0, +)
        for l in 0..<taps { prior[l] *= gain / total }
        for l in 0..<taps { gramRe[l * taps + l] += nvar / max(prior[l], 1e-30) }
        guard let (hr, hi) = Self.solveHermitian(re: &gramRe, im: &gramIm, size: taps, rhsRe: rhsRe, rhsIm: rhsIm) else { return false }
        frame.channel = [Float](repeating: 0, count: 2 * taps)
        var strongest = 0.0
        for l in 0..<taps {
            frame.channel[2 * l] = Float(hr[l]); frame.channel[2 * l + 1] = Float(hi[l])
            strongest = max(strongest, hr[l] * hr[l] + hi[l] * hi[l])
        }
        guard strongest > 0, strongest.isFinite else { return false }
        // The window starts at the first arrival within 5 dB of the strongest.
        var first = 0
        while first < taps, hr[first] * hr[first] + hi[first] * hi[first] < 0.3 * strongest { first += 1 }
        frame.windowOffset = max(-guardSamples / 2, min(maximumWindowOffset, first - pre))
        // What the preamble predicts from here on.
        let length = windowEnd(FrameFormat.symbolCount(payloadBytes: FrameFormat.payloadBytes.upperBound)) + taps
        frame.predicted = [Float](repeating: 0, count: 2 * (length + frame.origin))
        frame.sent = [Float](repeating: 0, count: 2 * length)
        for m in 0..<knownPreamble {
            addConvolved(frame, re: preambleReal[m], im: preambleImaginary[m], at: m)
            frame.sent[2 * m] = preambleReal[m]; frame.sent[2 * m + 1] = preambleImaginary[m]
        }
        frame.phase = dataStartPhase
        guard source == nil else { frame.unexplained = 0; return true }
        // A detection that is not a frame of this profile (another profile's chirps, a chirp-like stretch
        // inside a frame) leaves most of the preamble unexplained: stop here instead of decoding it.
        var unexplained = 0.0
        for n in firstRow..<endRow {
            let (yr, yi) = sample(frame, n)
            let p = 2 * (n + frame.origin)
            let er = yr - Double(frame.predicted[p]), ei = yi - Double(frame.predicted[p + 1])
            unexplained += er * er + ei * ei
        }
        frame.unexplained = unexplained / max(received, 1e-30)
        return frame.unexplained <= Self.maximumUnexplained
    }

    /// Adds transmitted sample (re, im) at grid index `m`, passed through the room model, to the prediction.
    @inline(__always) private func addConvolved(_ frame: Frame, re: Float, im: Float, at m: Int) {
        let taps = channelTaps
        let base = m - precursorTaps + frame.origin
        frame.channel.withUnsafeBufferPointer { h in
            frame.predicted.withUnsafeMutableBufferPointer { p in
                for l in 0..<taps where base + l >= 0 && base + l < p.count / 2 {
                    let hr = h[2 * l], hi = h[2 * l + 1]
                    p[2 * (base + l)] += hr * re - hi * im
                    p[2 * (base + l) + 1] += hr * im + hi * re
                }
            }
        }
    }

    /// Decides the next symbol: every (current, next) candidate pair through the room model, against the
    /// received window minus the predicted echoes of what was already decided.
    private func decideNext(_ frame: Frame) {
        let k = frame.decided.count
        let window = 2 * samplesPerSymbol
        let parity = k % profile.subBands
        let previous = k == 0 ? 16 : frame.decided[k - 1]
        let start = preambleLength + k * samplesPerSymbol + frame.windowOffset
        let segmentStart = preambleLength + k * samplesPerSymbol - guardSamples  // grid index of segment sample 0
        prepareTables(frame, window: window, lagBase: start - segmentStart + precursorTaps)
        let tables = frame.tables[parity]
        let energies = candidateEnergies(frame, parity: parity, previous: previous, window: window)
        let (br, bi) = (Float(Double.cos(frame.phase)), Float(Double.sin(frame.phase)))
        let (qr, qi) = (Float(frame.rotation.re), Float(-frame.rotation.im))
        var best = (cost: Float.infinity, a: 0, b: 0)
        var row = [Float](repeating: .infinity, count: 16)
        var loop = (re: 0.0, im: 0.0)
        frame.residual.withUnsafeMutableBufferPointer { residual in
            // Residual r = received (de-rotated by the phase loop) - prediction.
            var residualEnergy: Float = 0
            for j in 0..<window {
                let (yr, yi) = sample(frame, start + j)
                let rr = Float(yr) * qr - Float(yi) * qi, ri = Float(yr) * qi + Float(yi) * qr
                let p = 2 * (start + j + frame.origin)
                residual[2 * j] = rr - frame.predicted[p]
                residual[2 * j + 1] = ri - frame.predicted[p + 1]
                residualEnergy += residual[2 * j] * residual[2 * j] + residual[2 * j + 1] * residual[2 * j + 1]
            }
            // <r, y> = sum conj(r) y, for a part stored at `offset` in a table.
            func inner(_ table: UnsafeBufferPointer<Float>, _ offset: Int) -> (Float, Float) {
                var sr: Float = 0, si: Float = 0
                for j in 0..<window {
                    let rr = residual[2 * j], ri = residual[2 * j + 1], yr = table[offset + 2 * j], yi = table[offset + 2 * j + 1]
                    sr += rr * yr + ri * yi
                    si += rr * yi - ri * yr
                }
                return (sr, si)
            }
            // cost(a, b) = |r|^2 - 2 Re(e^{jB} <r, Y1(a) + Y2(a, b)>) + |Y1(a) + Y2(a, b)|^2.
            tables.first.withUnsafeBufferPointer { first in
                tables.second.withUnsafeBufferPointer { second in
                    let stride = 2 * window
                    for a in 0..<16 {
                        let (d1r, d1i) = inner(first, (previous * 16 + a) * stride)
                        for b in 0..<16 {
                            let (d2r, d2i) = inner(second, (a * 16 + b) * stride)
                            let dr = d1r + d2r, di = d1i + d2i
                            let cost = residualEnergy - 2 * (br * dr - bi * di) + energies[a * 16 + b]
                            if cost < row[a] { row[a] = cost }
                            if cost < best.cost { best = (cost, a, b) }
                        }
                    }
                    // Phase loop: the angle between the received window and the best candidate's prediction.
                    let o1 = (previous * 16 + best.a) * stride, o2 = (best.a * 16 + best.b) * stride
                    for j in 0..<window {
                        let yr = first[o1 + 2 * j] + second[o2 + 2 * j], yi = first[o1 + 2 * j + 1] + second[o2 + 2 * j + 1]
                        let p = 2 * (start + j + frame.origin)
                        let pr = Double(br * yr - bi * yi + frame.predicted[p]), pi = Double(br * yi + bi * yr + frame.predicted[p + 1])
                        let rr = Double(residual[2 * j] + frame.predicted[p]), ri = Double(residual[2 * j + 1] + frame.predicted[p + 1])
                        loop.re += pr * rr + pi * ri
                        loop.im += pr * ri - pi * rr
                    }
                }
            }
        }
        frame.costs += row
        let error = Double.atan2(y: loop.im, x: loop.re)
        frame.frequency += Self.frequencyGain * error
        let step = Self.phaseGain * error + frame.frequency
        let (sr, si) = (Double.cos(step), Double.sin(step))
        frame.rotation = (frame.rotation.re * sr - frame.rotation.im * si, frame.rotation.re * si + frame.rotation.im * sr)
        // Commit the decided symbol's first samples (they depend on previous and current only) to the prediction.
        let shape1 = shapes1[parity][previous * 16 + best.a], shape2 = shapes2[parity][best.a * 16 + best.b]
        for i in 0..<samplesPerSymbol {
            let (xr, xi): (Float, Float) = i < segmentSplit
                ? (shape1[2 * i], shape1[2 * i + 1])
                : (shape2[2 * (i - segmentSplit)], shape2[2 * (i - segmentSplit) + 1])
            let (sr, si) = (br * xr - bi * xi, br * xi + bi * xr)
            addConvolved(frame, re: sr, im: si, at: segmentStart + i)
            frame.sent[2 * (segmentStart + i)] = sr; frame.sent[2 * (segmentStart + i) + 1] = si
        }
        frame.decided.append(best.a)
        frame.phase += 2 * Double.pi * toneOffset(k, best.a) * profile.symbolTime
        frame.phase = frame.phase.remainder(dividingBy: 2 * Double.pi)
    }

    /// The candidate parts through the room as seen in a window (the same for every symbol of a parity):
    /// part 1 by previous * 16 + current, part 2 by current * 16 + next, each `2 * window` floats.
    struct FilteredParts {
        var first: [Float]
        var second: [Float]
        /// |Y1 + Y2|^2 per (current, next), for each previous tone once needed (17 x 256; NaN until computed).
        var energies: [Float]
    }

    private func prepareTables(_ frame: Frame, window: Int, lagBase: Int) {
        guard frame.tables.isEmpty else { return }
        frame.residual = [Float](repeating: 0, count: 2 * window)
        for parity in 0..<profile.subBands {
            var first = [Float](repeating: 0, count: 17 * 16 * 2 * window)
            var second = [Float](repeating: 0, count: 256 * 2 * window)
            first.withUnsafeMutableBufferPointer { out in
                for (index, shape) in shapes1[parity].enumerated() where index < 16 * 16 || parity == 0 {
                    filter(shape, from: 0, lagBase: lagBase, window: window, frame, into: out, at: index * 2 * window)
                }
            }
            second.withUnsafeMutableBufferPointer { out in
                for (index, shape) in shapes2[parity].enumerated() {
                    filter(shape, from: segmentSplit, lagBase: lagBase, window: window, frame, into: out, at: index * 2 * window)
                }
            }
            frame.tables.append(FilteredParts(first: first, second: second, energies: [Float](repeating: .nan, count: 17 * 256)))
        }
    }

    /// |Y1(previous, a) + Y2(a, b)|^2 for every (a, b), computed once per frame and previous tone.
    private func candidateEnergies(_ frame: Frame, parity: Int, previous: Int, window: Int) -> ArraySlice<Float> {
        let base = previous * 256
        if frame.tables[parity].energies[base].isNaN {
            let stride = 2 * window
            var values = [Float](repeating: 0, count: 256)
            frame.tables[parity].first.withUnsafeBufferPointer { first in
                frame.tables[parity].second.withUnsafeBufferPointer { second in
                    for a in 0..<16 {
                        let o1 = (previous * 16 + a) * stride
                        for b in 0..<16 {
                            let o2 = (a * 16 + b) * stride
                            var energy: Float = 0
                            for j in 0..<stride {
                                let v = first[o1 + j] + second[o2 + j]
                                energy += v * v
                            }
                            values[a * 16 + b] = energy
                        }
                    }
                }
            }
            frame.tables[parity].energies.replaceSubrange(base..<(base + 256), with: values)
        }
        return frame.tables[parity].energies[base..<(base + 256)].withUnsafeBufferPointer { ArraySlice($0) }
    }

    /// A candidate part (interleaved complex shape starting at segment sample `from`) passed through the room
    /// model and cut to the window: y_j = sum_i shape_i h[lagBase + j - i], written at `offset` of `out`.
    private func filter(_ shape: [Float], from: Int, lagBase: Int, window: Int, _ frame: Frame,
                        into out: UnsafeMutableBufferPointer<Float>, at offset: Int) {
        let taps = channelTaps
        let count = shape.count / 2
        shape.withUnsafeBufferPointer { shape in
            frame.channel.withUnsafeBufferPointer { h in
                for j in 0..<window {
                    var sr: Float = 0, si: Float = 0
                    let lo = max(0, lagBase + j - taps + 1 - from), hi = min(count, lagBase + j + 1 - from)
                    if lo < hi {
                        for i in lo..<hi {
                            let l = lagBase + j - (i + from)
                            let xr = shape[2 * i], xi = shape[2 * i + 1], hr = h[2 * l], hi = h[2 * l + 1]
                            sr += xr * hr - xi * hi
                            si += xr * hi + xi * hr
                        }
                    }
                    out[offset + 2 * j] = sr; out[offset + 2 * j + 1] = si
                }
            }
        }
    }

    /// Solves A x = b for a Hermitian positive-definite A (row-major, real and imaginary parts) by Cholesky
    /// factorisation; nil when A is not positive definite.
    static func solveHermitian(re: inout [Double], im: inout [Double], size n: Int, rhsRe: [Double], rhsIm: [Double])
        -> ([Double], [Double])? {
        guard re.count >= n * n, im.count >= n * n, rhsRe.count >= n, rhsIm.count >= n else { return nil }
        // A = L L^H, L lower triangular, stored in place (lower part); rows are contiguous, so every inner
        // loop runs along two rows.
        let factored = re.withUnsafeMutableBufferPointer { re in
            im.withUnsafeMutableBufferPointer { im -> Bool in
                for j in 0..<n {
                    let rowJ = j * n
                    var d = re[rowJ + j]
                    for k in 0..<j { d -= re[rowJ + k] * re[rowJ + k] + im[rowJ + k] * im[rowJ + k] }
                    guard d > 0, d.isFinite else { return false }
                    let ljj = d.squareRoot()
                    re[rowJ + j] = ljj; im[rowJ + j] = 0
                    for i in (j + 1)..<max(j + 1, n) {
                        let rowI = i * n
                        // A[i][j] = conj(A[j][i]) (the upper part still holds A), minus L[i][k] conj(L[j][k]).
                        var sr = re[rowJ + i], si = -im[rowJ + i]
                        for k in 0..<j {
                            let ar = re[rowI + k], ai = im[rowI + k], br = re[rowJ + k], bi = im[rowJ + k]
                            sr -= ar * br + ai * bi
                            si -= ai * br - ar * bi
                        }
                        re[rowI + j] = sr / ljj; im[rowI + j] = si / ljj
                    }
                }
                return true
            }
        }
        guard factored else { return nil }
        // Forward: L z = b; backward: L^H x = z.
        var zr = rhsRe, zi = rhsIm
        for i in 0..<n {
            for k in 0..<i {
                let ar = re[i * n + k], ai = im[i * n + k]
                zr[i] -= ar * zr[k] - ai * zi[k]
                zi[i] -= ar * zi[k] + ai * zr[k]
            }
            zr[i] /= re[i * n + i]; zi[i] /= re[i * n + i]
        }
        for i in stride(from: n - 1, through: 0, by: -1) {
            for k in (i + 1)..<max(i + 1, n) {
                // conj(L[k][i]) * x[k]
                let ar = re[k * n + i], ai = -im[k * n + i]
                zr[i] -= ar * zr[k] - ai * zi[k]
                zi[i] -= ar * zi[k] + ai * zr[k]
            }
            zr[i] /= re[i * n + i]; zi[i] /= re[i * n + i]
        }
        return (zr, zi)
    }
}
