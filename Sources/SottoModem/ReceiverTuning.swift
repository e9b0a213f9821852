/// The receiver's tuning in one value, as liquid-dsp's frame synchroniser keeps its properties: every constant
/// that decides what a receiver detects, tries, gives up and reports, with its unit. Why each has its value,
/// and what was measured to choose it, is in the design article (<doc:Design>, "The receiver's tuning").
/// Decoders run with ``standard`` unless given another (`StreamingDecoder(sampleRate:profiles:tuning:)`); the
/// sweeps that guard receiver changes measure ``standard``.
public struct ReceiverTuning: Sendable, Hashable {
    // MARK: Detection (multiples of the normalised chirp correlation's mean under noise)

    /// The up-chirp's correlation peak must exceed this multiple of its noise mean.
    public var singleChirpThreshold: Float = 6
    /// The up and down chirps' peaks together must exceed this multiple.
    public var chirpPairThreshold: Float = 17
    /// The down-chirp's own peak must exceed this multiple (lower than the up-chirp's: a reverberant room
    /// raises its correlation window's energy).
    public var downChirpFloor: Float = 3
    /// Correlate the down-chirp at every position instead of only near up-chirp peaks that can pair with it:
    /// the same detections for more CPU (the reference the restricted correlation is checked against). Profiles
    /// whose chirps are too short for the restriction correlate everywhere either way.
    public var correlatesDownChirpEverywhere = false

    // MARK: Candidates

    /// A frame of the same token that started at most this long before (s) and arrived louder by
    /// ``echoLevelDrop`` makes a later one a reflection, not a frame.
    public var echoWindow = 1.5
    /// How much louder the earlier frame of the same token must have arrived for a later one to be its
    /// reflection (dB).
    public var echoLevelDrop = 3.0
    /// Detections waiting for their frame's audio at once, at most (the weakest is given up).
    public var maximumPendingCandidates = 8
    /// A detection whose estimated time scale decodes nothing is tried again at scale 1 (the second
    /// hypothesis, `PreambleDetection.nominalStart`): a reverberant room can bias the chirps' measured delay
    /// by several hundred ppm where the clocks are within a few.
    public var retriesAtUnitScale = true

    // MARK: When the room model is fitted

    /// The tone metric's tail estimate (share of a tone's energy left one symbol later) from which a frame it
    /// failed to decode gets the coherent detector.
    public var reverberantTail = 0.08
    /// A frame the tone metric failed whose per-tone noise floor rises this many times over the noise before
    /// it (power ratio) and stays within ``reverberantFloorShare`` of the signal gets the coherent detector too.
    public var reverberantFloorRise = 3.0
    /// The floor's share of the signal (power ratio) for ``reverberantFloorRise``.
    public var reverberantFloorShare = 0.1
    /// A long room (a diffuse tail longer than the room model): the frame's floor rises this many times over
    /// the noise before it (power ratio)...
    public var longRoomFloorRise = 10.0
    /// ...and stays above this share of the signal (power ratio).
    public var longRoomFloorShare = 0.03
    /// Header bits the coherent decode may get wrong for the room to be fitted again over the whole frame.
    public var refinementHeaderDistance = 1
    /// Second room fits one detection may have.
    public var maximumRefinements = 2
    /// Passes deciding a long room's frame again from the code's decision.
    public var feedbackPasses = 2
    /// Audio before a frame whose power stands for the noise in the room fit (s).
    public var noiseProbe = 0.040

    // MARK: The coherent sequence decision

    /// The decision-directed phase loop's gains per symbol: phase, and frequency.
    public var phaseGain = 0.3, frequencyGain = 0.02
    /// Soft feedback (long rooms): weight of each new symbol in the running level of what the best candidates
    /// leave unexplained (per symbol).
    public var residualSmoothing = 0.125
    /// Soft feedback: how much of the likelihood the values' weights take (1: full posteriors under white noise).
    public var softScale: Float = 0.3
    /// Soft feedback: weights under this are dropped, and a decision within this of 1 is committed as it is.
    public var softFloor: Float = 1e-3

    /// The tuning with every constant at its measured value (the properties' defaults).
    public init() {}

    /// The tuning every receiver runs with unless given another.
    public static let standard = ReceiverTuning()
}
