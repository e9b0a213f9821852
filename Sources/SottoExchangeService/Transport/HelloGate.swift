import Synchronization

/// Counts the streams that have not said Hello yet, per connection (by its peer address) and over the node,
/// and refuses more than the limits: what a peer can make the service hold before it authenticates.
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
        private let held = Mutex(true)

        fileprivate init(gate: HelloGate, connection: String) {
            self.gate = gate
            self.connection = connection
        }

        func release() {
            guard held.withLock({ held in defer { held = false }; return held }) else { return }
            gate.leave(connection)
        }

        deinit { release() }
    }

    private let perConnection: Int
    private let total: Int
    private let onChange: @Sendable (Int) -> Void
    private let state = Mutex<(byConnection: [String: Int], count: Int)>(([:], 0))

    /// - Parameters:
    ///   - perConnection: most streams without Hello on one connection.
    ///   - total: most over the node.
    ///   - onChange: called with the node's count after each change.
    init(perConnection: Int, total: Int, onChange: @escaping @Sendable (Int) -> Void = { _ in }) {
        self.perConnection = max(1, perConnection)
        self.total = max(1, total)
        self.onChange = onChange
    }

    /// Streams without Hello now, over the node.
    var count: Int { state.withLock { $0.count } }

    /// A new stream on `connection` (the peer address of its connection, unique while it is open).
    func enter(connection: String) throws(Refusal) -> Pass {
        let outcome = state.withLock { state -> Result<Int, Refusal> in
            if state.count >= total { return .failure(.node(total)) }
            let held = state.byConnection[connection, default: 0]
            // Unix-socket peers have no address of their own: only the node's count bounds them.
            if held >= perConnection && !connection.hasPrefix("unix") { return .failure(.connection(perConnection)) }
            state.byConnection[connection] = held + 1
            state.count += 1
            return .success(state.count)
        }
        switch outcome {
        case .failure(let refusal): throw refusal
        case .success(let count): onChange(count)
        }
        return Pass(gate: self, connection: connection)
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
