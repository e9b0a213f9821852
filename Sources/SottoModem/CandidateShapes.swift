import RealModule
#if hasFeature(Embedded)
/// WebAssembly runs the modem on one thread: the cache's `withLock` without a lock.
final class Mutex<Value>: @unchecked Sendable {
    private var value: Value
    init(_ value: Value) { self.value = value }
    func withLock<Result>(_ body: (inout Value) -> Result) -> Result { body(&value) }
}
#else
import Synchronization
#endif
import SottoDSP

/// The coherent detector's geometry and known waveforms for one profile at one baseband rate and centre:
/// the symbol grid, the room model's extent, the transmitted preamble, and every candidate segment's
/// phase shape (GFSK, as the transmitter makes it). Built once per (profile, rate, centre) and shared
/// (`shared(profile:basebandRate:centerFrequency:)`): building takes a few milliseconds. Immutable.
///
/// A candidate segment covers one symbol's transition and window: `guardSamples` before the symbol's
/// start, `segmentLength` grid samples in all; its first `segmentSplit` samples depend on the (previous,
/// current) tones (part 1), the rest on (current, next) (part 2). Times are in grid samples unless said.
final class CandidateShapes: Sendable {
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
    /// Room model length after the detected start (s).
    static let channelDuration = 0.070
    /// Precursor length (s).
    static let precursorDuration = 0.004
    /// Candidate segments' phase shapes (radians, without the accumulated phase), per sub-band parity:
    /// part 1 indexed [previous tone 0...16 (16 = the chirp's end)][current], part 2 [current][next].
    let shapes1: [[[Float]]]   // [parity][(prev * 16 + a)] -> interleaved complex, segmentSplit samples
    let shapes2: [[[Float]]]   // [parity][(a * 16 + b)] -> interleaved complex, segmentLength - segmentSplit

    /// True for an alias frame's preamble (two up-chirps), false for a token frame's (up, then down).
    let aliasPreamble: Bool

    init(profile: Profile, basebandRate: Double, centerFrequency: Double, aliasPreamble: Bool = false) {
        self.profile = profile
        self.aliasPreamble = aliasPreamble
        self.basebandRate = basebandRate
        self.centerFrequency = centerFrequency
        let symbolTime = profile.symbolTime
        samplesPerSymbol = max(16, Int((basebandRate * symbolTime).rounded(.up)))
        gridRate = Double(samplesPerSymbol) / symbolTime
        let preambleTime = 2 * profile.chirpDuration
        // The frequency the preamble ends at, which the first symbol steps from: the down-chirp's end (the band's
        // bottom), or an alias frame's second up-chirp's (its top).
        let endFrequency = aliasPreamble ? profile.highFrequency : profile.lowFrequency
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
            var segments = Modulator.preambleSegments(profile, alias: aliasPreamble)
            segments.append(.tone(endFrequency, duration: 3 * symbolTime))  // a dummy first symbol
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
        let lowOffset = endFrequency - centerFrequency
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
        // Away from the chirp, a segment's phase is linear in the tone offsets it spans:
        //   part 1: dPrevious * p(i) + dCurrent * q(i) + c,   part 2: dCurrent * q(i) + dNext * r(i) + c,
        // with p, q, r the ramps (and the summation error's pulses) of the previous, current and later
        // symbols and c = -summation * lowOffset. So each shape is a product of one phasor per tone and
        // position, 32 tables per part instead of a sine and a cosine per sample of all 256 shapes (that was
        // 70 M instructions for the robust profile, paid by the first frame that needs the room model).
        let twoPiT = 2 * Double.pi * symbolTime
        let constant = -summation * lowOffset
        func own(_ n: Int) -> Double { twoPiT * rampAt(n) + summation * pulseAt(n) }
        let split = segmentSplit, symbolSamples = samplesPerSymbol
        let previousPart = (0..<split).map { i in
            let n = i - guardSamples + symbolSamples
            return twoPiT * (rampAt(n) - 1) + summation * pulseAt(n)
        }
        let currentPart1 = (0..<split).map { own($0 - guardSamples) }
        let currentPart2 = (split..<segmentLength).map { own($0 - guardSamples) }
        // The next tone stands for every later symbol too (a late window sees them through the early
        // arrivals, which are then the weaker ones).
        let laterPart = (split..<segmentLength).map { i in
            (1...laterSymbols).reduce(0.0) { $0 + own(i - guardSamples - $1 * symbolSamples) }
        }
        /// exp(i (offset * slope[k] + constant)) for every k, interleaved.
        func phasors(_ offset: Double, _ slope: [Double], constant: Double = 0) -> [Double] {
            var out = [Double](repeating: 0, count: 2 * slope.count)
            for k in slope.indices {
                let phase = offset * slope[k] + constant
                out[2 * k] = Double.cos(phase); out[2 * k + 1] = Double.sin(phase)
            }
            return out
        }
        /// The element-wise complex product of two interleaved phasor tables, as Float.
        func product(_ x: [Double], _ y: [Double]) -> [Float] {
            var out = [Float](repeating: 0, count: x.count)
            for k in stride(from: 0, to: x.count, by: 2) {
                out[k] = Float(x[k] * y[k] - x[k + 1] * y[k + 1])
                out[k + 1] = Float(x[k] * y[k + 1] + x[k + 1] * y[k])
            }
            return out
        }
        var first: [[[Float]]] = [], second: [[[Float]]] = []
        for parity in 0..<profile.subBands {
            var part1: [[Float]] = [], part2: [[Float]] = []
            let previousParity = (parity + profile.subBands - 1) % profile.subBands
            let nextParity = (parity + 1) % profile.subBands
            let previousPhasors = (0..<16).map { phasors(offset($0, previousParity), previousPart, constant: constant) }
            let currentPhasors1 = (0..<16).map { phasors(offset($0, parity), currentPart1) }
            for previous in 0...16 {
                for current in 0..<16 {
                    if previous == 16 {
                        // The first symbol follows the down-chirp: its part 1 is the transmitted preamble (with a
                        // dummy first tone at the chirp's end frequency) plus the smoothed step to the real one.
                        var shape = [Float](repeating: 0, count: 2 * split)
                        guard parity == 0 else { part1.append(shape); continue }
                        let step = profile.toneFrequency(symbolIndex: 0, value: current) - endFrequency
                        for i in 0..<split {
                            let n = i - guardSamples
                            let phase = dummyFirst[i].phase - startPhase
                                + 2 * Double.pi * step * psiTable[n + rampOrigin] + summation * step * cdfTable[n + rampOrigin]
                            shape[2 * i] = Float(dummyFirst[i].amplitude * Double.cos(phase))
                            shape[2 * i + 1] = Float(dummyFirst[i].amplitude * Double.sin(phase))
                        }
                        part1.append(shape)
                    } else {
                        part1.append(product(previousPhasors[previous], currentPhasors1[current]))
                    }
                }
            }
            let currentPhasors2 = (0..<16).map { phasors(offset($0, parity), currentPart2, constant: constant) }
            let nextPhasors = (0..<16).map { phasors(offset($0, nextParity), laterPart) }
            for current in 0..<16 {
                for next in 0..<16 {
                    part2.append(product(currentPhasors2[current], nextPhasors[next]))
                }
            }
            first.append(part1)
            second.append(part2)
        }
        shapes1 = first
        shapes2 = second
    }

    /// Frequency offset of tone `value` at symbol `k` from the baseband centre (Hz).
    func toneOffset(_ k: Int, _ value: Int) -> Double {
        profile.toneFrequency(symbolIndex: k, value: value) - centerFrequency
    }

    /// Grid index (from the frame start) one past the last sample symbol `k`'s window may need.
    func windowEnd(_ k: Int) -> Int { preambleLength + (k + 2) * samplesPerSymbol + maximumWindowOffset }

    // MARK: Shared instances

    private struct Key: Hashable {
        let profile: Profile
        let basebandRate: Double
        let centerFrequency: Double
        let aliasPreamble: Bool
    }
    private static let cache = Mutex<[Key: CandidateShapes]>([:])

    /// The shapes for a profile, baseband rate (Hz) and centre frequency (Hz), built the first time they
    /// are asked for in this process and shared by every receiver after that.
    static func shared(profile: Profile, basebandRate: Double, centerFrequency: Double, aliasPreamble: Bool = false) -> CandidateShapes {
        let key = Key(profile: profile, basebandRate: basebandRate, centerFrequency: centerFrequency, aliasPreamble: aliasPreamble)
        if let shapes = cache.withLock({ $0[key] }) { return shapes }
        // Built outside the lock (milliseconds); a concurrent builder's copy is identical and the first one stored wins.
        let built = CandidateShapes(profile: profile, basebandRate: basebandRate, centerFrequency: centerFrequency,
                                    aliasPreamble: aliasPreamble)
        return cache.withLock { cache in
            if let existing = cache[key] { return existing }
            cache[key] = built
            return built
        }
    }
}
