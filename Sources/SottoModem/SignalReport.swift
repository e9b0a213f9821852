import RealModule

/// What a decoded frame reports about its signal: the in-band SNR (dB), from the tone energies the
/// receiver measured over the frame's data symbols and over a stretch of audio just before it.
///
/// **In-band SNR** is the received signal's power over the noise power in the profile's band
/// (`Profile.band`, 1.8 kHz for the default profile), both measured over the frame's data symbols.
/// Everything the frame puts into the band counts as signal, the reverberant tail included; noise is
/// what was there without the frame. For white noise it is the channel simulator's full-band SNR plus
/// 10 log10((fs / 2) / bandwidth) (11.2 dB for the default profile at 48 kHz), plus the room's gain.
///
/// How: the tone correlators of a symbol window (one per tone, spaced 1 / symbol time) tile the band,
/// so their energies summed over all tones hold the in-band power of the window plus `toneCount`
/// times the noise energy of one correlator. That noise energy comes from the same correlators run over
/// windows just before the frame, where the frame and its tail are absent, and after the end of the
/// frames decoded before it in the band (frames 0.1 s apart are each measured in the gap before them; in a
/// room what is left there of the previous frame's tail counts as noise). When fewer than
/// `minimumNoiseProbeWindows` fit there, or those windows are clearly noisier than the frame's own unused
/// tones (a sound that stopped), the noise comes from the unused tones, which hold the signal's leakage
/// and the room's tails as well as the noise (about 25 dB under the signal), so they alone cannot measure
/// a high SNR. Even near the
/// decoding threshold they read 20-40 % above the noise in a room: pooling them with the windows before
/// whenever the two agreed within their statistical error made the report 2-2.6 dB low there (1 m from
/// the source in a 0.5 s room, -15 dB full band) on about half the seeds, and right on the others.
enum SignalReport {
    /// Windows of one symbol measured before a frame for its noise (24: 384 energies estimate the noise
    /// within 5 %; with 12, 30 seeds at the threshold were reported within -1.9...+2.2 dB of the truth in
    /// a dry channel, with 24 within -1.3...+1.5 dB), and the gap between the last one and the frame's
    /// detected start (s): the room model lets the direct sound arrive up to
    /// `CoherentDetector.precursorDuration` (4 ms) before the detected start, and the band filter rings
    /// for a few milliseconds before a sound. The same gap is left after the end of a frame decoded
    /// before it (the filter rings after a sound too).
    static let noiseProbeWindows = 24
    /// Fewest windows worth measuring when the stream holds less before a frame (at 16 tones, 64 energies:
    /// a relative error of 1/8 on the noise, 0.5 dB).
    static let minimumNoiseProbeWindows = 4
    static let noiseProbeGap = 0.010
    /// Standard errors by which the noise before the frame must exceed the unused tones' to be ignored.
    static let noiseAgreement = 3.0
    /// Highest SNR reported (dB): the noise is never taken below 1e-12 of the signal (a file with digital
    /// silence around a frame has no noise to measure).
    static let maximumSNR = 120.0

    /// In-band SNR (dB).
    /// - Parameters:
    ///   - energies: tone energies of the frame, `toneCount` per data symbol (`values.count` symbols).
    ///   - values: the decoded frame's symbol values (0..<16), re-encoded from its payload.
    ///   - probe: tone energies of windows before the frame (`toneCount` per window), or empty when the
    ///     stream holds nothing before it.
    ///   - bandwidthCorrection: symbol time (received, s) x baseband rate (Hz) / window length (samples):
    ///     the correlators integrate a little less than a symbol, so they tile the band a little loosely.
    static func inBandSNR(energies: ArraySlice<Float>, values: ArraySlice<Int>, probe: ArraySlice<Float>, profile: Profile,
                          bandwidthCorrection: Double) -> Double {
        let tones = profile.toneCount
        let symbols = values.count
        guard symbols > 0, energies.count >= tones * symbols else { return -.infinity }
        let base = energies.startIndex
        var total = 0.0, unused = 0.0
        for k in 0..<symbols {
            let sent = (k % profile.subBands) * profile.tonesPerSubBand + values[values.startIndex + k]
            for t in 0..<tones {
                let e = Double(energies[base + k * tones + t])
                total += e
                if t != sent { unused += e }
            }
        }
        let inFrameCount = Double(symbols * (tones - 1))
        let inFrame = unused / inFrameCount
        var noise = inFrame
        if !probe.isEmpty {
            let probeCount = Double(probe.count)
            let before = probe.reduce(0.0) { $0 + Double($1) } / probeCount
            // Each estimate averages exponentially distributed energies: relative error 1 / sqrt(count).
            let tolerance = noiseAgreement * (1 / probeCount + 1 / inFrameCount).squareRoot()
            if before <= inFrame * (1 + tolerance) { noise = before }
        }
        let perSymbol = total / Double(symbols)
        let noiseInBand = Double(tones) * noise
        let signal = max(perSymbol - noiseInBand, 0)
        let floor = max(signal * Double.pow(10, -maximumSNR / 10), .leastNormalMagnitude)
        let ratio = signal / max(noiseInBand, floor) * bandwidthCorrection
        return max(-maximumSNR, min(maximumSNR, 10 * Double.log10(max(ratio, 1e-30))))
    }
}
