import SottoDSP

/// One band extractor and the baseband history it fills, shared by every receiver whose profile needs the
/// same band at the same rate (the default and robust profiles: 18-20 kHz, kept at the same baseband rate),
/// so the input is filtered and decimated once for all of them instead of once per profile.
///
/// The history is sized for the most demanding receiver that shares it. One owner (the decoder), which
/// feeds each block once and lends the baseband to its receivers.
final class BasebandFrontEnd {
    /// What makes two receivers' front ends the same: the input rate (Hz) and the band the decimator extracts.
    struct Parameters: Hashable {
        var sampleRate: Double
        var band: BandSpecification
    }

    let parameters: Parameters
    let decimator: BandDecimator
    let history: BasebandHistory

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

    /// A front end with a band decimator of its own.
    /// - Parameter minimumHistory: for the decimator's output rate (Hz), baseband samples the history
    ///   must hold (the largest any sharing receiver needs).
    convenience init(_ parameters: Parameters, minimumHistory: (Double) -> Int) {
        self.init(parameters, decimator: BandDecimator(sampleRate: parameters.sampleRate, band: parameters.band),
                  minimumHistory: minimumHistory)
    }

    /// A front end on `decimator` (made for these parameters: its own, or a band of a decoder's bank).
    init(_ parameters: Parameters, decimator: BandDecimator, minimumHistory: (Double) -> Int) {
        self.parameters = parameters
        self.decimator = decimator
        history = BasebandHistory(minimumCapacity: minimumHistory(decimator.outputRate))
    }
}
