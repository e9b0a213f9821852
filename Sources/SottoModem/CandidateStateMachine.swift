/// What the receiver does with one detected preamble: try every payload length with the tone metric
/// first; then, when none decoded and the tone metric found the frame reverberant at some lengths, the
/// coherent (room-aware) detector at those lengths in turn; and, when a coherent decode came close (its
/// header nearly right), the room fitted again over the decided frame; until one decodes or every length
/// has failed. A pure value: the receiver executes the actions and reports their outcome.
///
/// ```
/// toneMetric(1) --failed--> toneMetric(2) ... toneMetric(16) --failed--> roomModel(first reverberant length)
/// roomModel(n) --failed--> roomModel(next reverberant length) ... --failed--> finished
/// roomModel(n) --failed, nearly right, refinements left--> refinedRoomModel(n) --failed--> roomModel(next)
/// any --decoded--> finished                  toneMetric(16) --failed, no reverberant length--> finished
/// ```
///
/// The tone metric goes through every length before the room model is tried because the room model's fit
/// is the costliest step of a frame and most reverberant frames do not need it: when the room model came
/// between the lengths, every frame the tone metric decoded at its own length after failing on reverberant
/// shorter ones had paid for a fit (`sotto bench sweep reverb --trials 40`: 149 of the 175 fits; `sweep
/// rooms --lengths 4,8,16 --trials 40`: 284 of 989). The tone metric's header distance cannot choose the
/// length instead: frames the room model decoded had up to 7 of the 8 header bits wrong under the tone
/// metric at their own length. The cost is latency: a frame that needs the room model is decoded once the
/// samples of the longest frame have arrived.
///
/// A refinement is a second room fit, so a candidate has a budget of them (`refinementLimit`, given by the
/// receiver with each outcome).
struct CandidateStateMachine: Sendable, Hashable {
    enum State: Sendable, Hashable {
        /// The tone metric's decode of a frame of `payloadBytes` waits for its samples.
        case toneMetric(payloadBytes: Int)
        /// The tone metric failed at every length and found the frame reverberant at `payloadBytes`; the
        /// coherent detector's decode waits for its samples (and for every earlier candidate to have been
        /// decoded or refused by it).
        case roomModel(payloadBytes: Int)
        /// The coherent decode at `payloadBytes` failed with a nearly right header: the room is fitted again
        /// over the decided frame and the frame decided again.
        case refinedRoomModel(payloadBytes: Int)
        /// Decoded, or every length failed.
        case finished
    }

    /// What the receiver must do next for this candidate.
    enum Action: Sendable, Hashable {
        case decodeWithToneMetric(payloadBytes: Int)
        case decodeWithRoomModel(payloadBytes: Int)
        case refineRoomModel(payloadBytes: Int)
        /// Nothing more: forget the candidate.
        case drop
    }

    /// The outcome of an action, as the receiver reports it.
    struct Outcome: Sendable, Hashable {
        /// The action produced a frame.
        var decoded: Bool
        /// The tone metric measured a reverberant tail (or a long room's floor) at this length: the room model
        /// is tried only at such lengths (it gains nothing on a dry frame).
        var reverberant = true
        /// The coherent decode's header was within the receiver's distance for a second room fit.
        var nearlyRight = false
        /// Second room fits this candidate may have in all (the receiver's, by room).
        var refinementLimit = 0
    }

    private(set) var state: State = .toneMetric(payloadBytes: FrameFormat.payloadBytes.lowerBound)
    /// Second room fits taken so far.
    private(set) var refinements = 0
    /// The lengths (bit `payloadBytes`) at which the tone metric failed on a reverberant frame: the room
    /// model's turns once the tone metric has tried every length.
    private(set) var reverberantLengths: UInt32 = 0

    /// The action the current state waits to take.
    var action: Action {
        switch state {
        case .toneMetric(let bytes): return .decodeWithToneMetric(payloadBytes: bytes)
        case .roomModel(let bytes): return .decodeWithRoomModel(payloadBytes: bytes)
        case .refinedRoomModel(let bytes): return .refineRoomModel(payloadBytes: bytes)
        case .finished: return .drop
        }
    }

    /// The payload length being tried (nil once finished).
    var payloadBytes: Int? {
        switch state {
        case .toneMetric(let bytes), .roomModel(let bytes), .refinedRoomModel(let bytes): return bytes
        case .finished: return nil
        }
    }

    /// True while the coherent detector's turn (a decode or a refinement) is waiting.
    var usesRoomModel: Bool {
        switch state {
        case .roomModel, .refinedRoomModel: return true
        case .toneMetric, .finished: return false
        }
    }

    /// Moves on after the current action; returns the next action.
    mutating func step(_ outcome: Outcome) -> Action {
        switch state {
        case .toneMetric(let bytes):
            if outcome.decoded {
                state = .finished
            } else {
                if outcome.reverberant { reverberantLengths |= 1 << UInt32(bytes) }
                state = bytes < FrameFormat.payloadBytes.upperBound
                    ? .toneMetric(payloadBytes: bytes + 1) : roomModel(after: FrameFormat.payloadBytes.lowerBound - 1)
            }
        case .roomModel(let bytes):
            if outcome.decoded {
                state = .finished
            } else if outcome.nearlyRight && refinements < outcome.refinementLimit {
                refinements += 1
                state = .refinedRoomModel(payloadBytes: bytes)
            } else {
                state = roomModel(after: bytes)
            }
        case .refinedRoomModel(let bytes):
            state = outcome.decoded ? .finished : roomModel(after: bytes)
        case .finished:
            break
        }
        return action
    }

    /// `step` with an outcome that is not nearly right.
    mutating func step(decoded: Bool, reverberant: Bool = true) -> Action {
        step(Outcome(decoded: decoded, reverberant: reverberant))
    }

    /// The room model at the next reverberant length after `bytes`, or finished when there is none.
    private func roomModel(after bytes: Int) -> State {
        let later = reverberantLengths & ~((UInt32(2) << UInt32(bytes)) &- 1)
        return later == 0 ? .finished : .roomModel(payloadBytes: later.trailingZeroBitCount)
    }

    /// Gives up (the samples the candidate needs are gone).
    mutating func abandon() { state = .finished }
}
