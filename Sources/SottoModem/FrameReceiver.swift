import RealModule
import SottoDSP

/// One frame found in a stream.
public struct DecodedFrame: Sendable, Hashable, Codable {
    /// The token (1...16 bytes).
    public var token: [UInt8]
    /// Name of the profile it was sent with.
    public var profile: String
    /// Start of the frame (first sample of the preamble), in seconds from the start of the stream.
    public var startTime: Double
    /// End of the frame (s from the start of the stream).
    public var endTime: Double
    /// Estimated in-band signal-to-noise ratio (dB): the received signal's power (its reverberant tail
    /// included) over the noise power in the profile's band, both over the frame's data symbols. With
    /// white noise it is the full-band SNR (the channel simulator's convention) plus
    /// 10 log10((fs / 2) / bandwidth): 11.2 dB more for the default profile at 48 kHz.
    public var snr: Double
    /// Received level of the burst (dBFS, peak): how loud the frame arrived.
    public var level: Double
    /// Estimated time-scale offset of the received frame (ppm): positive when it arrives stretched (tones
    /// lower, e.g. a receiver whose sample clock runs fast, or a source moving away).
    public var clockOffsetPPM: Double
    /// Coded bits the error-correcting code had to correct.
    public var correctedBits: Int

    public init(token: [UInt8], profile: String, startTime: Double, endTime: Double, snr: Double, level: Double,
                clockOffsetPPM: Double, correctedBits: Int) {
        self.level = level
        self.token = token
        self.profile = profile
        self.startTime = startTime
        self.endTime = endTime
        self.snr = snr
        self.clockOffsetPPM = clockOffsetPPM
        self.correctedBits = correctedBits
    }
}

/// Detection thresholds on the normalised chirp correlation, in multiples of its mean under noise
/// (which is 1 / independent samples in the template). Measured: see the design article.
enum DetectionThreshold {
    /// Each chirp's peak must exceed this multiple of the noise mean.
    /// (10 minutes of white noise through all four profiles: 1 detection at 6 / 16, none at 9 / 26;
    /// 5 / 14 gave 21. Detection, not decoding, limited the fast profile at 9 / 26.)
    static let single: Float = 6
    /// The up and down peaks together must exceed this multiple.
    static let pair: Float = 17
}

/// The receiver for one profile: band extraction, preamble detection, symbol energies and decoding.
/// Internal to `StreamingDecoder`; one per profile.
final class FrameReceiver {
    let profile: Profile
    let sampleRate: Double
    let decimator: BandDecimator
    let correlator: StreamingCorrelator
    /// Baseband rate (Hz).
    let basebandRate: Double
    /// Chirp length in baseband samples.
    let chirpLength: Int
    /// Largest offset of the down-chirp peak from its nominal place (baseband samples), from the
    /// largest supported time-scale offset.
    let maxPeakShift: Int
    /// Half-width of the correlation profiles compared to measure the down-chirp's delay (baseband samples).
    let profileSpan: Int
    /// Thresholds scaled to this template: rho^2 noise mean = 1 / (chirp time x noise bandwidth).
    let singleThreshold: Float
    let pairThreshold: Float
    /// Largest supported time-scale offset (ppm magnitude).
    static let maxOffsetPPM = 8000.0

    // Baseband ring buffer (absolute sample index `n` lives at `n & mask`).
    private let mask: Int
    private let real: UnsafeMutableBufferPointer<Float>
    private let imaginary: UnsafeMutableBufferPointer<Float>
    private var basebandCount = 0
    // Correlation ring buffers (position index).
    private let rhoUp: UnsafeMutableBufferPointer<Float>
    private let rhoDown: UnsafeMutableBufferPointer<Float>
    private var positionCount = 0
    private var examined = 0
    /// Stream position (baseband samples) of the last event processed: every decision is taken at a
    /// position fixed by the signal, whatever the block the samples arrived in.
    private var clock = 0

    private struct Peak { var position: Int; var value: Float }
    private var upCandidate: Peak?
    /// Up-chirp peaks waiting for their down-chirp (capacity reserved: appending does not allocate).
    private var awaitingDown: [Peak] = {
        var peaks: [Peak] = []
        peaks.reserveCapacity(64)
        return peaks
    }()

    /// A detected preamble whose frame is still being received.
    private struct Pending {
        var start: Double        // baseband samples, fractional
        var scale: Double        // received time scale: 1 + ppm x 1e-6 (stretch)
        var nextLength = 1       // next payload length hypothesis to try
        var energies: [Float] = []  // 16 per symbol, computed so far
        var signalEnergy: Double = 0
        var symbolsDone = 0
        /// The noncoherent decode of length `nextLength` failed; the coherent one is waiting for samples.
        var noncoherentFailed = false
        /// Noise variance per baseband sample measured by the noncoherent metric (for the coherent one).
        var noiseVariance = 0.0
        /// Second passes of the coherent detector so far.
        var refinements = 0
        /// The coherent detector's state, from the first time it is needed.
        var coherent: CoherentDetector.Frame?
    }
    private var pending: [Pending] = []
    /// Preambles detected (whether or not a frame followed).
    private(set) var detections = 0
    /// Preambles starting before this baseband position are parts of frames already decoded.
    private var suppressUntil = -Double.infinity
    private static let maxPending = 8
    /// Fraction of each symbol skipped before integrating, where the Gaussian transition from the
    /// previous tone lingers (measured with BT = 2: 0.05 beat 0 and 0.10 by about 0.3 dB).
    static let windowSkip = 0.05
    /// Weight (in symbols) of the frame-wide signal level in each tone's level estimate.
    static let toneGainPrior = 2.0
    /// Header bits the coherent decode may get wrong for the room to be fitted again over the whole frame
    /// (wrong lengths and other profiles' frames seldom come this close: 9 of 256 random headers), and how
    /// many such second passes one detection may have (each costs about as much as the first).
    static let refinementHeaderDistance = 1
    static let maximumRefinements = 2
    /// Length of audio before a frame whose power stands for the noise in the coherent detector's room fit (s).
    static let noiseProbe = 0.040
    /// The second opinion for reverberant rooms, built the first time a frame needs it.
    private lazy var coherent = CoherentDetector(profile: profile, basebandRate: basebandRate,
                                                 centerFrequency: decimator.centerFrequency)

    init(profile: Profile, sampleRate: Double) {
        self.profile = profile
        self.sampleRate = sampleRate
        let band = profile.highFrequency - profile.lowFrequency
        let dopplerMargin = profile.highFrequency * Self.maxOffsetPPM * 1e-6
        let halfWidth = band / 2 + dopplerMargin + 50
        decimator = BandDecimator(sampleRate: sampleRate, centerFrequency: profile.centerFrequency,
                                  passbandHalfWidth: halfWidth, minimumOutputRate: 2 * halfWidth + 1400)
        basebandRate = decimator.outputRate
        // Templates: the transmitted preamble itself (same smoothing and fade), cut into its two chirps.
        var preamble = Modulator.preambleSegments(profile)
        preamble.append(.tone(profile.lowFrequency, duration: profile.symbolTime))
        let smoothing = FrequencyTrajectory.gaussianSigma(bandwidthTime: profile.bandwidthTime, symbolTime: profile.symbolTime)
        let template = FrequencyTrajectory(segments: preamble, smoothingSigma: smoothing, fadeDuration: 0)
            .synthesizeBaseband(sampleRate: basebandRate, centerFrequency: decimator.centerFrequency)
        let chirpSamples = Int((profile.chirpDuration * basebandRate).rounded())
        let fade = profile.fadeDuration * basebandRate
        var upReal = Array(template.real[0..<chirpSamples]), upImaginary = Array(template.imaginary[0..<chirpSamples])
        for i in 0..<chirpSamples where Double(i) + 0.5 < fade {
            let g = Float(0.5 - 0.5 * Double.cos(Double.pi * (Double(i) + 0.5) / fade))
            upReal[i] *= g; upImaginary[i] *= g
        }
        let up = (real: upReal, imaginary: upImaginary)
        let down = (real: Array(template.real[chirpSamples..<(2 * chirpSamples)]),
                    imaginary: Array(template.imaginary[chirpSamples..<(2 * chirpSamples)]))
        let length = min(up.real.count, down.real.count)
        chirpLength = length
        correlator = StreamingCorrelator(templates: [
            (Array(up.real[0..<length]), Array(up.imaginary[0..<length])),
            (Array(down.real[0..<length]), Array(down.imaginary[0..<length])),
        ])
        let slope = band / profile.chirpDuration  // Hz/s
        let maxShift = dopplerMargin / slope * basebandRate
        maxPeakShift = Int((2 * maxShift).rounded(.up)) + 2
        profileSpan = Int((0.008 * basebandRate).rounded())
        let noiseBandwidth = min(basebandRate, 2 * halfWidth + 300)
        let mean = Float(1 / (profile.chirpDuration * noiseBandwidth))
        singleThreshold = DetectionThreshold.single * mean
        pairThreshold = DetectionThreshold.pair * mean
        // Room for the longest frame plus the correlator's and decimator's latency.
        let longest = profile.airtime(payloadBytes: FrameFormat.payloadBytes.upperBound) * basebandRate
        var capacity = 1024
        while Double(capacity) < 2 * longest + Double(4 * length + 4096) { capacity *= 2 }
        mask = capacity - 1
        func buffer() -> UnsafeMutableBufferPointer<Float> {
            let b = UnsafeMutableBufferPointer<Float>.allocate(capacity: capacity)
            b.initialize(repeating: 0)
            return b
        }
        real = buffer()
        imaginary = buffer()
        rhoUp = buffer()
        rhoDown = buffer()
    }

    deinit {
        real.deallocate()
        imaginary.deallocate()
        rhoUp.deallocate()
        rhoDown.deallocate()
    }

    /// True when nothing is under way: no preamble candidate and no frame being received.
    var isIdle: Bool { pending.isEmpty && awaitingDown.isEmpty && upCandidate == nil }

    /// Feeds input samples; appends decoded frames to `frames`.
    func process(_ input: UnsafeBufferPointer<Float>, into frames: inout [DecodedFrame]) {
        let real = real, imaginary = imaginary, rhoUp = rhoUp, rhoDown = rhoDown, mask = mask
        decimator.process(input) { re, im in
            let base = basebandCount
            for i in 0..<re.count {
                real[(base + i) & mask] = re[i]
                imaginary[(base + i) & mask] = im[i]
            }
            basebandCount = base + re.count
            correlator.process(real: re, imaginary: im) { rho, count in
                let first = positionCount
                for j in 0..<count {
                    rhoUp[(first + j) & mask] = rho[j]
                    rhoDown[(first + j) & mask] = rho[count + j]
                }
                positionCount = first + count
            }
            scanUpChirps()
            runEvents(into: &frames)
        }
    }

    // MARK: Detection

    /// Finds up-chirp peaks in the correlation computed so far; each finished one waits for its down-chirp.
    private func scanUpChirps() {
        let half = chirpLength / 2
        while examined < positionCount {
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

    /// Baseband samples needed before an up-chirp peak can be paired: the down-chirp correlation up to the
    /// last position `profileLag` reads.
    private func pairingTime(_ up: Peak) -> Int {
        up.position + chirpLength + maxPeakShift + profileSpan + 1 + chirpLength
    }

    /// Processes, in the order of the stream position at which each becomes possible, every pairing of an
    /// up-chirp peak and every step of a pending frame that the samples received so far allow. Each event
    /// happens at a position fixed by the signal (not by where the blocks of input fall), and sees the state
    /// left by every earlier event: the decisions do not depend on the block phase.
    private func runEvents(into frames: inout [DecodedFrame]) {
        // Samples for which both the baseband and its correlation are available.
        let horizon = min(basebandCount, positionCount + chirpLength - 1)
        while true {
            var bestTime = Int.max, bestPairing = -1, bestFrame = -1
            for (index, up) in awaitingDown.enumerated() {
                let time = max(pairingTime(up), clock)
                if time < bestTime { bestTime = time; bestPairing = index }
            }
            for index in pending.indices {
                guard let ready = readyTime(index) else { continue }
                let time = max(ready, clock)
                if time < bestTime { bestTime = time; bestPairing = -1; bestFrame = index }
            }
            guard bestTime <= horizon else { return }
            clock = bestTime
            if bestPairing >= 0 {
                let up = awaitingDown.remove(at: bestPairing)
                pair(up)
            } else {
                step(bestFrame, into: &frames)
            }
        }
    }

    /// Pairs a finished up-chirp peak with the best down-chirp peak where it must be; a pair over the
    /// thresholds is a detection, and a frame that may follow it is pending.
    private func pair(_ up: Peak) {
        var best = Peak(position: -1, value: 0)
        for m in (up.position + chirpLength - maxPeakShift)...(up.position + chirpLength + maxPeakShift) {
            let v = rhoDown[m & mask]
            if v > best.value { best = Peak(position: m, value: v) }
        }
        guard best.position >= 0, best.value > singleThreshold, up.value + best.value > pairThreshold else { return }
        let tu = Double(up.position) + parabolicOffset(rhoUp, at: up.position)
        // The down-chirp's delay relative to the up-chirp's, from the whole correlation profiles
        // rather than their two maxima: in a reverberant room the strongest peak of each may be a
        // different arrival, and every sample between them is 1000 ppm or so of time scale.
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
        guard start >= suppressUntil, abs(stretch) < Self.maxOffsetPPM * 1e-6 else { return }
        detections += 1
        if pending.count >= Self.maxPending { pending.removeFirst() }
        pending.append(Pending(start: start, scale: 1 + stretch))
    }

    /// Delay of the down-chirp correlation profile relative to the up-chirp one (baseband samples, beyond
    /// the chirp length), by cross-correlating the two around the up-chirp peak: the lag at which the
    /// arrivals (direct sound, reflections) seen by both chirps line up, refined by a parabola.
    /// Correlation values under twice the noise mean are ignored.
    private func profileLag(upPosition: Int) -> Double {
        let floor = 2 * singleThreshold / DetectionThreshold.single
        let rhoUp = rhoUp, rhoDown = rhoDown, mask = mask, span = profileSpan, chirpLength = chirpLength
        func match(_ lag: Int) -> Float {
            var c: Float = 0
            for n in (upPosition - span)...(upPosition + span) {
                let a = rhoUp[n & mask] - floor
                guard a > 0 else { continue }
                c += a * max(0, rhoDown[(n + chirpLength + lag) & mask] - floor)
            }
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

    /// Sub-sample offset of a peak by a parabola through it and its neighbours, in -0.5...0.5.
    private func parabolicOffset(_ rho: UnsafeMutableBufferPointer<Float>, at n: Int) -> Double {
        let floor = 1e-12
        let a = Double.log(max(Double(rho[(n - 1) & mask]), floor)), b = Double.log(max(Double(rho[n & mask]), floor))
        let c = Double.log(max(Double(rho[(n + 1) & mask]), floor))
        let denominator = a - 2 * b + c
        guard denominator < 0 else { return 0 }
        return max(-0.5, min(0.5, 0.5 * (a - c) / denominator))
    }

    // MARK: Demodulation

    /// Baseband position of the start of data symbol `k` of a frame.
    private func symbolStart(_ frame: Pending, _ k: Int) -> Double {
        frame.start + (2 * profile.chirpDuration + Double(k) * profile.symbolTime) * basebandRate * frame.scale
    }

    /// Baseband samples needed before the next step of pending frame `index`, or nil while that step must
    /// wait for an earlier frame. The coherent detector costs milliseconds per frame, so a detection gets it
    /// only when no earlier one may still be a frame: later ones are usually echoes or chirp-like stretches
    /// inside that frame, dropped when it decodes; they wait their turn. An earlier detection the detector
    /// refused does not block.
    private func readyTime(_ index: Int) -> Int? {
        let frame = pending[index]
        let symbols = FrameFormat.symbolCount(payloadBytes: frame.nextLength)
        let toneTime = Int((symbolStart(frame, symbols) + 2).rounded(.down)) + 1
        guard frame.noncoherentFailed else { return toneTime }
        guard !pending[0..<index].contains(where: { !($0.coherent?.failed ?? false) }) else { return nil }
        if frame.coherent?.failed ?? false { return toneTime }
        return max(toneTime, coherent.requiredSamples(start: frame.start, scale: frame.scale, symbols: symbols))
    }

    /// The next step of pending frame `index` (its samples have arrived): the tone metric's decode of the
    /// next length, or the coherent detector's once the tone metric failed at that length.
    private func step(_ index: Int, into frames: inout [DecodedFrame]) {
        var frame = pending[index]
        let symbols = FrameFormat.symbolCount(payloadBytes: frame.nextLength)
        var decoded: (frame: DecodedFrame, end: Double)?
        // Overwritten (too late), counting what the coherent detector reads before the start.
        var done = frame.start - (CoherentDetector.precursorDuration * basebandRate + 16) < Double(clock - mask)
        if !done && !frame.noncoherentFailed {
            computeEnergies(&frame, upTo: symbols)
            decoded = decode(&frame, payloadBytes: frame.nextLength).result
            frame.noncoherentFailed = decoded == nil
            if decoded == nil {
                pending[index] = frame
                return
            }
        } else if !done {
            // Second opinion: the room-aware coherent detector.
            let detector = coherent
            // The noise the room model must not fit: what arrived just before the frame, when that
            // was quieter than the tone metric's noise (which counts the room's tails as noise).
            let state = frame.coherent ?? detector.makeFrame(start: frame.start, scale: frame.scale,
                                                             noiseVariance: min(frame.noiseVariance, powerBefore(frame)))
            frame.coherent = state
            if let likelihoods = detector.likelihoods(state, symbols: symbols, real: real, imaginary: imaginary, mask: mask) {
                let headerDistance: Int
                (decoded, headerDistance) = decode(&frame, payloadBytes: frame.nextLength, coherentLikelihoods: likelihoods)
                // Nearly right: fit the room again over the whole decided frame and decide again.
                if decoded == nil, headerDistance <= Self.refinementHeaderDistance,
                   frame.refinements < Self.maximumRefinements,
                   let second = detector.refined(state, symbols: symbols),
                   let again = detector.likelihoods(second, symbols: symbols, real: real, imaginary: imaginary, mask: mask) {
                    decoded = decode(&frame, payloadBytes: frame.nextLength, coherentLikelihoods: again).result
                    frame.refinements += 1
                }
            }
        }
        if let result = decoded {
            frames.append(result.frame)
            suppressUntil = max(suppressUntil, result.end - Double(chirpLength) / 2)
            done = true
        } else if !done {
            frame.noncoherentFailed = false
            frame.nextLength += 1
            done = frame.nextLength > FrameFormat.payloadBytes.upperBound
        }
        if done {
            pending.remove(at: index)
            // Drop other detections inside the frame just decoded.
            pending.removeAll { $0.start < suppressUntil }
        } else {
            pending[index] = frame
        }
    }

    /// Mean power per baseband sample over the `Self.noiseProbe` seconds that end shortly before the frame.
    private func powerBefore(_ frame: Pending) -> Double {
        let end = Int(frame.start.rounded(.down)) - Int(0.005 * basebandRate)
        let count = Int(Self.noiseProbe * basebandRate)
        guard end - count > clock - mask, end <= clock else { return .infinity }
        var sum = 0.0
        for n in (end - count)..<end {
            sum += Double(real[n & mask] * real[n & mask] + imaginary[n & mask] * imaginary[n & mask])
        }
        return sum / Double(count)
    }

    /// Energies of every tone of the profile (all sub-bands) over each symbol up to `symbols`, by
    /// correlation with each tone (corrected for the estimated time scale): `toneCount` per symbol.
    /// Tones of the sub-bands a symbol does not use measure the reverberant tails of earlier symbols.
    private func computeEnergies(_ frame: inout Pending, upTo symbols: Int) {
        guard frame.symbolsDone < symbols else { return }
        frame.energies.reserveCapacity(profile.toneCount * FrameFormat.symbolCount(payloadBytes: FrameFormat.payloadBytes.upperBound))
        // Skip the start of each symbol, where the transition from the previous tone lingers.
        let skip = Self.windowSkip * profile.symbolTime * basebandRate * frame.scale
        let window = metricWindow(frame)
        for k in frame.symbolsDone..<symbols {
            appendToneEnergies(from: symbolStart(frame, k) + skip, length: window, scale: frame.scale, into: &frame.energies)
        }
        frame.symbolsDone = symbols
    }

    /// Length of the window each tone correlator integrates over (baseband samples, fractional): the
    /// symbol minus its skipped start, ending half a sample before the next symbol as whole-sample windows
    /// did on average (ending right at the boundary takes in the start of the next transition: the robust
    /// profile lost 5 % of 8-byte frames at Eb/N0 6.5 dB).
    private func metricWindow(_ frame: Pending) -> Double {
        max(1, (1 - Self.windowSkip) * profile.symbolTime * basebandRate * frame.scale - 0.5)
    }

    /// Appends the energy of every tone (`toneCount` values) over the window of `length` baseband samples
    /// from position `from`, both fractional: each sample stands for the interval of one sample period
    /// around it and is weighed by how much of that interval the window covers. Windows that fall between
    /// samples then integrate the same stretch of signal wherever the stream's sample grid lies (with
    /// whole-sample windows, the decision on a frame near the threshold depended on the phase of the
    /// decimator's grid against the frame: 1 in 13 input samples of delay at 48 kHz).
    private func appendToneEnergies(from start: Double, length: Double, scale: Double, into energies: inout [Float]) {
        let real = real, imaginary = imaginary, mask = mask
        let end = start + length
        let firstFull = Int((start + 0.5).rounded(.up)), lastFull = Int((end - 0.5).rounded(.down))
        let first = firstFull - 1, last = lastFull + 1
        let headWeight = Float(Double(firstFull) - 0.5 - start), tailWeight = Float(end - (Double(lastFull) + 0.5))
        for tone in 0..<profile.toneCount {
            let f = profile.toneFrequency(tone) / scale - decimator.centerFrequency
            let step = -2 * Double.pi * f / basebandRate
            let cosStep = Float(Double.cos(step)), sinStep = Float(Double.sin(step))
            var pr: Float = 1, pi: Float = 0
            var accR: Float = 0, accI: Float = 0
            for n in first...last {
                let w: Float = n == first ? headWeight : (n == last ? tailWeight : 1)
                let xr = w * real[n & mask], xi = w * imaginary[n & mask]
                accR += xr * pr - xi * pi
                accI += xr * pi + xi * pr
                let nr = pr * cosStep - pi * sinStep
                pi = pr * sinStep + pi * cosStep
                pr = nr
            }
            energies.append(accR * accR + accI * accI)
        }
    }

    /// Tone energies over `SignalReport.noiseProbeWindows` windows ending shortly before the frame (the
    /// noise its SNR is measured against), or none when they would reach before the stream or into
    /// audio the ring buffer no longer holds.
    private func noiseProbe(_ frame: Pending, now: Int) -> [Float] {
        let window = metricWindow(frame)
        let end = frame.start - SignalReport.noiseProbeGap * basebandRate
        let first = end - Double(SignalReport.noiseProbeWindows) * window
        guard first >= 1, Int(first) > now - mask + 64 else { return [] }
        var energies: [Float] = []
        energies.reserveCapacity(profile.toneCount * SignalReport.noiseProbeWindows)
        for w in 0..<SignalReport.noiseProbeWindows {
            appendToneEnergies(from: first + Double(w) * window, length: window, scale: frame.scale, into: &energies)
        }
        return energies
    }

    /// Per-symbol log-likelihoods of the 16 values, with a reverberation-aware noise model.
    ///
    /// Each tone's energy at symbol k is modelled as noise (N0) plus the reverberant tail of what that
    /// tone held at symbol k - 1, decayed by a factor alpha estimated from the frame itself (how much
    /// energy a tone keeps one symbol after it was sent). A tone whose energy is explained by a tail is
    /// then weighed as noisier, instead of as a likely symbol. In a dry room alpha is about 0 and the
    /// metric is the plain noncoherent one, log I0(2 A sqrt(E) / N0).
    static func symbolLikelihoods(energies: ArraySlice<Float>, symbols: Int, profile: Profile)
        -> (likelihoods: [Float], signal: Double, noise: Double) {
        let tones = profile.toneCount
        let base = energies.startIndex
        @inline(__always) func energy(_ k: Int, _ t: Int) -> Float { energies[base + k * tones + t] }
        @inline(__always) func subBandTone(_ k: Int, _ m: Int) -> Int { (k % profile.subBands) * profile.tonesPerSubBand + m }
        // Strongest tone of each symbol, among those of its sub-band.
        var strongest = [Int](repeating: 0, count: symbols)
        var used = [Float]()
        used.reserveCapacity(16 * symbols)
        for k in 0..<symbols {
            var best = 0
            for m in 0..<16 {
                let e = energy(k, subBandTone(k, m))
                used.append(e)
                if e > energy(k, subBandTone(k, best)) { best = m }
            }
            strongest[k] = subBandTone(k, best)
        }
        // Noise: from the lower quartile of the tone energies (exponentially distributed under noise,
        // whose 25th percentile is ln(4/3) of the mean), robust to symbols and tails.
        let quartile = Double(select(&used, rank: used.count / 4))
        var noise = max(quartile / 0.287682, 1e-30)
        // Tail decay per symbol: energy a tone keeps one symbol after it was the strongest.
        var kept = 0.0, had = 0.0
        for k in 1..<max(1, symbols) where strongest[k] != strongest[k - 1] {
            kept += Double(energy(k, strongest[k - 1])) - noise
            had += Double(energy(k - 1, strongest[k - 1])) - noise
        }
        let alpha = had > 0 ? Float(min(0.9, max(0, kept / had))) : 0
        // Refine the noise without the modelled tails, then the signal amplitude.
        var residual = 0.0, residualCount = 0, signal = 0.0
        var variance = [Float](repeating: 0, count: 16 * symbols)
        for k in 0..<symbols {
            for m in 0..<16 {
                let t = subBandTone(k, m)
                let tail = k > 0 ? alpha * max(0, energy(k - 1, t) - Float(noise)) : 0
                variance[16 * k + m] = tail
                if t != strongest[k] { residual += Double(max(0, energy(k, t) - tail)); residualCount += 1 }
            }
        }
        if residualCount > 0 { noise = max(residual / Double(residualCount), noise * 0.25, 1e-30) }
        // Signal: overall, then per tone (rooms fade tones independently: a tone in a notch is weighed
        // as weak instead of as noise), shrunk towards the overall value when a tone was seldom used.
        var toneSignal = [Double](repeating: 0, count: tones)
        var toneUses = [Double](repeating: 0, count: tones)
        for k in 0..<symbols {
            let m = strongest[k] - (k % profile.subBands) * profile.tonesPerSubBand
            let value = max(0, Double(energy(k, strongest[k]) - variance[16 * k + m]) - noise)
            signal += value
            toneSignal[strongest[k]] += value
            toneUses[strongest[k]] += 1
        }
        signal = max(signal / Double(symbols), noise * 0.05)
        let prior = Self.toneGainPrior
        var toneAmplitude = [Float](repeating: 0, count: tones)
        for t in 0..<tones {
            let estimate = (toneSignal[t] + prior * signal) / (toneUses[t] + prior)
            toneAmplitude[t] = Float(max(estimate, noise * 0.05).squareRoot())
        }
        var likelihoods = [Float](repeating: 0, count: 16 * symbols)
        for k in 0..<symbols {
            for m in 0..<16 {
                let t = subBandTone(k, m)
                let sigma2 = Float(noise) + variance[16 * k + m]
                let amplitude = toneAmplitude[t]
                let e = energy(k, t)
                likelihoods[16 * k + m] = -amplitude * amplitude / sigma2 + logBesselI0(2 * amplitude * e.squareRoot() / sigma2)
            }
        }
        return (likelihoods, signal, noise)
    }

    /// Decodes `payloadBytes` from the noncoherent metric, or from `coherentLikelihoods` when given; the
    /// noncoherent statistics give the reported SNR and level either way.
    private func decode(_ frame: inout Pending, payloadBytes: Int, coherentLikelihoods: [Float]? = nil)
        -> (result: (frame: DecodedFrame, end: Double)?, headerDistance: Int) {
        let symbols = FrameFormat.symbolCount(payloadBytes: payloadBytes)
        let (likelihoods, signal, noise) = Self.symbolLikelihoods(
            energies: frame.energies[0..<(profile.toneCount * symbols)], symbols: symbols, profile: profile)
        frame.noiseVariance = noise / metricWindow(frame)
        let attempt = FrameFormat.decodeReportingHeader(symbolLogLikelihoods: coherentLikelihoods ?? likelihoods,
                                                        payloadBytes: payloadBytes, profile: profile)
        guard let decoded = attempt.decoded else { return (nil, attempt.headerDistance) }
        let window = metricWindow(frame) / basebandRate
        // The in-band SNR, against the symbols actually sent (re-encoded from the payload).
        let values = (try? FrameFormat.symbols(payload: decoded.payload, profile: profile)) ?? []
        let snr = SignalReport.inBandSNR(
            energies: frame.energies[0..<(profile.toneCount * symbols)], values: values,
            probe: noiseProbe(frame, now: clock)[...], profile: profile,
            bandwidthCorrection: profile.symbolTime * frame.scale / window)
        let end = symbolStart(frame, symbols) + profile.fadeDuration * basebandRate * frame.scale
        // A tone of amplitude a sums to a x W over a W-sample window (the decimator keeps a cosine's
        // amplitude), so the received level is sqrt(signal) / W, in dB re full scale.
        let windowSamples = window * basebandRate
        let level = 20 * Double.log10(max(signal.squareRoot() / windowSamples, 1e-12))
        let result = DecodedFrame(
            token: decoded.payload, profile: profile.name,
            startTime: frame.start / basebandRate,
            endTime: end / basebandRate,
            snr: (snr * 10).rounded() / 10,
            level: (level * 10).rounded() / 10,
            clockOffsetPPM: ((frame.scale - 1) * 1e6).rounded(),
            correctedBits: decoded.correctedBits)
        return ((result, end), attempt.headerDistance)
    }
}

/// The element of rank `k` (0-based, ascending) of `values`, by quickselect (reorders `values`):
/// linear time, where sorting to read one quantile would be n log n.
func select(_ values: inout [Float], rank k: Int) -> Float {
    var low = 0, high = values.count - 1
    while low < high {
        let pivot = values[(low + high) / 2]
        var i = low, j = high
        while i <= j {
            while values[i] < pivot { i += 1 }
            while values[j] > pivot { j -= 1 }
            if i <= j { values.swapAt(i, j); i += 1; j -= 1 }
        }
        if k <= j { high = j } else if k >= i { low = i } else { return values[k] }
    }
    return values[k]
}
