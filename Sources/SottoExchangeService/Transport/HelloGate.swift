import DequeModule
import Synchronization

/// Counts the streams that have not said Hello yet, per connection (by its peer address) and over the node,
/// refuses more than the limits (what a peer can make the service hold before it authenticates), and ends those
/// whose Hello does not come within the Hello timeout: one task for the node (``enforceDeadlines()``) rather than a
/// timer per stream, since a task keeps its memory as long as it lives (a timer per stream held 1.7 kB a session
/// for its first 5 s).
final class HelloGate: Sendable {
    /// Why a stream was refused.
    enum Refusal: Error, Sendable, Equatable, CustomStringConvertible {
        /// Its connection holds this many streams without Hello already.
        case connection(Int)
        /// The node holds this many streams without Hello already.
        case node(Int)

        var description: String {
            switch self {
            case .connection(let limit): return "this connection already has \(limit) streams that have not said Hello"
            case .node(let limit): return "the service already holds \(limit) streams that have not said Hello; try again shortly"
            }
        }
    }

    /// A stream's place, given back once (Hello said, or the stream over); given back on deinit otherwise.
    final class Pass: Sendable {
        private let gate: HelloGate
        private let connection: String
        private let state = Mutex(State.waiting(onExpiry: nil))

        /// Waiting for the Hello (with what ends the stream at the deadline, once its owner said), past the deadline
        /// without it, or given back.
        private enum State {
            case waiting(onExpiry: (@Sendable () -> Void)?)
            case expired
            case released
        }

        fileprivate init(gate: HelloGate, connection: String) {
            self.gate = gate
            self.connection = connection
        }

        /// What ends the stream if the deadline passes before the place is given back; run at once if it has passed.
        func onExpiry(_ action: @escaping @Sendable () -> Void) {
            let passed = state.withLock { state -> Bool in
                switch state {
                case .waiting: state = .waiting(onExpiry: action); return false
                case .expired: return true
                case .released: return false
                }
            }
            if passed { action() }
        }

        /// Gives the place back (the Hello came, or the stream is over): the deadline no longer applies.
        func release() {
            let held = state.withLock { state -> Bool in
                if case .released = state { return false }
                state = .released
                return true
            }
            if held { gate.leave(connection) }
        }

        /// True once the place was given back.
        fileprivate var isReleased: Bool { state.withLock { if case .released = $0 { true } else { false } } }

        /// The deadline passed: the stream's end, if the place is still held.
        fileprivate func expire() {
            let action = state.withLock { state -> (@Sendable () -> Void)? in
                guard case .waiting(let action) = state else { return nil }
                state = .expired
                return action
            }
            action?()
        }

        deinit { release() }
    }

    private let perConnection: Int
    private let total: Int
    /// How long a stream may take to say Hello.
    private let timeout: Duration
    private let onChange: @Sendable (Int) -> Void
    /// The places held, by connection and over the node, and the passes given out in the last `timeout`, oldest
    /// first (their deadlines come in that order: one timeout for all).
    private let state = Mutex<(byConnection: [String: Int], count: Int, pending: Deque<Pending>)>(([:], 0, []))

    /// A pass and its deadline; weak, so that a pass dropped is given back at once (``Pass`` deinit).
    private struct Pending {
        let deadline: ContinuousClock.Instant
        weak var pass: Pass?
    }

    /// - Parameters:
    ///   - perConnection: most streams without Hello on one connection.
    ///   - total: most over the node.
    ///   - timeout: how long a stream may take to say Hello (s).
    ///   - onChange: called with the node's count after each change.
    init(perConnection: Int, total: Int, timeout: Double, onChange: @escaping @Sendable (Int) -> Void = { _ in }) {
        self.perConnection = max(1, perConnection)
        self.total = max(1, total)
        self.timeout = .seconds(max(0, timeout))
        self.onChange = onChange
    }

    /// Streams without Hello now, over the node.
    var count: Int { state.withLock { $0.count } }

    /// A new stream on `connection` (the peer address of its connection, unique while it is open).
    func enter(connection: String) throws(Refusal) -> Pass {
        // The passes looked at under the lock, let go after it: a pass whose last owner drops it meanwhile gives its
        // place back (deinit), which takes the lock.
        var seen: [Pass] = []
        let outcome = state.withLock { state -> Result<(Int, Pass), Refusal> in
            if state.count >= total { return .failure(.node(total)) }
            let held = state.byConnection[connection, default: 0]
            // Unix-socket peers have no address of their own: only the node's count bounds them.
            if held >= perConnection && !connection.hasPrefix("unix") { return .failure(.connection(perConnection)) }
            state.byConnection[connection] = held + 1
            state.count += 1
            // Taken under the lock, so that the deadlines stand in `pending` in their order. The passes given back
            // at its head leave it now (most streams say Hello within milliseconds), the others at their deadline.
            let pass = Pass(gate: self, connection: connection)
            while let first = state.pending.first {
                guard let oldest = first.pass else { state.pending.removeFirst(); continue }
                seen.append(oldest)
                guard oldest.isReleased else { break }
                state.pending.removeFirst()
            }
            state.pending.append(Pending(deadline: .now + timeout, pass: pass))
            return .success((state.count, pass))
        }
        switch outcome {
        case .failure(let refusal): throw refusal
        case .success(let (count, pass)):
            onChange(count)
            return pass
        }
    }

    /// Ends the streams whose deadline passed without Hello (``Pass/onExpiry(_:)``), checking a few times a timeout
    /// (every quarter of it, at most every 0.25 s and at least every 10 ms, so a timeout of 0 does not spin), until the
    /// task is cancelled.
    func enforceDeadlines() async {
        let tick = max(.milliseconds(10), min(.milliseconds(250), timeout / 4))
        while (try? await Task.sleep(for: tick)) != nil {
            let now = ContinuousClock.now
            let due = state.withLock { state -> [Pass] in
                var due: [Pass] = []
                while let first = state.pending.first, first.deadline <= now {
                    if let pass = state.pending.removeFirst().pass { due.append(pass) }
                }
                return due
            }
            for pass in due { pass.expire() }
        }
    }

    fileprivate func leave(_ connection: String) {
        let count = state.withLock { state in
            let held = state.byConnection[connection, default: 1] - 1
            state.byConnection[connection] = held > 0 ? held : nil
            state.count -= 1
            return state.count
        }
        onChange(count)
    }
}
