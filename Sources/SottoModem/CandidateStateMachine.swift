/// What the receiver does with one detected preamble: try each payload length in turn, first with the
/// tone metric, then, when that fails, with the coherent (room-aware) detector, until one decodes or
/// every length has failed. A pure value: the receiver executes the actions and reports their outcome.
///
/// ```
/// toneMetric(1) --failed--> roomModel(1) --failed--> toneMetric(2) ... roomModel(16) --failed--> finished
/// toneMetric(n) --failed, dry--> toneMetric(n + 1)          any --decoded--> finished
/// ```
struct CandidateStateMachine: Sendable, Hashable {
    enum State: Sendable, Hashable {
        /// The tone metric's decode of a frame of `payloadBytes` waits for its samples.
        case toneMetric(payloadBytes: Int)
        /// The tone metric failed at `payloadBytes`; the coherent detector's decode waits for its samples
        /// (and for every earlier candidate to have been decoded or refused by it).
        case roomModel(payloadBytes: Int)
        /// Decoded, or every length failed.
        case finished
    }

    /// What the receiver must do next for this candidate.
    enum Action: Sendable, Hashable {
        case decodeWithToneMetric(payloadBytes: Int)
        case decodeWithRoomModel(payloadBytes: Int)
        /// Nothing more: forget the candidate.
        case drop
    }

    private(set) var state: State = .toneMetric(payloadBytes: FrameFormat.payloadBytes.lowerBound)

    /// The action the current state waits to take.
    var action: Action {
        switch state {
        case .toneMetric(let bytes): return .decodeWithToneMetric(payloadBytes: bytes)
        case .roomModel(let bytes): return .decodeWithRoomModel(payloadBytes: bytes)
        case .finished: return .drop
        }
    }

    /// The payload length being tried (nil once finished).
    var payloadBytes: Int? {
        switch state {
        case .toneMetric(let bytes), .roomModel(let bytes): return bytes
        case .finished: return nil
        }
    }

    /// Moves on after the current action: `decoded` when it produced a frame; `reverberant` when the tone
    /// metric measured a reverberant tail, without which the room model is not tried (it gains nothing on
    /// a dry frame). Returns the next action.
    mutating func step(decoded: Bool, reverberant: Bool = true) -> Action {
        switch state {
        case .toneMetric(let bytes):
            if decoded {
                state = .finished
            } else if reverberant {
                state = .roomModel(payloadBytes: bytes)
            } else {
                state = bytes >= FrameFormat.payloadBytes.upperBound ? .finished : .toneMetric(payloadBytes: bytes + 1)
            }
        case .roomModel(let bytes):
            state = decoded || bytes >= FrameFormat.payloadBytes.upperBound ? .finished : .toneMetric(payloadBytes: bytes + 1)
        case .finished:
            break
        }
        return action
    }

    /// Gives up (the samples the candidate needs are gone).
    mutating func abandon() { state = .finished }
}
