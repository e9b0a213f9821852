import SottoDSP

/// One band extractor, the baseband history it fills and the preamble correlation over it, shared by every
/// receiver whose profile needs the same band at the same rate (the default and robust profiles: 18-20 kHz,
/// kept at the same baseband rate), so the input is filtered and decimated once for all of them, and the
/// baseband transformed once per block for all their chirps, instead of once per profile.
///
/// The history is sized for the most demanding receiver that shares it. One owner (the decoder), which
/// feeds each block once (`append`) and lends the baseband and the detectors to its receivers.
final class BasebandFrontEnd {
    /// What makes two receivers' front ends the same: the input rate (Hz) and the band the decimator extracts.
    struct Parameters: Hashable {
        var sampleRate: Double
        var band: BandSpecification
    }

    let parameters: Parameters
    let decimator: BandDecimator
    let history: BasebandHistory
    /// The profiles whose receivers share this front end, in the order given.
    let profiles: [Profile]
    /// One correlator for every profile's preamble (`PreambleDetector.templates`: the up-chirp and the
    /// down-chirp of `profiles[i]` are its templates 2i and 2i + 1), and the detectors reading it, in the
    /// order of `profiles`. For the default and robust profiles: one forward transform and one energy sum
    /// per block for both instead of one each (with all four profiles listening, 10 s of noise took 1.69 ms
    /// instead of 1.72).
    let correlator: StreamingCorrelator
    let detectors: [PreambleDetector]

    /// A preamble one of the receivers on this front end detected.
    struct Detection {
        /// The receiver that detected it.
        var receiver: ObjectIdentifier
        /// Start (baseband samples) and `PreambleDetection.strength`.
        var start: Double
        var strength: Float
    }
    /// The most recent detections of every receiver on this front end, oldest first (capacity reserved:
    /// recording one does not allocate).
    private(set) var detections: [Detection] = {
        var detections: [Detection] = []
        detections.reserveCapacity(BasebandFrontEnd.detectionsKept)
        return detections
    }()
    /// Detections kept for comparison (frames overlap few others: a handful per second of audio at most).
    static let detectionsKept = 32

    /// Records a receiver's detection, forgetting the oldest beyond `detectionsKept`.
    func record(_ detection: Detection) {
        if detections.count >= Self.detectionsKept { detections.removeFirst() }
        detections.append(detection)
    }

    /// Frames decoded by the receivers on this front end: (receiver, start, end) in baseband samples,
    /// oldest first (capacity reserved).
    private(set) var decoded: [(receiver: ObjectIdentifier, start: Double, end: Double)] = {
        var decoded: [(receiver: ObjectIdentifier, start: Double, end: Double)] = []
        decoded.reserveCapacity(BasebandFrontEnd.detectionsKept)
        return decoded
    }()

    /// Records a frame a receiver decoded (start and end in baseband samples).
    func recordDecoded(_ receiver: ObjectIdentifier, start: Double, end: Double) {
        if decoded.count >= Self.detectionsKept { decoded.removeFirst() }
        decoded.append((receiver, start, end))
    }

    /// The latest end (baseband samples) of the frames decoded so far on this front end, by any of its
    /// receivers, that started before `position` (it may lie after `position`: frames can overlap); nil
    /// when none is remembered.
    func latestDecodedEnd(startingBefore position: Double) -> Double? {
        var latest: Double?
        for frame in decoded where frame.start < position { latest = max(latest ?? frame.end, frame.end) }
        return latest
    }

    /// True when another receiver on this front end decoded a frame that covers `position`: a detection
    /// there is that frame seen through another profile's templates (chirp-like stretches of its symbols).
    func isInsideOtherFrame(_ receiver: ObjectIdentifier, _ position: Double) -> Bool {
        decoded.contains { $0.receiver != receiver && position >= $0.start && position < $0.end }
    }

    /// True when another receiver on this front end detected a preamble starting within `window` baseband
    /// samples of `start` that matched its own templates better than `strength`: the preamble is that
    /// profile's, not this one's.
    func isOutranked(_ receiver: ObjectIdentifier, start: Double, strength: Float, window: Double) -> Bool {
        detections.contains { $0.receiver != receiver && abs($0.start - start) <= window && $0.strength > strength }
    }

    /// A front end with a band decimator of its own, for receivers of `profiles`.
    convenience init(_ parameters: Parameters, profiles: [Profile]) {
        do {
            try self.init(parameters, decimator: BandDecimator(checkedSampleRate: parameters.sampleRate, band: parameters.band),
                          profiles: profiles)
        } catch { preconditionFailure("\(error)") }
    }

    /// A front end on `decimator` (made for these parameters: its own, or a band of a decoder's bank), for
    /// receivers of `profiles` (each profile once; their front-end parameters are these).
    init(_ parameters: Parameters, decimator: BandDecimator, profiles: [Profile]) throws(FFTError) {
        precondition(!profiles.isEmpty && Set(profiles).count == profiles.count)
        self.parameters = parameters
        self.decimator = decimator
        self.profiles = profiles
        let rate = decimator.outputRate
        let history = BasebandHistory(minimumCapacity: profiles.map { FrameReceiver.historyNeeded(profile: $0, basebandRate: rate) }.max()!)
        self.history = history
        let templates = profiles.map { PreambleDetector.templates(profile: $0, basebandRate: rate, centerFrequency: decimator.centerFrequency) }
        let correlator = try StreamingCorrelator(checkedTemplates: templates.flatMap { $0 })
        self.correlator = correlator
        let lead = PreambleDetector.leadPositions(basebandRate: rate)
        let noiseBandwidth = min(rate, 2 * parameters.band.passbandHalfWidth + 300)
        let detectors = profiles.indices.map { index in
            PreambleDetector(profile: profiles[index], basebandRate: rate, noiseBandwidth: noiseBandwidth,
                             capacity: history.capacity, chirpLength: templates[index][0].real.count,
                             upTemplate: 2 * index, lead: lead)
        }
        self.detectors = detectors
        // The correlation before the stream, as if silence preceded it (`PreambleDetector.leadPositions`).
        let silence = [Float](repeating: 0, count: lead)
        silence.withUnsafeBufferPointer { correlate(real: $0, imaginary: $0) }
    }

    /// The detector of `profile` (one of `profiles`).
    func detector(for profile: Profile) -> PreambleDetector {
        detectors[profiles.firstIndex(of: profile)!]
    }

    /// Takes a run of new baseband samples: appends them to the history, correlates them with every
    /// profile's chirps, and lets each detector find its peaks in the positions that came out.
    func append(real: UnsafeBufferPointer<Float>, imaginary: UnsafeBufferPointer<Float>) {
        history.append(real: real, imaginary: imaginary)
        correlate(real: real, imaginary: imaginary)
    }

    /// Correlates baseband samples with every profile's chirps; each detector takes the positions that come out.
    private func correlate(real: UnsafeBufferPointer<Float>, imaginary: UnsafeBufferPointer<Float>) {
        let detectors = detectors
        correlator.process(real: real, imaginary: imaginary) { count, correlation in
            for detector in detectors { detector.take(count, correlation) }
        }
    }
}
