import RealModule
import SottoDSP

/// A preamble found in the baseband: where its frame starts and how it is stretched.
struct PreambleDetection: Sendable, Hashable {
    /// Start of the frame (first sample of the up-chirp), in baseband samples (fractional).
    var start: Double
    /// Received time scale: 1 + e for a frame stretched by e (every duration multiplied, every frequency
    /// divided by it).
    var scale: Double
    /// How well the two chirps matched this profile's templates: the sum of their normalised correlation
    /// peaks (0...2; 2 for a clean copy of this profile's preamble). Comparable between profiles: another
    /// profile's chirps over the same band match less well than the receiver's own.
    var strength: Float = 0
    /// Where the frame starts (baseband samples, fractional) if it is not stretched at all, when the
    /// estimated time scale is not exactly 1: the receiver's second hypothesis, tried only when the
    /// estimated scale decodes nothing. The scale moves 1 / (basebandRate x |T - 2 f_mid / k|) per baseband
    /// sample of delay between the chirps (T the chirp time, f_mid its middle frequency, k its rate in
    /// Hz/s): 330 ppm for the default profile, 2 660 for the audible one's low band. In a room whose direct
    /// sound is weak that delay can be several samples off: through the measured close living room the
    /// audible profile's detections reported +300 to +700 ppm with no offset applied, and in a synthetic
    /// room 10 dB under its reverberation (RT60 0.3 s) 7 of 9 failing default frames reported -2 700 to
    /// -7 300 ppm. Scale 1 is what most frames have (sample clocks within a few hundred ppm, no motion).
    /// Nil when the estimate is exactly 1.
    var nominalStart: Double?
    /// True for an alias frame's preamble (two up-chirps; `FrameFormat` alias frames), at scale 1.
    var isAlias = false
}

/// Finds the preamble (an up-chirp then a down-chirp across the profile's band) in one receiver's
/// baseband: streaming normalised correlation with both chirps (blocks of the correlator its front end
/// shares between profiles, taken by `take`), up-chirp peaks over a threshold, each paired with the best
/// down-chirp peak where the largest time-scale offset allows it.
///
/// Pairings are taken one at a time, when the receiver's clock reaches the stream position at which
/// each can be decided (`nextPairingTime`): the receiver interleaves them with the decode attempts of
/// frames already detected, in stream order.
final class PreambleDetector {
    /// Chirp length (baseband samples).
    let chirpLength: Int
    /// Largest offset of the down-chirp peak from its nominal place (baseband samples), from the
    /// largest supported time-scale offset.
    let maxPeakShift: Int
    /// Half-width of the correlation profiles compared to measure the down-chirp's delay (baseband samples).
    let profileSpan: Int
    /// Thresholds scaled to this template: rho^2 noise mean = 1 / (chirp time x noise bandwidth).
    /// The normalised chirp correlation's mean under noise: the unit of the thresholds.
    private let noiseMean: Float
    let singleThreshold: Float
    let pairThreshold: Float
    let downThreshold: Float
    /// Largest supported time-scale offset (ppm magnitude).
    static let maxOffsetPPM = 8000.0

    private let profile: Profile
    private let basebandRate: Double
    /// The correlator's index of this detector's up-chirp template; its down-chirp is the next one.
    private let upTemplate: Int
    // Correlation ring buffers, by position (the template's first sample aligned with baseband sample n).
    private let mask: Int
    private let rhoUp: UnsafeMutableBufferPointer<Float>
    private let rhoDown: UnsafeMutableBufferPointer<Float>
    /// True when the down-chirp correlation is read only after an up-chirp peak `chirpLength -
    /// profileSpan - maxPeakShift` or more positions before it (see `take`); false for a profile whose
    /// chirps are too short for that, which then correlates both chirps everywhere.
    private let downChirpAfterPeaksOnly: Bool
    /// Whether alias frames (two up-chirps) are looked for (`pairNextWithAlias`).
    var looksForAliases = false
    /// Correlation positions computed so far, and scanned for up-chirp peaks.
    private(set) var positionCount = 0
    private var examined = 0

    private struct Peak { var position: Int; var value: Float }
    private var upCandidate: Peak?
    /// Up-chirp peaks waiting for their down-chirp (capacity reserved: appending does not allocate).
    private var awaitingDown: [Peak] = {
        var peaks: [Peak] = []
        peaks.reserveCapacity(64)
        return peaks
    }()

    /// The up-chirp and down-chirp templates (in that order, of the same length) of `profile`'s preamble in
    /// a baseband at `basebandRate` (Hz) centred on `centerFrequency` (Hz): the transmitted preamble itself
    /// (same smoothing and fade), cut into its two chirps.
    static func templates(profile: Profile, basebandRate: Double, centerFrequency: Double) -> [(real: [Float], imaginary: [Float])] {
        var preamble = Modulator.preambleSegments(profile)
        preamble.append(.tone(profile.lowFrequency, duration: profile.symbolTime))
        let smoothing = FrequencyTrajectory.gaussianSigma(bandwidthTime: profile.bandwidthTime, symbolTime: profile.symbolTime)
        let template = FrequencyTrajectory(segments: preamble, smoothingSigma: smoothing, fadeDuration: 0)
            .synthesizeBaseband(sampleRate: basebandRate, centerFrequency: centerFrequency)
        let chirpSamples = Int((profile.chirpDuration * basebandRate).rounded())
        let fade = profile.fadeDuration * basebandRate
        var upReal = Array(template.real[0..<chirpSamples]), upImaginary = Array(template.imaginary[0..<chirpSamples])
        for i in 0..<chirpSamples where Double(i) + 0.5 < fade {
            let g = Float(0.5 - 0.5 * Double.cos(Double.pi * (Double(i) + 0.5) / fade))
            upReal[i] *= g; upImaginary[i] *= g
        }
        let down = (real: Array(template.real[chirpSamples..<(2 * chirpSamples)]),
                    imaginary: Array(template.imaginary[chirpSamples..<(2 * chirpSamples)]))
        let length = min(upReal.count, down.real.count)
        return [(Array(upReal[0..<length]), Array(upImaginary[0..<length])),
                (Array(down.real[0..<length]), Array(down.imaginary[0..<length]))]
    }

    /// Half-width of the correlation profiles compared to measure the down-chirp's delay (baseband samples)
    /// at `basebandRate` (Hz): 8 ms.
    static func profileSpan(basebandRate: Double) -> Int { Int((0.008 * basebandRate).rounded()) }

    /// Positions of correlation a detector at `basebandRate` (Hz) needs before the stream, as if silence
    /// preceded it: the peak of a frame at the first sample is refined from its neighbour at position -1 and
    /// the chirps' delay from the profiles around it. Without these positions, such a frame reported a time
    /// scale 195 ppm off (ring slots never written read as zeros, a log(0) neighbour moved the peak) and its
    /// start 0.45 baseband samples late.
    static func leadPositions(basebandRate: Double) -> Int { profileSpan(basebandRate: basebandRate) + leadMargin }

    /// Positions of correlation before the stream beyond the profile span (one neighbour for the peak's
    /// parabola, one spare).
    private static let leadMargin = 2

    /// A detector reading templates `upTemplate` and `upTemplate + 1` (this profile's `templates`, of
    /// `chirpLength` samples) of a correlator its owner (`BasebandFrontEnd`) shares between detectors and
    /// hands each block to `take`, after feeding it `lead` (at least `leadPositions`) baseband samples of
    /// silence before the stream.
    /// - Parameters:
    ///   - basebandRate: rate of the baseband it is fed (Hz).
    ///   - noiseBandwidth: bandwidth of the noise in that baseband (Hz), for the thresholds.
    ///   - capacity: positions of correlation kept (a power of two, at least the baseband history's).
    ///   - tuning: the thresholds and whether the down-chirp is correlated everywhere (``ReceiverTuning``).
    init(profile: Profile, basebandRate: Double, noiseBandwidth: Double, capacity: Int, chirpLength: Int,
         upTemplate: Int, lead: Int, tuning: ReceiverTuning) {
        self.profile = profile
        self.basebandRate = basebandRate
        self.chirpLength = chirpLength
        self.upTemplate = upTemplate
        let band = profile.highFrequency - profile.lowFrequency
        let dopplerMargin = profile.highFrequency * Self.maxOffsetPPM * 1e-6
        let slope = band / profile.chirpDuration  // Hz/s
        let maxShift = dopplerMargin / slope * basebandRate
        maxPeakShift = Int((2 * maxShift).rounded(.up)) + 2
        profileSpan = Self.profileSpan(basebandRate: basebandRate)
        precondition(lead >= profileSpan + Self.leadMargin)
        downChirpAfterPeaksOnly = !tuning.correlatesDownChirpEverywhere && chirpLength > profileSpan + maxPeakShift
        let mean = Float(1 / (profile.chirpDuration * noiseBandwidth))
        singleThreshold = tuning.singleChirpThreshold * mean
        pairThreshold = tuning.chirpPairThreshold * mean
        downThreshold = tuning.downChirpFloor * mean
        noiseMean = mean
        mask = capacity - 1
        rhoUp = .zeroed(capacity)
        rhoDown = .zeroed(capacity)
        // Positions are numbered from the first of the `lead` samples of silence before the stream.
        positionCount = -lead
    }

    deinit {
        rhoUp.deallocate()
        rhoDown.deallocate()
    }

    /// True when no up-chirp peak is being followed or waits for its down-chirp.
    var isIdle: Bool { awaitingDown.isEmpty && upCandidate == nil }

    /// Baseband samples (from the stream's start) for which the correlation is complete: a pairing that
    /// needs no more than this can be decided.
    var horizon: Int { positionCount + chirpLength - 1 }

    /// Takes a block of `count` new positions of correlation (`correlation(t)` for the correlator's template
    /// `t`) and finds the up-chirp peaks in it.
    func take(_ count: Int, _ correlation: (Int) -> UnsafeBufferPointer<Float>) {
        let rhoUp = rhoUp, rhoDown = rhoDown, mask = mask
        let first = positionCount
        Self.store(correlation(upTemplate), into: rhoUp, at: first, mask: mask)
        positionCount += count
        scanUpChirps()
        // The down-chirp correlation is read only within `downChirpReach` of chirpLength after an
        // up-chirp peak (`pairNext`, `profileLag`: see `readsDownChirp`). A peak not found yet
        // lies at or after `positionCount`, so its reads start after this block; a peak followed or
        // waiting may read it. When none does, the block's down-chirp correlation is not computed (most
        // blocks of noise, and the blocks a lone noise peak does not reach). Zeros stand in for it.
        if !downChirpAfterPeaksOnly || upCandidate.map({ readsDownChirp($0.position, first, count) }) == true
            || awaitingDown.contains(where: { readsDownChirp($0.position, first, count) }) {
            Self.store(correlation(upTemplate + 1), into: rhoDown, at: first, mask: mask)
        } else {
            Self.clear(rhoDown, at: first, count: count, mask: mask)
        }
    }

    /// How far from `position + chirpLength` the pairing of an up-chirp peak at `position` reads the
    /// down-chirp correlation: `pairNext` within `maxPeakShift`, `profileLag` within this.
    private var downChirpReach: Int { profileSpan + maxPeakShift + 1 }

    /// True when the pairing of an up-chirp peak at `position` may read the down-chirp correlation at one of
    /// the `count` positions from `first` (within `downChirpReach` of `position + chirpLength`).
    private func readsDownChirp(_ position: Int, _ first: Int, _ count: Int) -> Bool {
        position + chirpLength - downChirpReach < first + count && position + chirpLength + downChirpReach >= first
    }

    /// Copies a block of correlation into a ring from stream position `first`.
    private static func store(_ rho: UnsafeBufferPointer<Float>, into ring: UnsafeMutableBufferPointer<Float>,
                              at first: Int, mask: Int) {
        forEachRun(from: first, count: rho.count, mask: mask) { offset, at, run in
            (ring.baseAddress! + at).update(from: rho.baseAddress! + offset, count: run)
        }
    }

    /// Zeroes `count` positions of a ring from stream position `first`.
    private static func clear(_ ring: UnsafeMutableBufferPointer<Float>, at first: Int, count: Int, mask: Int) {
        forEachRun(from: first, count: count, mask: mask) { _, at, run in
            (ring.baseAddress! + at).update(repeating: 0, count: run)
        }
    }

    /// Visits `count` positions of a ring from stream position `first` as contiguous runs: `body(offset,
    /// slot, run)` for positions `first + offset ..< first + offset + run` at slots `slot ..< slot + run`.
    /// At most two runs: a block is shorter than the ring, so it wraps once at most.
    @inline(__always)
    private static func forEachRun(from first: Int, count: Int, mask: Int, _ body: (Int, Int, Int) -> Void) {
        var done = 0
        while done < count {
            let at = (first + done) & mask
            let run = min(count - done, mask + 1 - at)
            body(done, at, run)
            done += run
        }
    }

    /// Finds up-chirp peaks in the correlation computed so far; each finished one waits for its down-chirp.
    private func scanUpChirps() {
        let half = chirpLength / 2
        while examined < positionCount {
            if upCandidate == nil {
                // Nothing followed: skip to the first value over the threshold (most of the stream).
                examined = Self.firstPosition(in: rhoUp, mask: mask, from: examined, to: positionCount,
                                              notAtMost: singleThreshold)
                guard examined < positionCount else { break }
            }
            let n = examined
            if let candidate = upCandidate, n > candidate.position + half {
                awaitingDown.append(candidate)
                upCandidate = nil
            }
            let value = rhoUp[n & mask]
            if value > singleThreshold && (upCandidate.map { value > $0.value } ?? true) {
                upCandidate = Peak(position: n, value: value)
            }
            examined += 1
        }
    }

    /// The first stream position in `start..<end` whose ring value is not `<= threshold` (over it, or NaN),
    /// or `end`: the ring read as contiguous runs, eight values compared at a time (a loop of one masked
    /// read and one comparison per position cost about a tenth of the correlator with four profiles on noise).
    static func firstPosition(in ring: UnsafeMutableBufferPointer<Float>, mask: Int, from start: Int, to end: Int,
                              notAtMost threshold: Float) -> Int {
        typealias Lanes = SIMD8<Float>
        let limit = Lanes(repeating: threshold)
        var n = start
        while n < end {
            let slot = n & mask
            let run = min(end - n, mask + 1 - slot)
            let values = UnsafePointer(ring.baseAddress! + slot)
            var i = 0
            while i + Lanes.scalarCount <= run {
                let chunk = UnsafeRawPointer(values + i).loadUnaligned(as: Lanes.self)
                if any(.!(chunk .<= limit)) { break }
                i += Lanes.scalarCount
            }
            while i < run && values[i] <= threshold { i += 1 }
            if i < run { return n + i }
            n += run
        }
        return end
    }

    /// Baseband samples needed before an up-chirp peak can be paired: the down-chirp correlation up to the
    /// last position `profileLag` reads.
    private func pairingTime(_ up: Peak) -> Int {
        up.position + chirpLength + downChirpReach + chirpLength
    }

    /// Stream position (baseband samples) at which the earliest waiting pairing can be decided, or nil.
    var nextPairingTime: Int? { awaitingDown.first.map(pairingTime) }

    /// Decides the earliest waiting pairing (its time has come): the detection, or nil when the pair is
    /// under the thresholds or beyond the largest time-scale offset.
    func pairNext() -> PreambleDetection? { pairNextWithAlias().token }

    /// Decides the earliest waiting pairing (its time has come): the token frame's preamble (an up-chirp, then a
    /// down-chirp), nil when the pair is under the thresholds or beyond the largest time-scale offset; and, when
    /// alias frames are looked for, an alias frame's preamble: an up-chirp, then another up-chirp, over the same
    /// thresholds (at scale 1: two up-chirps say nothing of the time scale). The up-chirp's correlation is there
    /// anyway, so this costs no correlation. Both from one up-chirp would be decided alias first (it is shorter),
    /// and a frame decoded from either drops the other.
    func pairNextWithAlias() -> (token: PreambleDetection?, alias: PreambleDetection?) {
        guard !awaitingDown.isEmpty else { return (nil, nil) }
        let up = awaitingDown.removeFirst()
        var best = Peak(position: -1, value: 0)
        for m in (up.position + chirpLength - maxPeakShift)...(up.position + chirpLength + maxPeakShift) {
            let v = rhoDown[m & mask]
            if v > best.value { best = Peak(position: m, value: v) }
        }
        var alias: PreambleDetection?
        if looksForAliases {
            var second = Peak(position: -1, value: 0)
            for m in (up.position + chirpLength - maxPeakShift)...(up.position + chirpLength + maxPeakShift) {
                let v = rhoUp[m & mask]
                if v > second.value { second = Peak(position: m, value: v) }
            }
            if second.position >= 0, second.value > downThreshold, up.value + second.value > pairThreshold {
                let tu = Double(up.position) + peakOffset(rhoUp, at: up.position)
                alias = PreambleDetection(start: tu, scale: 1, strength: up.value + second.value, isAlias: true)
            }
        }
        return (pairToken(up, best), alias)
    }

    /// The token frame's preamble of an up-chirp peak and the best down-chirp peak after it, or nil.
    private func pairToken(_ up: Peak, _ best: Peak) -> PreambleDetection? {
        guard best.position >= 0, best.value > downThreshold, up.value + best.value > pairThreshold else { return nil }
        let tu = Double(up.position) + peakOffset(rhoUp, at: up.position)
        // The down-chirp's delay relative to the up-chirp's, from the whole correlation profiles
        // rather than their two maxima: in a reverberant room the strongest peak of each may be a
        // different arrival, and every sample between them is 330 ppm of time scale (default profile;
        // 2 660 for audible: see `PreambleDetection.nominalStart`).
        let td = tu + Double(chirpLength) + profileLag(upPosition: up.position)
        // A frame stretched by s = 1 + e (every frequency divided by s, every duration multiplied)
        // moves the up-chirp peak by e (f_mid / k + T/2) and the down-chirp peak by
        // e (-f_mid / k + 3T/2), k being the chirp rate (Hz/s) and T its duration: their distance
        // gives e, their mean the start.
        let chirpTime = Double(chirpLength) / basebandRate
        let rate = (profile.highFrequency - profile.lowFrequency) / chirpTime
        let middle = (profile.highFrequency + profile.lowFrequency) / 2
        let spread = (td - tu - Double(chirpLength)) / basebandRate
        let stretch = spread / (chirpTime - 2 * middle / rate)
        let start = (tu + td - Double(chirpLength)) / 2 - stretch * Double(chirpLength)
        guard abs(stretch) < Self.maxOffsetPPM * 1e-6 else { return nil }
        // The second hypothesis, scale 1 (`PreambleDetection.nominalStart`): the start is then the mean of
        // the two chirps' places, which the measured delay no longer moves apart.
        let nominal = stretch != 0 ? (tu + td - Double(chirpLength)) / 2 : nil
        return PreambleDetection(start: start, scale: 1 + stretch, strength: up.value + best.value, nominalStart: nominal)
    }

    /// Delay of the down-chirp correlation profile relative to the up-chirp one (baseband samples, beyond
    /// the chirp length), by cross-correlating the two around the up-chirp peak: the lag at which the
    /// arrivals (direct sound, reflections) seen by both chirps line up, refined by a parabola.
    /// Correlation values under twice the noise mean are ignored.
    private func profileLag(upPosition: Int) -> Double {
        let floor = 2 * noiseMean
        let rhoUp = rhoUp, rhoDown = rhoDown, mask = mask, span = profileSpan, chirpLength = chirpLength
        let width = 2 * span + 1, reach = maxPeakShift + 1
        // The two profiles above the floor, copied out of their rings once: the up-chirp's around its peak
        // (`width` positions) and the down-chirp's where every lag tried (up to one beyond the largest shift,
        // for the parabola) reads it. A position under the floor adds a zero (exactly what skipping it did:
        // the sums only grow from 0 by products of non-negative values).
        return withUnsafeTemporaryAllocation(of: Float.self, capacity: 2 * width + 2 * reach) { buffer in
            let up = buffer.baseAddress!, down = up + width
            for i in 0..<width { up[i] = max(0, rhoUp[(upPosition - span + i) & mask] - floor) }
            for i in 0..<(width + 2 * reach) {
                down[i] = max(0, rhoDown[(upPosition - span + chirpLength - reach + i) & mask] - floor)
            }
            func match(_ lag: Int) -> Float {
                let shifted = down + (lag + reach)
                var c: Float = 0
                for i in 0..<width { c += up[i] * shifted[i] }
                return c
            }
            var bestLag = 0, bestMatch: Float = -1
            for lag in -maxPeakShift...maxPeakShift {
                let c = match(lag)
                if c > bestMatch { bestMatch = c; bestLag = lag }
            }
            let a = Double(match(bestLag - 1)), b = Double(bestMatch), c = Double(match(bestLag + 1))
            let denominator = a - 2 * b + c
            let offset = denominator < 0 ? max(-0.5, min(0.5, 0.5 * (a - c) / denominator)) : 0
            return Double(bestLag) + offset
        }
    }

    /// Sub-sample offset of a correlation peak, in -0.5...0.5: a parabola through the logarithms of it and
    /// its neighbours (a Gaussian through the values). A parabola through the values themselves moved the
    /// estimated start by up to 1.4 input samples with the phase of the baseband's sample grid (48 kHz,
    /// default profile); on the logarithms, 0.4.
    private func peakOffset(_ rho: UnsafeMutableBufferPointer<Float>, at n: Int) -> Double {
        let floor = 1e-12
        let a = Double.log(max(Double(rho[(n - 1) & mask]), floor)), b = Double.log(max(Double(rho[n & mask]), floor))
        let c = Double.log(max(Double(rho[(n + 1) & mask]), floor))
        let denominator = a - 2 * b + c
        guard denominator < 0 else { return 0 }
        return max(-0.5, min(0.5, 0.5 * (a - c) / denominator))
    }
}
