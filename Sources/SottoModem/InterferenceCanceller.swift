import RealModule
import SottoDSP

/// Successive interference cancellation for a ``StreamingDecoder`` made with `cancelsInterference`: every frame
/// the decoder reports is made again (the same symbols through the ``Modulator``, at the frame's time scale),
/// passed through the room it arrived through (estimated from the input itself, below), subtracted from the
/// input kept here, and the residual decoded again for a frame the first one hid (two bursts of one band that
/// overlap, the weaker under the stronger).
///
/// The room of each frame is a filter of `tailDuration` (s) estimated over the frame and its tail by least
/// squares in the frequency domain (the received spectrum over the frame's, regularised, kept in the frame's
/// band only, then cut to `precursorDuration` before and `tailDuration` after the direct sound). The frame's
/// time scale (the sender's clock against ours) is searched once, as the one that leaves the least residual
/// energy (`scaleSearch`, then two parabolas): the preamble's estimate can be 100 ppm off in a room, and 20 ppm
/// off turns the last symbols of a 0.54 s frame at 19 kHz by 1.3 rad, which leaves half of them uncancelled.
///
/// A frame decoded at time t is cancelled, and its residual searched, once the input reaches its end plus the
/// longest frame of the profiles listened for (a frame it hid may have started then) plus `settleDuration`: a
/// hidden frame is reported that much later than the frames around it. The residual of a window around it is
/// decoded by a fresh decoder after every frame known there (reported by the decoder or found here) has been
/// subtracted, the estimates of overlapping frames refined in turn; a frame found there is reported when it
/// overlaps a frame that was subtracted and is no repeat of a known one, and is itself subtracted before one
/// more search (`passes`). One owner (the decoder).
final class InterferenceCanceller {
    let sampleRate: Double
    let profiles: [Profile]
    let aliasFrames: Bool
    /// The tuning of the decoders run on what is left.
    let tuning: ReceiverTuning
    /// Input kept (samples, a power of two) and its ring.
    private let capacity: Int
    private var ring: [Float]
    /// Input samples appended so far.
    private(set) var written = 0
    /// The longest frame of the profiles listened for (input samples): how far before or after a frame
    /// a frame it hid may start.
    let reach: Int

    /// Audio kept before the direct sound by the room filter (s): the start estimate's error.
    static let precursorDuration = 0.002
    /// Audio before a frame's start that its fit reads (s), at least `precursorDuration`.
    static let leadDuration = 0.015
    /// Length of the room filter after the direct sound (s): 24 dB of decay at RT60 0.5 s.
    static let tailDuration = 0.2
    /// Audio the window of a search keeps beyond the frames it may hold (s), and the decoder's delay in
    /// reporting a frame (a frame it reports late is not searched for again).
    static let settleDuration = 0.3
    /// Searches of one window: each subtracts the frames the previous one found.
    static let passes = 2
    /// Two frames of one token and profile starting within this (s) are one.
    static let repeatWindow = 0.1
    /// Regularisation of the room's spectrum: a share of the frame's mean power per bin in its band.
    static let regularisation: Float = 0.02
    /// Time scales tried first around the decoder's estimate (ppm), before two parabolas: the estimate from the
    /// preamble can be 100 ppm off in a room, and the residual's energy grows over about 100 ppm.
    static let scaleSearch: [Double] = [-200, -150, -100, -50, 0, 50, 100, 150, 200]

    /// A frame reported (by the decoder or found here), and what its cancellation needs.
    struct Known {
        var frame: DecodedFrame
        var profile: Profile
        /// Input sample of its start (rounded down) and its length at its time scale (samples).
        var start: Int
        var length: Int
        /// Its time scale (1 + ppm x 1e-6), refined once it has been cancelled.
        var scale: Double
        var scaleRefined = false
        /// True when found in a residual here.
        var found: Bool
        /// Input sample at which its search is due, nil when none is (found here, or done).
        var due: Int?
    }
    private var known: [Known] = []
    /// Transforms by size (powers of two).
    private var forward: [Int: RealFFT] = [:]
    private var inverse: [Int: InverseRealFFT] = [:]

    init(sampleRate: Double, profiles: [Profile], aliasFrames: Bool, tuning: ReceiverTuning) {
        self.sampleRate = sampleRate
        self.tuning = tuning
        self.profiles = profiles
        self.aliasFrames = aliasFrames
        let longest = profiles.map { $0.airtime(payloadBytes: FrameFormat.payloadBytes.upperBound) }.max() ?? 1
        reach = Int((longest * sampleRate).rounded(.up))
        let window = 3 * reach + Int((2 * Self.settleDuration + Self.tailDuration + 1) * sampleRate)
        var capacity = 1 << 16
        while capacity < window { capacity *= 2 }
        self.capacity = capacity
        ring = [Float](repeating: 0, count: capacity)
    }

    /// Keeps the input.
    func append(_ samples: UnsafeBufferPointer<Float>) {
        let mask = capacity - 1
        var done = max(0, samples.count - capacity)
        ring.withUnsafeMutableBufferPointer { ring in
            while done < samples.count {
                let slot = (written + done) & mask
                let run = min(samples.count - done, capacity - slot)
                (ring.baseAddress! + slot).update(from: samples.baseAddress! + done, count: run)
                done += run
            }
        }
        written += samples.count
    }

    /// The frames the decoder reported, less those found here already; each is remembered and its search
    /// scheduled.
    func takeReported(_ frames: [DecodedFrame]) -> [DecodedFrame] {
        var kept: [DecodedFrame] = []
        for frame in frames {
            if known.contains(where: { $0.found && Self.isRepeat($0.frame, frame) }) { continue }
            kept.append(frame)
            guard let known = makeKnown(frame, found: false) else { continue }
            self.known.append(known)
        }
        return kept
    }

    private func makeKnown(_ frame: DecodedFrame, found: Bool) -> Known? {
        guard let profile = profiles.first(where: { $0.name == frame.profile }) else { return nil }
        let scale = 1 + frame.clockOffsetPPM * 1e-6
        let airtime = frame.alias != nil ? profile.aliasAirtime : profile.airtime(payloadBytes: frame.token.count)
        let start = Int((frame.startTime * sampleRate).rounded(.down))
        let length = Int((airtime * scale * sampleRate).rounded(.up))
        let due = found ? nil : start + length + reach + Int((Self.tailDuration + 2 * Self.settleDuration) * sampleRate)
        return Known(frame: frame, profile: profile, start: start, length: length, scale: scale, found: found, due: due)
    }

    static func isRepeat(_ a: DecodedFrame, _ b: DecodedFrame) -> Bool {
        a.profile == b.profile && a.token == b.token && a.alias == b.alias && abs(a.startTime - b.startTime) < repeatWindow
    }

    /// Runs the searches due by now (all of them at the end of the stream, `final`); returns the frames found.
    func runDue(final: Bool) -> [DecodedFrame] {
        var found: [DecodedFrame] = []
        while let index = known.indices.first(where: { known[$0].due.map { final || $0 <= written } ?? false }) {
            known[index].due = nil
            found += search(around: index, final: final)
        }
        // Forget what no window can reach any more.
        let horizon = written - capacity + reach
        known.removeAll { $0.start + $0.length < horizon && $0.due == nil }
        return found
    }

    /// Cancels every known frame in the window around known frame `anchor`, decodes the residual, keeps new
    /// frames that overlap a cancelled one, and repeats with them.
    private func search(around anchor: Int, final: Bool) -> [DecodedFrame] {
        let tail = Int(Self.tailDuration * sampleRate), settle = Int(Self.settleDuration * sampleRate)
        let lead = Int(Self.leadDuration * sampleRate)
        let a = known[anchor]
        let oldest = max(0, written - capacity + 1)
        var from = max(oldest, a.start - reach - settle)
        // At the end of the stream the window runs on in silence (as the decoder's `finish` does).
        let end = a.start + a.length + reach + tail + settle
        let to = final ? max(end, written) : min(written, end)
        // Frames that reach into the window from before it: the window starts before them.
        for k in known where k.start < from && k.start + k.length + tail > from { from = max(oldest, min(from, k.start - settle)) }
        guard to - from > tail else { return [] }
        var window = [Float](repeating: 0, count: to - from)
        let mask = capacity - 1
        for i in 0..<min(window.count, written - from) { window[i] = ring[(from + i) & mask] }
        let original = window
        var reported: [DecodedFrame] = []
        for _ in 0..<Self.passes {
            // Strongest first; each against what the others leave (two rounds when frames overlap).
            let members = known.indices.filter {
                known[$0].start - lead >= from && known[$0].start + known[$0].length + tail + 16 <= to
            }.sorted { known[$0].frame.level > known[$1].frame.level }
            guard !members.isEmpty else { return reported }
            var models: [Int: (offset: Int, samples: [Float])] = [:]
            window = original
            let rounds = members.count > 1 ? 2 : 1
            for _ in 0..<rounds {
                for m in members {
                    if let old = models[m] { add(old.samples, to: &window, at: old.offset, sign: 1) }
                    guard let model = cancel(m, in: window, from: from) else { continue }
                    add(model.samples, to: &window, at: model.offset, sign: -1)
                    models[m] = model
                }
            }
            guard let decoded = try? StreamingDecoder.decode(window, sampleRate: sampleRate, profiles: profiles,
                                                              aliasFrames: aliasFrames, tuning: tuning) else { return reported }
            var added = false
            for var frame in decoded {
                frame.startTime += Double(from) / sampleRate
                frame.endTime += Double(from) / sampleRate
                guard !known.contains(where: { Self.isRepeat($0.frame, frame) }) else { continue }
                let start = Int(frame.startTime * sampleRate), end = Int(frame.endTime * sampleRate)
                guard members.contains(where: { known[$0].start < end && start < known[$0].start + known[$0].length + tail }),
                      let k = makeKnown(frame, found: true) else { continue }
                known.append(k)
                reported.append(frame)
                added = true
            }
            guard added else { break }
        }
        return reported
    }

    private func add(_ samples: [Float], to window: inout [Float], at offset: Int, sign: Float) {
        let low = max(0, -offset), high = min(samples.count, window.count - offset)
        guard low < high else { return }
        for i in low..<high { window[offset + i] += sign * samples[i] }
    }

    /// The model of known frame `index` as received in `window` (which starts at input sample `from`): its
    /// offset in the window and samples. Searches the frame's time scale the first time (`scaleSearch`).
    private func cancel(_ index: Int, in window: [Float], from: Int) -> (offset: Int, samples: [Float])? {
        var k = known[index]
        if k.scaleRefined {
            return fit(k, window: window, from: from).map { ($0.offset, $0.samples) }
        }
        // The residual's energy against the scale: coarse steps around the decoder's estimate, then parabolas.
        let base = k.scale
        var tried: [(ppm: Double, energy: Double, model: (offset: Int, samples: [Float]))] = []
        func evaluate(_ ppm: Double) -> Double? {
            if let done = tried.first(where: { abs($0.ppm - ppm) < 0.5 }) { return done.energy }
            k.scale = base * (1 + ppm * 1e-6)
            guard let model = fit(k, window: window, from: from) else { return nil }
            tried.append((ppm, model.residual, (model.offset, model.samples)))
            return model.residual
        }
        for ppm in Self.scaleSearch { guard evaluate(ppm) != nil else { return nil } }
        for step in [Self.scaleSearch[1] - Self.scaleSearch[0], 15] {
            guard let best = tried.min(by: { $0.energy < $1.energy }) else { return nil }
            guard let left = evaluate(best.ppm - step), let right = evaluate(best.ppm + step) else { return nil }
            let curvature = left - 2 * best.energy + right
            let vertex = curvature > 0 ? best.ppm + 0.5 * step * (left - right) / curvature : best.ppm
            _ = evaluate(max(best.ppm - step, min(best.ppm + step, vertex)))
        }
        guard let best = tried.min(by: { $0.energy < $1.energy }) else { return nil }
        k.scale = base * (1 + best.ppm * 1e-6)
        k.scaleRefined = true
        known[index] = k
        return best.model
    }

    /// One fit of known frame `k`'s room over `window`: the model's offset and samples, and the energy of the
    /// window less the model over them.
    private func fit(_ k: Known, window: [Float], from: Int) -> (offset: Int, samples: [Float], residual: Double)? {
        guard let modulator = try? Modulator(profile: k.profile, sampleRate: sampleRate) else { return nil }
        let trajectory: FrequencyTrajectory
        do {
            if let alias = k.frame.alias { trajectory = try modulator.trajectory(alias: alias) }
            else { trajectory = try modulator.trajectory(token: k.frame.token) }
        } catch { return nil }
        let sent = trajectory.synthesize(sampleRate: sampleRate * k.scale, amplitude: 1)
        let pre = Int(Self.leadDuration * sampleRate)
        let precursor = Int(Self.precursorDuration * sampleRate)
        let taps = Int(Self.tailDuration * sampleRate)
        let offset = k.start - from - pre
        let span = pre + sent.count + taps
        guard offset >= 0, offset + span <= window.count else { return nil }
        var size = 1024
        while size < span { size *= 2 }
        let fft = transform(size), ifft = inverseTransform(size)
        let bins = size / 2 + 1
        // The received span's spectrum.
        fft.input.update(repeating: 0)
        for i in 0..<span { fft.input[i] = window[offset + i] }
        fft.execute()
        let y = Array(fft.output)
        // The frame's spectrum, placed `pre` samples into the span.
        fft.input.update(repeating: 0)
        for i in 0..<sent.count { fft.input[pre + i] = sent[i] }
        fft.execute()
        let x = Array(fft.output)
        // Its band (the tones' smoothing spills a little past them), at its time scale.
        let low = max(1, Int(((k.profile.lowFrequency - 300) / k.scale) * Double(size) / sampleRate))
        let high = min(bins - 1, Int(((k.profile.highFrequency + 300) / k.scale) * Double(size) / sampleRate) + 1)
        guard low < high else { return nil }
        var mean: Float = 0
        for b in low...high { mean += x[2 * b] * x[2 * b] + x[2 * b + 1] * x[2 * b + 1] }
        mean /= Float(high - low + 1)
        let lambda = Self.regularisation * mean
        ifft.input.update(repeating: 0)
        for b in low...high {
            let xr = x[2 * b], xi = x[2 * b + 1], yr = y[2 * b], yi = y[2 * b + 1]
            let d = xr * xr + xi * xi + lambda
            ifft.input[2 * b] = (yr * xr + yi * xi) / d
            ifft.input[2 * b + 1] = (yi * xr - yr * xi) / d
        }
        ifft.execute()
        // The room: `precursor` samples before the direct sound and `taps` after, tapered at the far end.
        var h = [Float](repeating: 0, count: size)
        let norm = 1 / Float(size)
        let taper = taps / 5
        for n in 0..<taps {
            let g: Float = n < taps - taper ? 1 : Float(0.5 + 0.5 * Double.cos(Double.pi * Double(n - (taps - taper)) / Double(taper)))
            h[n] = ifft.output[n] * norm * g
        }
        for n in 1...precursor { h[size - n] = ifft.output[size - n] * norm }
        fft.input.update(from: h)
        fft.execute()
        // The model's spectrum (room times frame), in the band; the model, and its quadrature (Hilbert).
        var model = [Float](repeating: 0, count: 2 * bins)
        for b in low...high {
            let hr = fft.output[2 * b], hi = fft.output[2 * b + 1], xr = x[2 * b], xi = x[2 * b + 1]
            model[2 * b] = hr * xr - hi * xi
            model[2 * b + 1] = hr * xi + hi * xr
        }
        ifft.input.update(from: model)
        ifft.execute()
        let samples = (0..<span).map { ifft.output[$0] * norm }
        var residual = 0.0
        for i in 0..<span {
            let r = Double(window[offset + i] - samples[i])
            residual += r * r
        }
        return (offset, samples, residual)
    }

    private func transform(_ size: Int) -> RealFFT {
        if let fft = forward[size] { return fft }
        let fft = RealFFT(size: size)
        forward[size] = fft
        return fft
    }

    private func inverseTransform(_ size: Int) -> InverseRealFFT {
        if let fft = inverse[size] { return fft }
        let fft = InverseRealFFT(size: size)
        inverse[size] = fft
        return fft
    }
}
