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
    /// The detections of every receiver of the decoder, on every front end.
    let board: DetectionBoard
    /// The tuning of the detectors here and of the receivers on this front end.
    let tuning: ReceiverTuning

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

    /// A front end with a band decimator (and a detection board) of its own, for receivers of `profiles`.
    convenience init(_ parameters: Parameters, profiles: [Profile], tuning: ReceiverTuning = .standard) {
        do {
            try self.init(parameters, decimator: BandDecimator(checkedSampleRate: parameters.sampleRate, band: parameters.band),
                          profiles: profiles, board: DetectionBoard(), tuning: tuning)
        } catch { preconditionFailure("\(error)") }
    }

    /// A front end on `decimator` (made for these parameters: its own, or a band of a decoder's bank), for
    /// receivers of `profiles` (each profile once; their front-end parameters are these), recording their
    /// detections on `board` beside those of the decoder's other front ends.
    init(_ parameters: Parameters, decimator: BandDecimator, profiles: [Profile], board: DetectionBoard,
         tuning: ReceiverTuning) throws(FFTError) {
        precondition(!profiles.isEmpty && Set(profiles).count == profiles.count)
        self.parameters = parameters
        self.board = board
        self.tuning = tuning
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
                             upTemplate: 2 * index, lead: lead, tuning: tuning)
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

/// The preambles every receiver of one decoder detected, on all its front ends (times in seconds of the stream):
/// a receiver asks it whether a detection of its own lies inside a frame another profile matched far better.
/// Front ends take each block of input in a fixed order, so what a receiver finds here does not depend on
/// how the input was cut into chunks.
final class DetectionBoard {
    /// A preamble a receiver detected.
    struct Entry {
        /// The receiver that detected it.
        var receiver: ObjectIdentifier
        /// Start of the preamble (s).
        var start: Double
        /// `PreambleDetection.strength`.
        var strength: Float
        /// End of the longest frame of the receiver's profile that starts there (s): while a frame with this
        /// preamble could still be on the air.
        var latestEnd: Double
    }
    /// The latest entries, oldest first (capacity reserved: recording one does not allocate).
    private var entries: [Entry]
    /// Entries kept (a handful of preambles per second of audio at most, on all bands).
    static let kept = 32

    init() {
        entries = []
        entries.reserveCapacity(Self.kept)
    }

    /// Records a receiver's detection, forgetting the oldest beyond `kept`.
    func record(_ entry: Entry) {
        if entries.count >= Self.kept { entries.removeFirst() }
        entries.append(entry)
    }

    /// The frame of `receiver`'s detection at `start` (s) was decoded and ends at `end` (s): it is on the air until
    /// then, not for the longest frame of its profile.
    func settle(_ receiver: ObjectIdentifier, start: Double, end: Double) {
        for index in entries.indices where entries[index].receiver == receiver && entries[index].start == start {
            entries[index].latestEnd = end
        }
    }

    /// `receiver`'s detection at `start` (s) came to nothing: no frame of its is on the air.
    func forget(_ receiver: ObjectIdentifier, start: Double) {
        entries.removeAll { $0.receiver == receiver && $0.start == start }
    }

    /// True when another receiver detected a preamble that matched its own templates more than `dominance`
    /// times better than `strength` and whose frame may still be on the air at `start` (s): a detection
    /// there is that frame's symbols seen through this profile's chirps (a robust frame's symbols look like a
    /// fast frame's chirps here and there), not a frame of this profile.
    func isUnderDominantFrame(_ receiver: ObjectIdentifier, start: Double, strength: Float) -> Bool {
        entries.contains {
            $0.receiver != receiver && $0.start < start && start < $0.latestEnd && $0.strength > Self.dominance * strength
        }
    }

    /// How many times better another profile's preamble must match than a detection inside its frame for the
    /// detection to be given up (`isUnderDominantFrame`). The stray detections of the fast receiver inside robust
    /// frames match at 0.29-0.38, the frames themselves at 1.7-2.0 (21 s with ten robust frames at -12 dB in-band
    /// SNR). Four rather than two: in a crowd of twenty with five devices moved to the robust profile, two lost a
    /// few pairs that four and no gate heard (Benchmarks/README.md, 2026-11-28), for the same saving.
    static let dominance: Float = 4
}
