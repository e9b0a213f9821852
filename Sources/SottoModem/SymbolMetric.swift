import RealModule
import SottoDSP

/// The noncoherent symbol metric: the energy of every tone of the profile over each symbol, and from
/// those energies the log-likelihood of each of the 16 values of each symbol.
///
/// Energies are correlations of the baseband with each tone (corrected for the frame's time scale) over
/// a window of one symbol minus its start, where the previous tone's Gaussian transition lingers.
/// Windows start and end between samples (edge samples weighed by how much of them the window covers),
/// so a frame is measured the same wherever the baseband's sample grid falls against it.
enum SymbolMetric {
    /// Fraction of each symbol skipped before integrating, where the Gaussian transition from the
    /// previous tone lingers (measured with BT = 2: 0.05 beat 0 and 0.10 by about 0.3 dB).
    static let windowSkip = 0.05
    /// Weight (in symbols) of the frame-wide signal level in each tone's level estimate.
    static let toneGainPrior = 2.0

    /// Length of the window each tone correlator integrates over (baseband samples, fractional) for a
    /// symbol of `symbolSamples` samples: the symbol minus its skipped start, ending half a sample before
    /// the next symbol as whole-sample windows did on average (ending right at the boundary takes in the
    /// start of the next transition: the robust profile lost 5 % of 8-byte frames at Eb/N0 6.5 dB).
    static func windowLength(symbolSamples: Double) -> Double {
        max(1, (1 - windowSkip) * symbolSamples - 0.5)
    }

    /// Appends the energy of every tone (`steps.count` values) over the window of `length` baseband
    /// samples from position `start`, both fractional: each sample stands for the interval of one
    /// sample period around it and is weighed by how much of that interval the window covers.
    ///
    /// Eight tones at a time, one per SIMD lane, each lane doing what a loop over one tone does (same
    /// operations in the same order, so the same energies): every profile has a multiple of 16 tones.
    /// - Parameter steps: per tone, the phase step per baseband sample as (cos, sin) of
    ///   -2 pi (tone frequency - baseband centre) / baseband rate.
    static func appendToneEnergies(_ history: BasebandHistory, from start: Double, length: Double,
                                   steps: UnsafeBufferPointer<(Float, Float)>, into energies: inout [Float]) {
        typealias Lanes = SIMD8<Float>
        let real = history.real, imaginary = history.imaginary, mask = history.mask
        let end = start + length
        let firstFull = Int((start + 0.5).rounded(.up)), lastFull = Int((end - 0.5).rounded(.down))
        let first = firstFull - 1, last = lastFull + 1
        let headWeight = Float(Double(firstFull) - 0.5 - start), tailWeight = Float(end - (Double(lastFull) + 0.5))
        precondition(steps.count % Lanes.scalarCount == 0, "tone count not a multiple of \(Lanes.scalarCount)")
        var tone = 0
        while tone < steps.count {
            var cosStep = Lanes(), sinStep = Lanes()
            for lane in 0..<Lanes.scalarCount { (cosStep[lane], sinStep[lane]) = steps[tone + lane] }
            var pr = Lanes(repeating: 1), pi = Lanes(repeating: 0)
            var accR = Lanes(repeating: 0), accI = Lanes(repeating: 0)
            // The partly covered first and last samples, and the whole ones between (no branch per sample).
            @inline(__always) func accumulate(_ n: Int, _ w: Float) {
                let xr = Lanes(repeating: w * real[n & mask]), xi = Lanes(repeating: w * imaginary[n & mask])
                accR += xr * pr - xi * pi
                accI += xr * pi + xi * pr
                let nr = pr * cosStep - pi * sinStep
                pi = pr * sinStep + pi * cosStep
                pr = nr
            }
            accumulate(first, headWeight)
            for n in (first + 1)..<last { accumulate(n, 1) }
            accumulate(last, tailWeight)
            let energy = accR * accR + accI * accI
            for lane in 0..<Lanes.scalarCount { energies.append(energy[lane]) }
            tone += Lanes.scalarCount
        }
    }

    /// Per-symbol log-likelihoods of the 16 values, with a reverberation-aware noise model, written to
    /// `workspace.likelihoods` (16 per symbol, the first `16 * symbols` values; the workspace's other
    /// tone-metric buffers are scratch).
    ///
    /// Each tone's energy at symbol k is modelled as noise (N0) plus the reverberant tail of what that
    /// tone held at symbol k - 1, decayed by a factor alpha estimated from the frame itself (how much
    /// energy a tone keeps one symbol after it was sent). A tone whose energy is explained by a tail is
    /// then weighed as noisier, instead of as a likely symbol. In a dry room alpha is about 0 and the
    /// metric is the plain noncoherent one, log I0(2 A sqrt(E) / N0).
    /// - Returns: the signal and noise energies per window; the tail decay alpha (share of a tone's energy
    ///   left one symbol after it was sent: about 0 when dry).
    static func likelihoods(energies: ArraySlice<Float>, symbols: Int, profile: Profile, workspace: inout DecodeWorkspace)
        -> (signal: Double, noise: Double, tail: Double) {
        // The pointer loops below trust these (the arrays they replaced checked every index).
        precondition(symbols > 0 && 16 * symbols <= workspace.likelihoods.count && profile.toneCount <= workspace.toneSignal.count
                     && energies.count >= profile.toneCount * symbols, "tone metric: \(symbols) symbols beyond the workspace")
        return energies.withUnsafeBufferPointer { energies in
            workspace.withToneMetricScratch { scratch in
                likelihoods(energies: energies.baseAddress!, symbols: symbols, profile: profile, scratch: scratch)
            }
        }
    }

    /// `likelihoods` on the workspace's buffers (the same sums in the same order): with the arrays, every
    /// write checked the array's bounds and uniqueness, a third of the metric's instructions.
    private static func likelihoods(energies: UnsafePointer<Float>, symbols: Int, profile: Profile,
                                    scratch: DecodeWorkspace.ToneMetricScratch) -> (signal: Double, noise: Double, tail: Double) {
        let tones = profile.toneCount, subBands = profile.subBands, tonesPerSubBand = profile.tonesPerSubBand
        let used = scratch.used, variance = scratch.variance, strongest = scratch.strongest
        let toneSignal = scratch.toneSignal, toneUses = scratch.toneUses, toneAmplitude = scratch.toneAmplitude
        let likelihoods = scratch.likelihoods
        @inline(__always) func energy(_ k: Int, _ t: Int) -> Float { energies[k &* tones &+ t] }
        /// The first tone of symbol k's sub-band.
        @inline(__always) func subBandBase(_ k: Int) -> Int { (k % subBands) * tonesPerSubBand }
        // Strongest tone of each symbol, among those of its sub-band.
        for k in 0..<symbols {
            let bandBase = subBandBase(k)
            var best = 0
            for m in 0..<16 {
                let e = energy(k, bandBase + m)
                used[16 * k + m] = e
                if e > energy(k, bandBase + best) { best = m }
            }
            strongest[k] = bandBase + best
        }
        // Noise: from the lower quartile of the tone energies (exponentially distributed under noise,
        // whose 25th percentile is ln(4/3) of the mean), robust to symbols and tails.
        let quartile = Double(select(UnsafeMutableBufferPointer(start: used, count: 16 * symbols), rank: 16 * symbols / 4))
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
        let noiseFloat = Float(noise)
        for k in 0..<symbols {
            let bandBase = subBandBase(k)
            for m in 0..<16 {
                let t = bandBase + m
                let tail = k > 0 ? alpha * max(0, energy(k - 1, t) - noiseFloat) : 0
                variance[16 * k + m] = tail
                if t != strongest[k] { residual += Double(max(0, energy(k, t) - tail)); residualCount += 1 }
            }
        }
        if residualCount > 0 { noise = max(residual / Double(residualCount), noise * 0.25, 1e-30) }
        // Signal: overall, then per tone (rooms fade tones independently: a tone in a notch is weighed
        // as weak instead of as noise), shrunk towards the overall value when a tone was seldom used.
        for t in 0..<tones { toneSignal[t] = 0; toneUses[t] = 0 }
        for k in 0..<symbols {
            let best = strongest[k]
            let m = best - subBandBase(k)
            let value = max(0, Double(energy(k, best) - variance[16 * k + m]) - noise)
            signal += value
            toneSignal[best] += value
            toneUses[best] += 1
        }
        signal = max(signal / Double(symbols), noise * 0.05)
        let prior = toneGainPrior
        for t in 0..<tones {
            let estimate = (toneSignal[t] + prior * signal) / (toneUses[t] + prior)
            toneAmplitude[t] = Float(max(estimate, noise * 0.05).squareRoot())
        }
        let noiseVariance = Float(noise)
        for k in 0..<symbols {
            let bandBase = subBandBase(k)
            for m in 0..<16 {
                let t = bandBase + m
                let sigma2 = noiseVariance + variance[16 * k + m]
                let amplitude = toneAmplitude[t]
                let e = energy(k, t)
                likelihoods[16 * k + m] = -amplitude * amplitude / sigma2 + logBesselI0(2 * amplitude * e.squareRoot() / sigma2)
            }
        }
        return (signal, noise, Double(alpha))
    }
}

/// The element of rank `k` (0-based, ascending) of `values`, by quickselect (reorders `values`):
/// linear time, where sorting to read one quantile would be n log n.
func select(_ values: inout [Float], rank k: Int) -> Float {
    values.withUnsafeMutableBufferPointer { select($0, rank: k) }
}

/// `select` on a buffer (reorders it).
func select(_ values: UnsafeMutableBufferPointer<Float>, rank k: Int) -> Float {
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
