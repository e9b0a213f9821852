/// What the receiver does with one detected preamble: try each payload length in turn, first with the
/// tone metric, then, when that fails, with the coherent (room-aware) detector, and, when the coherent
/// decode came close (its header nearly right), a second pass: the room fitted again over the decided frame,
/// or in a long room the frame decided again from the code's decision; until one decodes or every length has
/// failed. Nothing decoded at the preamble's estimated time scale: the same preamble again at scale 1. Given up
/// when its samples are gone or another profile's frame holds it. A pure value: the receiver reports what it
/// measured and how each action went, and executes the actions.
///
/// ```
/// toneMetric(1) --failed--> roomModel(1) --failed--> toneMetric(2) ... roomModel(16) --failed--> finished
/// toneMetric(n) --failed, dry--> toneMetric(n + 1)          any --decoded--> finished
/// roomModel(n) --failed, nearly right, second passes left--> refinedRoomModel(n) | feedbackRedecision(n) (long room)
///     --failed--> toneMetric(n + 1)
/// the last length failed, a scale-1 retry possible --> retryAtUnitScale
/// any --samples gone, inside another profile's frame (or, for the tone metric of a token frame, under one
///     that matched far better)--> finished
/// ```
///
/// A second pass costs as much as the first room fit (the costliest step of a frame in a room), so a
/// candidate has a budget of them (`refinementLimit`, given by the receiver with each outcome).
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
        /// The same in a long room, where too many decided symbols are wrong for a second fit: the frame is
        /// decided again with the same room, its echoes predicted from the code's decision.
        case feedbackRedecision(payloadBytes: Int)
        /// Nothing decoded at the estimated time scale: the receiver starts the preamble again at scale 1.
        case retryAtUnitScale
        /// Decoded, every length failed, or given up.
        case finished
    }

    /// What the receiver must do next for this candidate.
    enum Action: Sendable, Hashable {
        case decodeWithToneMetric(payloadBytes: Int)
        case decodeWithRoomModel(payloadBytes: Int)
        case refineRoomModel(payloadBytes: Int)
        case redecideWithFeedback(payloadBytes: Int)
        /// Replace the candidate by one of the same preamble at time scale 1.
        case restartAtUnitScale
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
        /// The coherent decode's header was within the receiver's distance for a second pass.
        var nearlyRight = false
        /// Second passes this candidate may have in all (the receiver's, by room).
        var refinementLimit = 0
        /// The tone metric saw a long room's floor: a second pass decides again with the code's feedback
        /// instead of fitting the room again.
        var longRoom = false
        /// A retry at time scale 1 is possible once every length failed: the preamble's scale-1 start is known
        /// (this is not the retry itself), no other profile's receiver owns it, and it is not inside a frame
        /// this receiver decoded.
        var canRetryAtUnitScale = false
    }

    /// What the receiver knows of a candidate's samples and the band before its next action.
    struct Circumstances: Sendable, Hashable {
        /// The history no longer holds the samples the action needs.
        var samplesGone = false
        /// Another profile's receiver decoded a frame on the same band around this preamble.
        var insideOtherFrame = false
        /// Another profile's receiver matched a preamble far better just before, whose frame is still on the
        /// air (asked only when ``CandidateStateMachine/yieldsToDominantFrames``).
        var underDominantFrame = false
    }

    private(set) var state: State = .toneMetric(payloadBytes: FrameFormat.payloadBytes.lowerBound)
    /// Second passes taken so far.
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
        case .feedbackRedecision(let bytes): return .redecideWithFeedback(payloadBytes: bytes)
        case .retryAtUnitScale: return .restartAtUnitScale
        case .finished: return .drop
        }
    }

    /// The payload length being tried (nil once no decode is waiting).
    var payloadBytes: Int? {
        switch state {
        case .toneMetric(let bytes), .roomModel(let bytes), .refinedRoomModel(let bytes), .feedbackRedecision(let bytes):
            return bytes
        case .retryAtUnitScale, .finished: return nil
        }
    }

    /// True while the coherent detector's turn (a decode or a second pass) is waiting.
    var usesRoomModel: Bool {
        switch state {
        case .roomModel, .refinedRoomModel, .feedbackRedecision: return true
        case .toneMetric, .retryAtUnitScale, .finished: return false
        }
    }

    /// True when the next action gives way to another profile's far better match still on the air: the tone
    /// metric of a token frame (the room model has its own test of ownership; an alias frame is short).
    var yieldsToDominantFrames: Bool {
        if case .toneMetric = state { return !isAlias }
        return false
    }

    /// Gives the candidate up before its next action when its samples are gone or it lies inside another
    /// profile's frame (no retry at scale 1 either); returns the action left.
    mutating func check(_ circumstances: Circumstances) -> Action {
        if circumstances.samplesGone || circumstances.insideOtherFrame || (yieldsToDominantFrames && circumstances.underDominantFrame) {
            state = .finished
        }
        return action
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
                state = isAlias ? Self.end(outcome) : Self.next(after: bytes, outcome)
            }
        case .roomModel(let bytes):
            if outcome.decoded {
                state = .finished
            } else if isAlias {
                state = Self.end(outcome)
            } else if outcome.nearlyRight && refinements < outcome.refinementLimit {
                refinements += 1
                state = outcome.longRoom ? .feedbackRedecision(payloadBytes: bytes) : .refinedRoomModel(payloadBytes: bytes)
            } else {
                state = Self.next(after: bytes, outcome)
            }
        case .refinedRoomModel(let bytes), .feedbackRedecision(let bytes):
            state = outcome.decoded ? .finished : Self.next(after: bytes, outcome)
        case .retryAtUnitScale, .finished:
            break
        }
        return action
    }

    /// `step` with an outcome that is not nearly right.
    mutating func step(decoded: Bool, reverberant: Bool = true) -> Action {
        step(Outcome(decoded: decoded, reverberant: reverberant))
    }

    /// The tone metric at the next length, or the end after the longest.
    private static func next(after bytes: Int, _ outcome: Outcome) -> State {
        bytes >= FrameFormat.payloadBytes.upperBound ? end(outcome) : .toneMetric(payloadBytes: bytes + 1)
    }

    /// Every attempt failed: the retry at scale 1 when there may be one, else finished.
    private static func end(_ outcome: Outcome) -> State { outcome.canRetryAtUnitScale ? .retryAtUnitScale : .finished }
}
