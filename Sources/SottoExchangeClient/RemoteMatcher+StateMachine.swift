import SottoExchange
import SottoExchangeCore
import SottoExchangeWire

extension RemoteMatcher {
    /// The connection lifecycle of a ``RemoteMatcher`` and the session it carries across connections: a pure
    /// value whose transitions return what to do (the model is grpc-swift-nio-transport's `Subchannel`). It
    /// opens no socket, starts no task and reads no clock; `RemoteMatcher.run()` feeds it its inputs one at a
    /// time and carries out the actions.
    ///
    /// ```
    ///                 ┌───────────────┐
    ///  init ─────────▶│ NOT CONNECTED │◀─────────── streamEnded (transient) ─────────┐
    ///                 │  (backing off)│  back-off: 0.2 s doubling to 5 s, jitter;     │
    ///                 └───────────────┘  the next endpoint; reset once welcomed       │
    ///                    │         │                                                  │
    ///                 connect    close ──────────────────────────────────────┐        │
    ///                    ▼                                                    │        │
    ///                 ┌───────────────┐                                       │        │
    ///                 │  CONNECTING   │── streamEnded (transient) ────────────┼────────┤
    ///                 │ (Hello sent)  │── close ──────────────────────────────┤        │
    ///                 └───────────────┘                                       │        │
    ///                         │ welcomed: connected(resumed), replay          │        │
    ///                         ▼                                               │        │
    ///                 ┌───────────────┐                                       │        │
    ///                 │   CONNECTED   │── streamEnded (transient) ────────────┼────────┘
    ///                 │  (heartbeats) │                                       │
    ///                 └───────────────┘                                       │
    ///                         │ close: outbound finished, 2 s grace           │
    ///                         ▼                                               ▼
    ///                 ┌───────────────┐  streamEnded / grace over     ┌───────────────┐
    ///                 │  GOING AWAY   │──────────────────────────────▶│   SHUT DOWN   │
    ///                 └───────────────┘                               └───────────────┘
    ///           streamEnded (refused: a wrong key, a full session quota) from CONNECTING or
    ///           CONNECTED: failed(error), then SHUT DOWN.
    /// ```
    package struct StateMachine {
        /// Where the connection is; each case holds only what that state needs.
        package enum State {
            case notConnected(NotConnected)
            case connecting(Connecting)
            case connected(Connected)
            case goingAway(GoingAway)
            case shutDown
        }

        /// No stream: about to open one, or backing off before it.
        package struct NotConnected {
            /// The endpoint the next stream goes to (an index into the options' endpoints).
            package var endpoint: Int
            /// The back-off after the next failure (s, before jitter).
            package var delay: Double
        }

        /// A stream is open and its Hello sent; no Welcome yet.
        package struct Connecting {
            package var attempt: Attempt
            /// The back-off after this stream fails (s, before jitter).
            package var delay: Double
        }

        /// The service welcomed the session on this stream.
        package struct Connected {
            package var attempt: Attempt
            /// Heartbeat ticks since a frame was last sent (a heartbeat fills the second idle tick).
            package var idleTicks = 0
        }

        /// ``RemoteMatcher/close()`` finished the outbound stream; the service ends the session and the stream.
        package struct GoingAway {
            /// The stream being ended.
            package var attempt: UInt64
        }

        /// One stream: its number, the endpoint it went to, and where its outbound frames go.
        package struct Attempt: Sendable {
            package let id: UInt64
            package let endpoint: Int
            package let writer: AsyncStream<ClientFrame>.Continuation
        }

        /// What outlives a connection: the live operations and how to resume the session.
        package struct Session {
            /// Live operations, in the order they were made (sent again on a new session).
            package var operations: [(id: OperationID, request: MatcherRequest)] = []
            /// Operations ended while the link was down: a resumed session still has them.
            package var endedWhileDown: [MatcherRequest] = []
            /// The session's last TakeTurns, 0 included (sent again after every Welcome: a resumed session may
            /// have missed it while the link was down); nil: never sent.
            package var takeTurns: MatcherRequest?
            /// The session to resume, and its secret (empty: none yet).
            package var resumeID = ""
            package var resumeSecret: [UInt8] = []
        }

        package private(set) var state: State
        package private(set) var session = Session()
        private let endpointCount: Int
        private let backoff: ClosedRange<Double>
        private var attempts: UInt64 = 0

        /// - Parameters:
        ///   - endpoints: how many endpoints there are (tried in turn, from the first).
        ///   - backoff: the first and the longest back-off (s).
        package init(endpoints: Int, backoff: ClosedRange<Double>) {
            precondition(endpoints > 0, "a remote matcher needs at least one endpoint")
            endpointCount = endpoints
            self.backoff = backoff
            state = .notConnected(NotConnected(endpoint: 0, delay: backoff.lowerBound))
        }

        // MARK: Connecting

        /// A stream to open: its attempt, the frames to write after the Hello, and the session to resume.
        package struct Open: Sendable {
            package let attempt: Attempt
            package let outbound: AsyncStream<ClientFrame>
            package let resumeID: String
            package let resumeSecret: [UInt8]
        }

        /// Time to open a stream (at start, and when a back-off is over): the stream to open, if any.
        package mutating func connect() -> Open? {
            guard case .notConnected(let waiting) = state else { return nil }
            attempts += 1
            let (outbound, writer) = AsyncStream.makeStream(of: ClientFrame.self)
            let attempt = Attempt(id: attempts, endpoint: waiting.endpoint, writer: writer)
            state = .connecting(Connecting(attempt: attempt, delay: waiting.delay))
            return Open(attempt: attempt, outbound: outbound, resumeID: session.resumeID, resumeSecret: session.resumeSecret)
        }

        /// What to do once the service welcomed a session.
        package enum OnWelcome {
            case none
            /// Report `connected(resumed:)`, then write `replay` (the live operations and the last TakeTurns;
            /// after a resumption, first the operations ended meanwhile).
            case connected(resumed: Bool, replay: [MatcherRequest], writer: AsyncStream<ClientFrame>.Continuation)
        }

        /// The service took the session on stream `attempt`.
        /// - Parameters:
        ///   - attempt: the stream's number.
        ///   - sessionID: the session's id, to resume it later.
        ///   - secret: the session's resume secret.
        ///   - resumed: whether the service still held the session named in the Hello.
        package mutating func welcomed(attempt: UInt64, sessionID: String, secret: [UInt8], resumed: Bool) -> OnWelcome {
            guard case .connecting(let connecting) = state, connecting.attempt.id == attempt else { return .none }
            session.resumeID = sessionID
            session.resumeSecret = secret
            // A resumed session still holds what ended meanwhile; a new one never had it.
            var replay = resumed ? session.endedWhileDown : []
            session.endedWhileDown = []
            replay += session.operations.map(\.request)
            if let turns = session.takeTurns { replay.append(turns) }
            state = .connected(Connected(attempt: connecting.attempt))
            return .connected(resumed: resumed, replay: replay, writer: connecting.attempt.writer)
        }

        // MARK: Sending

        /// Records `request` in the session; returns where to write it now (connected only: until the
        /// Welcome, operations wait to be sent with the others and sightings are dropped).
        package mutating func send(_ request: MatcherRequest) -> AsyncStream<ClientFrame>.Continuation? {
            let welcomed: Bool
            switch state {
            case .goingAway, .shutDown: return nil
            case .notConnected, .connecting: welcomed = false
            case .connected: welcomed = true
            }
            switch request {
            case .publish(let op, _, _), .subscribe(let op, _, _, _):
                session.operations.removeAll { $0.id == op }
                session.operations.append((op, request))
            case .unpublish(let op), .unsubscribe(let op):
                let wasLive = session.operations.contains { $0.id == op }
                session.operations.removeAll { $0.id == op }
                if !welcomed && wasLive { session.endedWhileDown.append(request) }
            case .observe:
                break
            case .takeTurns:
                session.takeTurns = request
            }
            guard case .connected(var connected) = state else { return nil }
            connected.idleTicks = 0
            state = .connected(connected)
            return connected.attempt.writer
        }

        /// A heartbeat interval's half passed on stream `attempt`: where to write a heartbeat, when nothing
        /// was sent for two ticks (a heartbeat only fills a silence).
        package mutating func heartbeatTick(attempt: UInt64) -> AsyncStream<ClientFrame>.Continuation? {
            guard case .connected(var connected) = state, connected.attempt.id == attempt else { return nil }
            connected.idleTicks += 1
            let due = connected.idleTicks >= 2
            if due { connected.idleTicks = 0 }
            state = .connected(connected)
            return due ? connected.attempt.writer : nil
        }

        // MARK: Ending

        /// How a stream ended.
        package enum StreamOutcome: Sendable, Hashable {
            /// The stream ended or failed; another may do better (the reason is for the log).
            case ended(String)
            /// The service refused the session for a reason reconnecting cannot change (a wrong key, a
            /// full session quota).
            case refused(ExchangeError)
        }

        /// What to do once a stream ended.
        package enum OnStreamEnded: Equatable {
            case none
            /// Report `disconnected(reason)`, then connect again after `wait` (s), to endpoint `next`.
            case backOff(reason: String, wait: Double, failed: Int, next: Int)
            /// Report `failed(error)`, then shut down.
            case fail(ExchangeError)
            /// Shut down (the close asked for is done).
            case finish
        }

        /// Stream `attempt` ended with `outcome`.
        /// - Parameters:
        ///   - attempt: the stream's number.
        ///   - outcome: how it ended.
        ///   - jitter: the factor of this back-off (0.75 to 1.25 at random; 1 in tests).
        package mutating func streamEnded(attempt: UInt64, _ outcome: StreamOutcome, jitter: Double) -> OnStreamEnded {
            let ended: Attempt
            var delay: Double
            switch state {
            case .connecting(let connecting) where connecting.attempt.id == attempt:
                ended = connecting.attempt
                delay = connecting.delay
            case .connected(let connected) where connected.attempt.id == attempt:
                ended = connected.attempt
                delay = backoff.lowerBound  // it was welcomed: the link works again, start the back-off afresh
            case .goingAway(let goingAway) where goingAway.attempt == attempt:
                state = .shutDown
                return .finish
            default:
                return .none
            }
            ended.writer.finish()
            switch outcome {
            case .refused(let error):
                state = .shutDown
                return .fail(error)
            case .ended(let reason):
                let next = (ended.endpoint + 1) % endpointCount
                let wait = delay * jitter
                delay = min(delay * 2, backoff.upperBound)
                state = .notConnected(NotConnected(endpoint: next, delay: delay))
                return .backOff(reason: reason, wait: wait, failed: ended.endpoint, next: next)
            }
        }

        /// What to do when the link is closed.
        package enum OnClose {
            case none
            /// Finish `writer` (if any) and shut down now: no session is welcomed.
            case finish(writer: AsyncStream<ClientFrame>.Continuation?)
            /// Finish `writer` (the service then ends the session at once) and give stream `attempt` a grace
            /// period to end.
            case goAway(writer: AsyncStream<ClientFrame>.Continuation, attempt: UInt64)
        }

        /// ``RemoteMatcher/close()`` was called.
        package mutating func close() -> OnClose {
            switch state {
            case .notConnected:
                state = .shutDown
                return .finish(writer: nil)
            case .connecting(let connecting):
                state = .shutDown
                return .finish(writer: connecting.attempt.writer)
            case .connected(let connected):
                state = .goingAway(GoingAway(attempt: connected.attempt.id))
                return .goAway(writer: connected.attempt.writer, attempt: connected.attempt.id)
            case .goingAway, .shutDown:
                return .none
            }
        }

        /// The grace period of a closing stream is over: whether to shut down now.
        package mutating func goAwayTimedOut(attempt: UInt64) -> Bool {
            guard case .goingAway(let goingAway) = state, goingAway.attempt == attempt else { return false }
            state = .shutDown
            return true
        }
    }
}
