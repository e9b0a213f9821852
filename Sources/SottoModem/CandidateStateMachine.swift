/// What the receiver does with one detected preamble: try each payload length in turn, first with the
/// tone metric, then, when that fails, with the coherent (room-aware) detector, and, when the coherent
/// decode came close (its header nearly right), with the room fitted again over the decided frame; until
/// one decodes or every length has failed. A pure value: the receiver executes the actions and reports
/// their outcome.
///
/// ```
/// toneMetric(1) --failed--> roomModel(1) --failed--> toneMetric(2) ... roomModel(16) --failed--> finished
/// toneMetric(n) --failed, dry--> toneMetric(n + 1)          any --decoded--> finished
/// roomModel(n) --failed, nearly right, refinements left--> refinedRoomModel(n) --failed--> toneMetric(n + 1)
/// ```
///
/// A refinement is a second room fit (the costliest step of a frame in a room), so a candidate has a
/// budget of them (`refinementLimit`, given by the receiver with each outcome).
struct CandidateStateMachine: Sendable, Hashable {
    enum State: Sendable, Hashable {
        /// The tone metric's decode of a frame of `payloadBytes` waits for its samples.
        case toneMetric(payloadBytes: Int)
        /// The tone metric failed at `payloadBytes`; the coherent detector's decode waits for its samples
        /// (and for every earlier candidate to have been decoded or refused by it).
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
        /// The tone metric measured a reverberant tail (or a long room's floor): without it the room model
        /// is not tried (it gains nothing on a dry frame).
        var reverberant = true
        /// The coherent decode's header was within the receiver's distance for a second room fit.
        var nearlyRight = false
        /// Second room fits this candidate may have in all (the receiver's, by room).
        var refinementLimit = 0
    }

    private(set) var state: State = .toneMetric(payloadBytes: FrameFormat.payloadBytes.lowerBound)
    /// Second room fits taken so far.
    private(set) var refinements = 0
    /// An alias frame's candidate: its one length, with the tone metric and then (reverberant) the room model.
    private(set) var isAlias = false

    /// A token frame's candidate: every length from the shortest.
    init() {}

    /// An alias frame's candidate when `alias` (its one attempt), else a token frame's.
    init(alias: Bool) { isAlias = alias }

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
            } else if outcome.reverberant {
                state = .roomModel(payloadBytes: bytes)
            } else {
                state = isAlias ? .finished : Self.next(after: bytes)
            }
        case .roomModel(let bytes):
            if outcome.decoded {
                state = .finished
            } else if isAlias {
                state = .finished
            } else if outcome.nearlyRight && refinements < outcome.refinementLimit {
                refinements += 1
                state = .refinedRoomModel(payloadBytes: bytes)
            } else {
                state = Self.next(after: bytes)
            }
        case .refinedRoomModel(let bytes):
            state = outcome.decoded ? .finished : Self.next(after: bytes)
        case .finished:
            break
        }
        return action
    }

    /// `step` with an outcome that is not nearly right.
    mutating func step(decoded: Bool, reverberant: Bool = true) -> Action {
        step(Outcome(decoded: decoded, reverberant: reverberant))
    }

    /// The tone metric at the next length, or finished after the longest.
    private static func next(after bytes: Int) -> State {
        bytes >= FrameFormat.payloadBytes.upperBound ? .finished : .toneMetric(payloadBytes: bytes + 1)
    }

    /// Gives up (the samples the candidate needs are gone).
    mutating func abandon() { state = .finished }
}
