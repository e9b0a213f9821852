import RealModule
import SottoDSP

/// One frame found in a stream.
public struct DecodedFrame: Sendable, Hashable {
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
    /// lower, e.g. a receiver whose sample clock runs fast, or a source moving away). Exactly 0 when the
    /// estimate decoded nothing and the frame was decoded at scale 1 instead (`PreambleDetection.nominalStart`).
    public var clockOffsetPPM: Double
    /// Coded bits the error-correcting code had to correct.
    public var correctedBits: Int
    /// The alias (0...4095) of an alias frame (`FrameFormat`'s short frame, heard by a decoder that listens for
    /// them), whose `token` is then the alias in two bytes, most significant first; nil for a token frame.
    public var alias: UInt16?

    /// A frame as the decoder reports it (each parameter is the property of the same name).
    /// - Parameters:
    ///   - token: the token (for an alias frame, its alias in two bytes).
    ///   - profile: the profile's name.
    ///   - startTime: start (s from the start of the stream).
    ///   - endTime: end (s from the start of the stream).
    ///   - snr: in-band SNR (dB).
    ///   - level: received level (dBFS, peak).
    ///   - clockOffsetPPM: time-scale offset (ppm).
    ///   - correctedBits: coded bits the code corrected.
    ///   - alias: the alias of an alias frame; nil for a token frame.
    public init(token: [UInt8], profile: String, startTime: Double, endTime: Double, snr: Double, level: Double,
                clockOffsetPPM: Double, correctedBits: Int, alias: UInt16? = nil) {
        self.alias = alias
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

/// The receiver for one profile, as stages with one direction of flow:
///
/// ```
/// input ─▶ BandDecimator ─▶ BasebandHistory ─▶ PreambleDetector ─▶ detections
///                                   │                                  │
///                                   ▼                                  ▼
///              SymbolMetric / CoherentDetector ◀── FrameCandidate (CandidateStateMachine)
///                                   │
///                                   ▼
///                     FrameFormat ─▶ SignalReport ─▶ DecodedFrame
/// ```
///
/// Every decision (a pairing of chirps, a decode attempt) is an event taken when the receiver's clock
/// reaches the stream position at which it becomes possible, in stream order, whatever the blocks the
/// samples arrived in. Internal to `StreamingDecoder`; one per profile.
final class FrameReceiver {
    let profile: Profile
    let sampleRate: Double
    /// The band extractor and baseband history, possibly shared with other profiles' receivers.
    let frontEnd: BasebandFrontEnd
    let decimator: BandDecimator
    /// Baseband rate (Hz).
    let basebandRate: Double
    /// Airtime of this profile's longest frame, with 1 % for the time scale (s).
    let longestFrameTime: Double
    /// Decodes of a candidate at one length with the tone metric so far: the work detections cost.
    private(set) var toneMetricDecodes = 0
    let history: BasebandHistory
    let preamble: PreambleDetector
    /// Largest supported time-scale offset (ppm magnitude).
    static var maxOffsetPPM: Double { PreambleDetector.maxOffsetPPM }

    /// Stream position (baseband samples) of the last event processed.
    private var clock = 0

    /// A detected preamble whose frame is still being received.
    /// A detection being decoded: its preamble, the state machine deciding what is tried next, the tone metric's
    /// energies so far and what its last decode measured, and the room model's state once one is fitted.
    struct FrameCandidate {
        /// The preamble: start (baseband samples, fractional), time scale, match, scale-1 start, alias or token.
        var detection: PreambleDetection
        var machine = CandidateStateMachine()
        /// Per tone, the phase step per baseband sample of its correlator at this time scale.
        var steps: [(Float, Float)]
        var energies: [Float] = []  // toneCount per symbol, computed so far
        var symbolsDone = 0
        /// What the tone metric measured at its last decode.
        var reading = ToneMetricReading()
        /// The coherent detector's state, from the first time it is needed (a class: its buffers are reused by every
        /// pass over the frame, not copied with the candidate).
        var coherent: CoherentDetector.Frame?
        /// What the code's decision of the last failed coherent decode in a long room re-encodes to (the
        /// symbols a second pass takes as sent; see `redecideWithFeedback`), empty otherwise.
        var feedback: [Int] = []
        /// Another profile's receiver owns this preamble: no room model for it.
        var outranked = false
        /// True once the room model refused this detection (or will not try it).
        var roomModelRefused: Bool { outranked || (coherent?.failed ?? false) }
    }

    /// What the tone metric measured of a candidate at its last decode.
    struct ToneMetricReading {
        /// Noise variance per baseband sample (for the coherent detector).
        var noiseVariance = 0.0
        /// The reverberant tail: the share of a tone's energy left one symbol later.
        var tail = 0.0
        /// The noise floor per tone over the signal per symbol (power ratio).
        var floorShare = 0.0
        /// The noise floor per tone over the noise before the frame (power ratio; 0 when the stream holds none).
        var floorRise = 0.0
    }
    private var pending: [FrameCandidate] = []
    /// The arrays of candidates no longer pending, for the next ones (a detection allocates nothing once
    /// there are as many as candidates at once; at most `ReceiverTuning.maximumPendingCandidates` + 1 are kept).
    private var spareSteps: [[(Float, Float)]] = []
    private var spareEnergies: [[Float]] = []
    /// Preambles detected (whether or not a frame followed).
    private(set) var detections = 0
    /// Preambles starting before this baseband position are parts of frames already decoded.
    private var suppressUntil = -Double.infinity
    /// Frames reported lately (within `ReceiverTuning.echoWindow`), oldest first, to tell a late echo from a repeat.
    private var recentFrames: [DecodedFrame] = {
        var frames: [DecodedFrame] = []
        frames.reserveCapacity(8)
        return frames
    }()
    /// The receiver's tuning (``ReceiverTuning``, its front end's): its constants and, in the design article, why.
    let tuning: ReceiverTuning
    /// The decoding path's buffers, reused by every attempt.
    private var workspace: DecodeWorkspace
    /// The second opinion for reverberant rooms, built the first time a frame needs it.
    private lazy var coherent = CoherentDetector(profile: profile, basebandRate: basebandRate,
                                                 centerFrequency: decimator.centerFrequency, tuning: tuning)
    /// The same for alias frames (their preamble is two up-chirps).
    private lazy var aliasCoherent = CoherentDetector(profile: profile, basebandRate: basebandRate,
                                                      centerFrequency: decimator.centerFrequency, aliasPreamble: true,
                                                      tuning: tuning)

    /// The room-aware detector of `frame`'s kind.
    private func detector(for frame: FrameCandidate) -> CoherentDetector { frame.detection.isAlias ? aliasCoherent : coherent }

    /// The band extractor a receiver for `profile` at `sampleRate` needs (profiles whose band, Doppler
    /// margin and rate come out the same share one: the default and robust profiles at any rate).
    static func frontEndParameters(profile: Profile, sampleRate: Double) -> BasebandFrontEnd.Parameters {
        let bandwidth = profile.highFrequency - profile.lowFrequency
        let dopplerMargin = profile.highFrequency * PreambleDetector.maxOffsetPPM * 1e-6
        let halfWidth = bandwidth / 2 + dopplerMargin + Self.passbandMargin
        return BasebandFrontEnd.Parameters(
            sampleRate: sampleRate,
            band: BandSpecification(centerFrequency: profile.centerFrequency, passbandHalfWidth: halfWidth,
                                    minimumOutputRate: 2 * halfWidth + Self.transitionAllowance))
    }

    /// Flat band kept beyond the outermost tones at the largest clock offset (Hz): their Gaussian-smoothed
    /// spectra spill a little past the tone frequencies.
    static let passbandMargin = 50.0
    /// Baseband rate beyond the flat band (Hz), for the decimator's transition from passband to stopband on
    /// both sides (at least 700 Hz each: about 340 taps of Kaiser filter at 48 kHz for 80 dB).
    static let transitionAllowance = 1_400.0

    /// Baseband samples a receiver for `profile` must keep: the longest frame plus the correlator's and
    /// decimator's latency.
    static func historyNeeded(profile: Profile, basebandRate: Double) -> Int {
        let chirpLength = Int((profile.chirpDuration * basebandRate).rounded())
        let longest = profile.airtime(payloadBytes: FrameFormat.payloadBytes.upperBound) * basebandRate
        return Int((2 * longest).rounded(.up)) + 4 * chirpLength + 4096
    }

    /// A receiver with a front end of its own.
    convenience init(profile: Profile, sampleRate: Double, tuning: ReceiverTuning = .standard) {
        let parameters = Self.frontEndParameters(profile: profile, sampleRate: sampleRate)
        self.init(profile: profile, frontEnd: BasebandFrontEnd(parameters, profiles: [profile], tuning: tuning))
    }

    /// A receiver on a front end it may share with receivers of other profiles (same parameters, history
    /// long enough for each).
    init(profile: Profile, frontEnd: BasebandFrontEnd) {
        self.profile = profile
        self.frontEnd = frontEnd
        tuning = frontEnd.tuning
        sampleRate = frontEnd.decimator.sampleRate
        decimator = frontEnd.decimator
        basebandRate = decimator.outputRate
        history = frontEnd.history
        workspace = DecodeWorkspace(profile: profile)
        preamble = frontEnd.detector(for: profile)
        longestFrameTime = profile.airtime(payloadBytes: FrameFormat.payloadBytes.upperBound) * 1.01
    }

    /// Input samples of one block of the preamble correlator (the longest its positions wait for).
    var correlationBlockInputSamples: Int {
        Int((Double(frontEnd.correlator.fftSize) * sampleRate / basebandRate).rounded(.up))
    }

    /// True when nothing is under way: no preamble candidate and no frame being received.
    var isIdle: Bool { pending.isEmpty && preamble.isIdle }

    /// Feeds input samples through this receiver's front end (not shared); appends decoded frames to `frames`.
    func process(_ input: UnsafeBufferPointer<Float>, into frames: inout [DecodedFrame]) {
        frontEnd.decimator.process(input) { re, im in
            frontEnd.append(real: re, imaginary: im)
            runEvents(into: &frames)
        }
    }

    // MARK: Events

    /// Processes, in the order of the stream position at which each becomes possible, every pairing of
    /// chirps and every step of a frame candidate that the samples received so far allow (the front end
    /// has taken them: history and correlation). Appends decoded frames to `frames`. Each event
    /// happens at a position fixed by the signal (not by where the blocks of input fall), and sees the
    /// state left by every earlier event.
    ///
    /// A pairing needs the correlation, which comes a correlator block at a time (up to 77 ms of audio
    /// behind the baseband for the default profile); a candidate's step needs only the baseband. Steps run
    /// up to the baseband's end without waiting for the correlation: the pairings not yet seen are of
    /// chirps at the correlation's end, later than the start of every frame whose samples are all here,
    /// so they cannot come before such a frame in `pending` nor change its decision. Waiting for them
    /// held every report back by up to a correlator block (`sotto bench sweep latency`: medians of
    /// 70-125 ms instead of 22-57).
    func runEvents(into frames: inout [DecodedFrame]) {
        // Samples for which the baseband is available, and those for which its correlation is too.
        let stepHorizon = history.count
        let pairingHorizon = min(stepHorizon, preamble.horizon)
        while true {
            var bestTime = Int.max, bestFrame = -1
            if let time = preamble.nextPairingTime, max(time, clock) <= pairingHorizon { bestTime = max(time, clock) }
            for index in pending.indices {
                guard let ready = readyTime(index) else { continue }
                let time = max(ready, clock)
                if time < bestTime { bestTime = time; bestFrame = index }
            }
            guard bestTime <= (bestFrame < 0 ? pairingHorizon : stepHorizon) else { return }
            clock = bestTime
            if bestFrame < 0 {
                let (token, alias) = preamble.pairNextWithAlias()
                if let alias { add(alias) }
                if let token { add(token) }
            } else {
                step(bestFrame, into: &frames)
            }
        }
    }

    /// A detection becomes a frame candidate, unless it lies inside a frame already decoded.
    private func add(_ detection: PreambleDetection) {
        guard detection.start >= suppressUntil else { return }
        detections += 1
        // Full: the weakest detection gives way (this one, if it is the weakest). Not the oldest: in a reverberant
        // room the echoes and a frame's own chirp-like stretches follow its preamble, so the oldest is most often
        // the frame itself (with alias frames looked for, every up-chirp makes two detections; what that lost is in
        // SottoModem's "Crowds" article, measured with `sotto bench sweep links`).
        if pending.count >= tuning.maximumPendingCandidates {
            let weakest = pending.indices.min { pending[$0].detection.strength < pending[$1].detection.strength }!
            guard pending[weakest].detection.strength < detection.strength else { return }
            recycle(pending.remove(at: weakest))
        }
        var candidate = makeCandidate(detection)
        if detection.isAlias {
            candidate.machine = CandidateStateMachine(alias: true)
            pending.append(candidate)
            return
        }
        pending.append(candidate)
        frontEnd.record(.init(receiver: ObjectIdentifier(self), start: detection.start, strength: detection.strength))
        frontEnd.board.record(.init(receiver: ObjectIdentifier(self), start: detection.start / basebandRate, strength: detection.strength,
                                    latestEnd: detection.start / basebandRate + longestFrameTime))
    }

    /// A fresh candidate for `detection` (arrays from the spares).
    private func makeCandidate(_ detection: PreambleDetection) -> FrameCandidate {
        let scale = detection.scale
        var steps = spareSteps.popLast() ?? []
        steps.removeAll(keepingCapacity: true)
        steps.reserveCapacity(profile.toneCount)
        for tone in 0..<profile.toneCount {
            let f = profile.toneFrequency(tone) / scale - decimator.centerFrequency
            let step = -2 * Double.pi * f / basebandRate
            steps.append((Float(Double.cos(step)), Float(Double.sin(step))))
        }
        var energies = spareEnergies.popLast() ?? []
        energies.removeAll(keepingCapacity: true)
        energies.reserveCapacity(profile.toneCount * FrameFormat.symbolCount(payloadBytes: FrameFormat.payloadBytes.upperBound))
        return FrameCandidate(detection: detection, steps: steps, energies: energies)
    }

    /// Keeps a finished candidate's arrays for the next detections.
    private func recycle(_ candidate: FrameCandidate) {
        guard spareEnergies.count <= tuning.maximumPendingCandidates else { return }
        spareSteps.append(candidate.steps)
        spareEnergies.append(candidate.energies)
    }

    /// Baseband position of the start of data symbol `k` of a frame.
    private func symbolStart(_ frame: FrameCandidate, _ k: Int) -> Double {
        frame.detection.start + (2 * profile.chirpDuration + Double(k) * profile.symbolTime) * basebandRate * frame.detection.scale
    }

    /// Symbols of `frame` at the length `bytes` (an alias frame's own count).
    private func symbolCount(_ frame: FrameCandidate, payloadBytes bytes: Int) -> Int {
        frame.detection.isAlias ? FrameFormat.aliasSymbolCount : FrameFormat.symbolCount(payloadBytes: bytes)
    }

    /// Baseband samples needed before the next action of candidate `index`, or nil while it must wait for
    /// an earlier one. The coherent detector costs milliseconds per frame, so a detection gets it only
    /// when no earlier one may still be a frame: later ones are usually echoes or chirp-like stretches
    /// inside that frame, dropped when it decodes; they wait their turn. An earlier detection the
    /// detector refused does not block.
    private func readyTime(_ index: Int) -> Int? {
        let frame = pending[index]
        guard let bytes = frame.machine.payloadBytes else { return clock }
        let symbols = symbolCount(frame, payloadBytes: bytes)
        let toneTime = Int((symbolStart(frame, symbols) + 2).rounded(.down)) + 1
        guard frame.machine.usesRoomModel else { return toneTime }
        guard !pending[0..<index].contains(where: { !$0.roomModelRefused }) else { return nil }
        if frame.roomModelRefused { return toneTime }
        return max(toneTime, detector(for: frame).requiredSamples(start: frame.detection.start, scale: frame.detection.scale, symbols: symbols))
    }

    /// True when the tone metric's last decode of `frame` saw a floor that a reverberant room in noise brings
    /// (see `ReceiverTuning.reverberantFloorRise`).
    private func isNoisyReverberant(_ frame: FrameCandidate) -> Bool {
        frame.reading.floorRise >= tuning.reverberantFloorRise && frame.reading.floorShare >= tuning.reverberantFloorShare
    }

    /// Takes the next action of candidate `index` (its samples have arrived).
    private func step(_ index: Int, into frames: inout [DecodedFrame]) {
        var frame = pending[index]
        // `frame` holds the candidate's arrays alone while it works (appending to a shared one would copy it).
        pending[index].energies = []
        pending[index].steps = []
        var decoded: (frame: DecodedFrame, end: Double)?
        // Given up when its samples are overwritten (counting what the coherent detector reads before the start),
        // inside a frame another profile's receiver decoded on the same band (not a frame of this profile), or
        // inside one another profile matched far better and still on the air (a stretch of its symbols).
        let samplesGone = frame.detection.start - (CoherentDetector.precursorDuration * basebandRate + 16) < Double(clock - history.mask)
        _ = frame.machine.check(.init(
            samplesGone: samplesGone,
            insideOtherFrame: !samplesGone && frontEnd.isInsideOtherFrame(ObjectIdentifier(self), frame.detection.start),
            underDominantFrame: frame.machine.yieldsToDominantFrames
                && frontEnd.board.isUnderDominantFrame(ObjectIdentifier(self), start: frame.detection.start / basebandRate, strength: frame.detection.strength)))
        var headerDistance = 8
        switch frame.machine.action {
        case .decodeWithToneMetric(let bytes):
            toneMetricDecodes += 1
            computeEnergies(&frame, upTo: symbolCount(frame, payloadBytes: bytes))
            decoded = decode(&frame, payloadBytes: bytes).result
        case .decodeWithRoomModel(let bytes):
            (decoded, headerDistance) = decodeWithRoomModel(&frame, payloadBytes: bytes)
        case .refineRoomModel(let bytes):
            decoded = refineRoomModel(&frame, payloadBytes: bytes)
        case .redecideWithFeedback(let bytes):
            decoded = redecideWithFeedback(&frame, payloadBytes: bytes)
        case .restartAtUnitScale, .drop:
            break
        }
        switch frame.machine.action {
        case .restartAtUnitScale, .drop:
            break
        case .decodeWithToneMetric, .decodeWithRoomModel, .refineRoomModel, .redecideWithFeedback:
            let longRoom = isLongRoom(frame)
            _ = frame.machine.step(.init(
                decoded: decoded != nil, reverberant: frame.reading.tail >= tuning.reverberantTail || isNoisyReverberant(frame) || longRoom,
                nearlyRight: headerDistance <= tuning.refinementHeaderDistance,
                refinementLimit: tuning.maximumRefinements, longRoom: longRoom,
                canRetryAtUnitScale: tuning.retriesAtUnitScale && !frame.outranked
                    && frame.detection.nominalStart.map { $0 >= suppressUntil } ?? false))
        }
        if let result = decoded {
            if !isEcho(result.frame) {
                frames.append(result.frame)
                recentFrames.removeAll { result.frame.startTime - $0.startTime > tuning.echoWindow }
                if recentFrames.count >= 8 { recentFrames.removeFirst() }
                recentFrames.append(result.frame)
            }
            frontEnd.recordDecoded(ObjectIdentifier(self), start: frame.detection.start - Double(preamble.chirpLength) / 2, end: result.end)
            frontEnd.board.settle(ObjectIdentifier(self), start: frame.detection.start / basebandRate, end: result.end / basebandRate)
            suppressUntil = max(suppressUntil, result.end - Double(preamble.chirpLength) / 2)
        }
        if case .restartAtUnitScale = frame.machine.action, let nominal = frame.detection.nominalStart {
            // The same preamble again at scale 1, every length from the first (its samples are still in the history).
            frontEnd.board.forget(ObjectIdentifier(self), start: frame.detection.start / basebandRate)
            recycle(frame)
            pending[index] = makeCandidate(PreambleDetection(start: nominal, scale: 1, strength: frame.detection.strength))
        } else if case .drop = frame.machine.action {
            pending.remove(at: index)
            if decoded == nil { frontEnd.board.forget(ObjectIdentifier(self), start: frame.detection.start / basebandRate) }
            recycle(frame)
            // Drop other detections inside the frame just decoded.
            if decoded != nil {
                for candidate in pending where candidate.detection.start < suppressUntil {
                    frontEnd.board.forget(ObjectIdentifier(self), start: candidate.detection.start / basebandRate)
                    recycle(candidate)
                }
                pending.removeAll { $0.detection.start < suppressUntil }
            }
        } else {
            pending[index] = frame
        }
    }

    /// The second opinion: the room-aware coherent detector's decode of `payloadBytes`, and the header
    /// distance of its plain Viterbi path (8 when it did not get that far); only for a preamble of this
    /// profile (another receiver on the same band that matched it better owns it: the robust receiver paid
    /// for a room fit and a coherent decode of every frame of the default profile).
    private func decodeWithRoomModel(_ frame: inout FrameCandidate, payloadBytes bytes: Int)
        -> (result: (frame: DecodedFrame, end: Double)?, headerDistance: Int) {
        if frame.outranked || frontEnd.isOutranked(ObjectIdentifier(self), start: frame.detection.start, strength: frame.detection.strength,
                                window: Double(preamble.chirpLength)) {
            // Refused, as the room fit refuses what it cannot explain (so later detections do not wait for it).
            frame.outranked = true
            return (nil, 8)
        }
        let symbols = symbolCount(frame, payloadBytes: bytes)
        let coherent = detector(for: frame)
        // The noise the room model must not fit: what arrived just before the frame, when that
        // was quieter than the tone metric's noise (which counts the room's tails as noise).
        let state = frame.coherent ?? coherent.makeFrame(start: frame.detection.start, scale: frame.detection.scale,
                                                         noiseVariance: min(frame.reading.noiseVariance, powerBefore(frame)))
        // In a long room the decisions' echoes are predicted from their posteriors (see `Frame.softFeedback`).
        if frame.coherent == nil { state.softFeedback = isLongRoom(frame) }
        var fitted = coherent.likelihoods(state, symbols: symbols, history: history)
        var chosen = state
        if frame.coherent == nil {
            // The detector may lock onto a reflection louder than the direct sound: fit again from where the room
            // model puts the direct sound (twice at most: the first fit's precursor may not reach back to it), and
            // keep the fit that explains the preamble better.
            for _ in 0..<2 {
                guard let moved = coherent.reanchored(chosen) else { break }
                let again = coherent.likelihoods(moved, symbols: symbols, history: history)
                guard again != nil, fitted == nil || moved.unexplained < chosen.unexplained else { break }
                chosen = moved
                fitted = again
            }
        }
        frame.coherent = chosen
        guard var likelihoods = fitted else { return (nil, 8) }
        let longRoom = isLongRoom(frame)
        if longRoom {
            // The tail beyond the room model builds up during the frame: weigh each symbol by its own part.
            likelihoods = LongRoomWeighting.likelihoods(costs: chosen.costs, symbols: symbols,
                                                        windowSamples: coherent.decisionWindow, noiseVariance: chosen.noiseVariance)
        }
        let attempt = decode(&frame, payloadBytes: bytes, coherentLikelihoods: likelihoods)
        frame.feedback = []
        if attempt.result == nil && longRoom && attempt.headerDistance <= tuning.refinementHeaderDistance {
            frame.feedback = viterbiSymbols(payloadBytes: bytes)
        }
        return attempt
    }

    /// The symbols the plain Viterbi path of the last decode (left in the workspace) re-encodes to.
    private func viterbiSymbols(payloadBytes bytes: Int) -> [Int] {
        let bits = Array(workspace.message[0..<FrameFormat.messageBitCount(payloadBytes: bytes)])
        return FrameFormat.symbols(messageBits: bits, profile: profile)
    }

    /// The coherent decode at `payloadBytes` failed in a long room with a nearly right header: decides the
    /// frame again with the same room model, predicting the echoes from the code's decision instead of
    /// from the symbol decisions (`CoherentDetector.redecided`), up to `ReceiverTuning.feedbackPasses` times. No second
    /// room fit: too many decided symbols are wrong there for it (see `ReceiverTuning.longRoomFloorRise`).
    private func redecideWithFeedback(_ frame: inout FrameCandidate, payloadBytes bytes: Int) -> (frame: DecodedFrame, end: Double)? {
        let symbols = FrameFormat.symbolCount(payloadBytes: bytes)
        for _ in 0..<tuning.feedbackPasses {
            guard frame.feedback.count >= symbols, let state = frame.coherent,
                  let second = coherent.redecided(state, hints: frame.feedback),
                  coherent.likelihoods(second, symbols: symbols, history: history) != nil else { break }
            let likelihoods = LongRoomWeighting.likelihoods(costs: second.costs, symbols: symbols,
                                                            windowSamples: coherent.decisionWindow, noiseVariance: second.noiseVariance)
            if let result = decode(&frame, payloadBytes: bytes, coherentLikelihoods: likelihoods).result {
                frame.feedback = []
                return result
            }
            frame.feedback = viterbiSymbols(payloadBytes: bytes)
        }
        frame.feedback = []
        return nil
    }

    /// The coherent decode at `payloadBytes` came close: fits the room again over the whole decided frame
    /// (many more equations than the preamble alone), decides it again and decodes. The refined state is
    /// used for this length only: keeping it for the later lengths (its fit does not depend on the length)
    /// saved a fit per frame in rooms but lost frames (`sweep rooms`, 4 bytes: 95 -> 90 % in the cafe,
    /// 97.5 -> 90 % in the long synthetic room), a fit over a wrong length's decisions misleading the rest.
    /// Never in a long room (see `isLongRoom`'s constants): the decided frame has too many wrong symbols
    /// there for the fit.
    private func refineRoomModel(_ frame: inout FrameCandidate, payloadBytes bytes: Int) -> (frame: DecodedFrame, end: Double)? {
        let symbols = FrameFormat.symbolCount(payloadBytes: bytes)
        guard let state = frame.coherent, let second = coherent.refined(state, symbols: symbols),
              let likelihoods = coherent.likelihoods(second, symbols: symbols, history: history) else { return nil }
        return decode(&frame, payloadBytes: bytes, coherentLikelihoods: likelihoods).result
    }

    /// True when `frame` is a late echo of a frame reported before it (see `ReceiverTuning.echoWindow`).
    private func isEcho(_ frame: DecodedFrame) -> Bool {
        recentFrames.contains {
            $0.token == frame.token && $0.alias == frame.alias && frame.startTime > $0.startTime
                && frame.startTime - $0.startTime <= tuning.echoWindow && $0.level - frame.level >= tuning.echoLevelDrop
        }
    }

    // MARK: Measurements

    /// True when the tone metric saw the noise floor of a long room (see `ReceiverTuning.longRoomFloorRise`).
    private func isLongRoom(_ frame: FrameCandidate) -> Bool {
        frame.reading.floorRise >= tuning.longRoomFloorRise && frame.reading.floorShare >= tuning.longRoomFloorShare
    }

    /// Mean power per baseband sample over the `tuning.noiseProbe` seconds that end shortly before the frame.
    private func powerBefore(_ frame: FrameCandidate) -> Double {
        let end = Int(frame.detection.start.rounded(.down)) - Int(0.005 * basebandRate)
        let count = Int(tuning.noiseProbe * basebandRate)
        guard history.holds(end - count, at: clock), end <= clock else { return .infinity }
        return history.meanPower(from: end - count, length: count)
    }

    /// The tone metric's window for this frame (baseband samples).
    private func metricWindow(_ frame: FrameCandidate) -> Double {
        SymbolMetric.windowLength(symbolSamples: profile.symbolTime * basebandRate * frame.detection.scale)
    }

    /// Energies of every tone of the profile (all sub-bands) over each symbol up to `symbols`:
    /// `toneCount` per symbol. Tones of the sub-bands a symbol does not use measure the reverberant tails
    /// of earlier symbols.
    private func computeEnergies(_ frame: inout FrameCandidate, upTo symbols: Int) {
        guard frame.symbolsDone < symbols else { return }
        // Skip the start of each symbol, where the transition from the previous tone lingers.
        let skip = SymbolMetric.windowSkip * profile.symbolTime * basebandRate * frame.detection.scale
        let window = metricWindow(frame)
        frame.steps.withUnsafeBufferPointer { steps in
            for k in frame.symbolsDone..<symbols {
                SymbolMetric.appendToneEnergies(history, from: symbolStart(frame, k) + skip, length: window, steps: steps,
                                                into: &frame.energies)
            }
        }
        frame.symbolsDone = symbols
    }

    /// Tone energies over up to `SignalReport.noiseProbeWindows` windows ending shortly before the frame
    /// (the noise its SNR is measured against): as many as the stream and the ring buffer hold before it
    /// and after the end of the frames decoded so far on this band that started before it (a frame 0.1 s
    /// into a recording, or 0.1 s after another one, still has a few), none when fewer than
    /// `SignalReport.minimumNoiseProbeWindows` fit. Written to `workspace.noiseProbe` (its capacity is
    /// reserved: nothing is allocated).
    private func measureNoiseProbe(_ frame: FrameCandidate) {
        workspace.noiseProbe.removeAll(keepingCapacity: true)
        let window = metricWindow(frame)
        let end = frame.detection.start - SignalReport.noiseProbeGap * basebandRate
        let afterPrevious = frontEnd.latestDecodedEnd(startingBefore: frame.detection.start)
            .map { $0 + SignalReport.noiseProbeGap * basebandRate } ?? -.infinity
        var windows = SignalReport.noiseProbeWindows
        while windows >= SignalReport.minimumNoiseProbeWindows {
            let first = end - Double(windows) * window
            if first >= 1, first >= afterPrevious, history.holds(Int(first) - 64, at: clock) { break }
            windows -= 1
        }
        guard windows >= SignalReport.minimumNoiseProbeWindows else { return }
        let first = end - Double(windows) * window
        frame.steps.withUnsafeBufferPointer { steps in
            for w in 0..<windows {
                SymbolMetric.appendToneEnergies(history, from: first + Double(w) * window, length: window, steps: steps,
                                                into: &workspace.noiseProbe)
            }
        }
    }

    /// Decodes `payloadBytes` from the noncoherent metric, or from `coherentLikelihoods` when given; the
    /// noncoherent statistics give the reported SNR and level either way.
    private func decode(_ frame: inout FrameCandidate, payloadBytes: Int, coherentLikelihoods: [Float]? = nil)
        -> (result: (frame: DecodedFrame, end: Double)?, headerDistance: Int) {
        let symbols = symbolCount(frame, payloadBytes: payloadBytes)
        let (signal, noise, tail) = SymbolMetric.likelihoods(
            energies: frame.energies[0..<(profile.toneCount * symbols)], symbols: symbols, profile: profile, workspace: &workspace)
        if coherentLikelihoods == nil {
            frame.reading.tail = tail
            frame.reading.floorShare = noise / max(signal, 1e-30)
            frame.reading.floorRise = noise / metricWindow(frame) / powerBefore(frame)
        }
        frame.reading.noiseVariance = noise / metricWindow(frame)
        let attempt = (coherentLikelihoods ?? workspace.likelihoods).withUnsafeBufferPointer { likelihoods in
            if frame.detection.isAlias {
                let decoded = FrameFormat.decodeAlias(symbolLogLikelihoods: likelihoods, profile: profile, workspace: &workspace)
                return (decoded: decoded, headerDistance: decoded == nil ? 8 : 0)
            }
            return FrameFormat.decodeReportingHeader(symbolLogLikelihoods: likelihoods, payloadBytes: payloadBytes, profile: profile,
                                                     workspace: &workspace)
        }
        guard let decoded = attempt.decoded else { return (nil, attempt.headerDistance) }
        let window = metricWindow(frame) / basebandRate
        // The in-band SNR, against the symbols actually sent (re-encoded from the payload).
        if frame.detection.isAlias {
            FrameFormat.recodedAliasSymbols(profile: profile, workspace: &workspace)
        } else {
            FrameFormat.recodedSymbols(payloadBytes: payloadBytes, profile: profile, workspace: &workspace)
        }
        measureNoiseProbe(frame)
        let snr = SignalReport.inBandSNR(
            energies: frame.energies[0..<(profile.toneCount * symbols)], values: workspace.symbolValues[0..<symbols],
            probe: workspace.noiseProbe[...], profile: profile,
            bandwidthCorrection: profile.symbolTime * frame.detection.scale / window)
        let end = symbolStart(frame, symbols) + profile.fadeDuration * basebandRate * frame.detection.scale
        // A tone of amplitude a sums to a x W over a W-sample window (the decimator keeps a cosine's
        // amplitude), so the received level is sqrt(signal) / W, in dB re full scale.
        let windowSamples = window * basebandRate
        let level = 20 * Double.log10(max(signal.squareRoot() / windowSamples, 1e-12))
        let result = DecodedFrame(
            token: decoded.payload, profile: profile.name,
            // The start is estimated to a fraction of a baseband sample: a frame at the first sample is not before it.
            startTime: max(frame.detection.start, 0) / basebandRate,
            endTime: end / basebandRate,
            snr: (snr * 10).rounded() / 10,
            level: (level * 10).rounded() / 10,
            clockOffsetPPM: ((frame.detection.scale - 1) * 1e6).rounded(),
            correctedBits: decoded.correctedBits,
            alias: frame.detection.isAlias ? UInt16(decoded.payload[0]) << 8 | UInt16(decoded.payload[1]) : nil)
        return ((result, end), attempt.headerDistance)
    }
}

// Codable where there is Codable (not in Embedded Swift, the WebAssembly build).
#if !hasFeature(Embedded)
extension DecodedFrame: Codable {}
#endif
