import CoreMetrics
import Foundation
import GRPCCore
import Logging
import SottoExchangeCore
import SottoExchangeWire
import Synchronization

/// The gRPC face of the matcher: one bidirectional stream per session (`Exchange.Session` in
/// `exchange.proto`). The first frame must be a Hello with a valid API key; then frames go to the
/// ``MatcherHost`` and the host's frames for the session come back on the stream.
public struct ExchangeService: Sotto_Exchange_V1_Exchange.StreamingServiceProtocol {
    let host: MatcherHost
    let store: any ExchangeStore
    let metrics: ServiceMetrics
    let logger: Logger
    let limits: TransportLimits
    let helloGate: HelloGate
    let failedAuthentications = LogThrottle(interval: 1)
    /// How long a new stream may take to say Hello by default (s): ``TransportLimits/helloTimeout``.
    public static let helloTimeout = TransportLimits().helloTimeout

    /// - Parameters:
    ///   - host: the matcher the sessions go to.
    ///   - store: where API keys are checked.
    ///   - metrics: the service's counters.
    ///   - logger: where failed authentications are logged.
    ///   - limits: the Hello deadline and the counts of streams without Hello.
    public init(host: MatcherHost, store: any ExchangeStore, metrics: ServiceMetrics, logger: Logger,
                limits: TransportLimits = TransportLimits()) {
        self.host = host
        self.store = store
        self.metrics = metrics
        self.logger = logger
        self.limits = limits
        helloGate = HelloGate(perConnection: limits.maxStreamsWithoutHelloPerConnection, total: limits.maxStreamsWithoutHello,
                              timeout: limits.helloTimeout) { count in
            metrics.transport.streamsWithoutHello.record(count)
        }
    }

    /// The session this stream opened, once it has.
    final class StreamState: Sendable {
        /// The stream's number on the host once its session is open.
        let stream = Mutex<UInt64?>(nil)
        /// The project's counters once the key is known, and when the last sighting frame arrived.
        let project = Mutex<TransportMetrics.ProjectCounters?>(nil)
        let lastSighting = Mutex<ContinuousClock.Instant?>(nil)
    }

    public func session(request: StreamingServerRequest<ClientFrame>, context: ServerContext) async throws -> StreamingServerResponse<ServerFrame> {
        let peer = context.remotePeer
        let pass = try enterHelloGate(peer: peer)
        return StreamingServerResponse { [self] writer in
            try await run(frames: request.messages, peer: peer, pass: pass, transport: .grpc) { frame in try await writer.write(frame) }
            return [:]
        }
    }

    /// A place among the streams without Hello, of a few per connection and a few hundred per node.
    /// - Parameter peer: the connection's address.
    /// - Throws: `RPCError` (resource exhausted) when there is no place.
    func enterHelloGate(peer: String) throws(RPCError) -> HelloGate.Pass {
        do { return try helloGate.enter(connection: peer) } catch {
            metrics.transport.helloRefused.increment()
            metrics.rejected.increment()
            var metadata = Metadata()
            metadata.addString("streams-without-hello", forKey: "sotto-error")
            throw RPCError(code: .resourceExhausted, message: error.description, metadata: metadata)
        }
    }

    /// What a frame costs of its key's and project's rate limits, in work units: 1, or n for a report of n
    /// sightings (as sent, valid or not); nil for ending an operation, which is never refused (it only lightens
    /// the load, and a refused client would believe it ended while the service kept it).
    /// - Parameter frame: a frame of a session that said Hello.
    static func rateCost(of frame: ClientFrame) -> Double? {
        switch frame.kind {
        case .unpublish, .unsubscribe, .heartbeat: return nil
        case .observe(let body): return Double(max(1, body.sightings.count))
        default: return 1
        }
    }

    /// The session logic of every transport (gRPC streams, WebSockets): Hello, the key, the session on the host,
    /// the frames both ways, the cut-offs. It ends by returning (the client ended its stream) or by throwing the
    /// `RPCError` that ends the stream; the transport carries the frames and that end, nothing else.
    /// - Parameters:
    ///   - frames: the client's frames, in order.
    ///   - peer: the client's address (for the audit log).
    ///   - pass: the stream's place among the streams without Hello.
    ///   - transport: which transport carries the session (the web transport checks the key's origins).
    ///   - write: sends one frame to the client (waits while the client does not read).
    ///
    /// Memory: each session's tasks (the reader and the writer below) live as long as the session, and a task keeps
    /// the memory its deepest call chain took (slabs of about 1 kB, from `malloc`) until it ends. So the reader and
    /// the writer stay shallow: the Hello's deep work runs in a child task that ends, per-frame work is synchronous,
    /// and the frames' sequence is one concrete type (a generic one's values are allocated from the task at each
    /// use). That took a session from 48 kB to 44 (heaptrack and `scripts/load-node`, in `Benchmarks/README.md`). The
    /// Hello's deadline is the gate's (``HelloGate/enforceDeadlines()``, one task for the node): a timer task here
    /// held 1.7 kB a session for the first 5 s of every session.
    func run(frames: RPCAsyncSequence<ClientFrame, any Error>, peer: String, pass: HelloGate.Pass, transport: SessionTransport,
             write: @escaping @Sendable (ServerFrame) async throws -> Void) async throws {
        let host = self.host, metrics = self.metrics, helloTimeout = limits.helloTimeout
        let outbox = Outbox(limits: host.configuration.outbox)
        let state = StreamState()
        // A stream that never says Hello is closed (its writer ends with the cut-off).
        pass.onExpiry {
            metrics.transport.helloTimeouts.increment()
            outbox.finish(cutOff: .noHello)
        }
        do {  // (a scope only: the body below is what the gRPC response closure once held)
            try await withThrowingTaskGroup(of: Bool.self) { group in
                // Writer: the host's frames for this session, until the session ends or is cut off.
                group.addTask {
                    while let frame = await outbox.next() {
                        try await write(frame)
                        Self.count(sent: frame, state: state, metrics: metrics)
                    }
                    switch outbox.cutOff {
                    case .slowReader: throw RPCError(code: .resourceExhausted, message: "the client did not read its stream")
                    case .silent: throw RPCError(code: .deadlineExceeded, message: "no frame for three heartbeat intervals")
                    case .noHello: throw RPCError(code: .deadlineExceeded, message: "no Hello within \(helloTimeout) s")
                    case .replaced: throw RPCError(code: .aborted, message: "the session was resumed on another stream")
                    case .shutdown: throw RPCError(code: .unavailable, message: "the service is shutting down")
                    case .revoked: throw RPCError(code: .unauthenticated, message: "the API key of this session was revoked")
                    case .databaseUnreachable:
                        throw RPCError(code: .unavailable, message: "this node lost its database: resume the session on another node")
                    case nil: return true
                    }
                }
                // Reader: Hello first, then every frame to the host.
                group.addTask {
                    do {
                        for try await frame in frames {
                            outbox.touch()
                            if let stream = state.stream.withLock({ $0 }) {
                                if let (inbound, cost) = Self.inbound(frame, state: state) {
                                    await host.receive(inbound, cost: cost, stream: stream)
                                }
                                continue
                            }
                            // The first frame, in a task of its own: a task keeps the memory its deepest call needed
                            // for as long as it lives, and this one lives as long as the session, while the Hello's
                            // work (the key checked through the store, the session opened on the host) goes deep once.
                            let service = self
                            try await Self.inTaskOfItsOwn {
                                try await service.hello(frame, peer: peer, pass: pass, transport: transport, state: state,
                                                        outbox: outbox, write: write)
                            }
                        }
                        // The client ended its stream: an explicit end of the session.
                        if let stream = state.stream.withLock({ $0 }) { await host.end(stream: stream) }
                        outbox.finish()
                        return false
                    } catch {
                        // The connection failed (or the stream was refused): the session waits to be resumed.
                        if let stream = state.stream.withLock({ $0 }) { await host.detach(stream: stream) }
                        outbox.finish()
                        throw error
                    }
                }
                var firstError: (any Error)?
                while let result = await group.nextResult() {
                    switch result {
                    case .success(let writerEnded):
                        if writerEnded { group.cancelAll() }  // the stream is over: stop the reader
                    case .failure(let error):
                        if firstError == nil, !(error is CancellationError) { firstError = error }
                        outbox.finish()
                        if let stream = state.stream.withLock({ $0 }) { await host.detach(stream: stream) }
                        group.cancelAll()
                    }
                }
                pass.release()
                if let firstError { throw firstError }
            }
        }
    }

    /// The counters a frame sent to the client moves: found (and the latency from the sighting that led to it)
    /// and rejected operations. Synchronous, so that none of its values lives in the writer's frame.
    static func count(sent frame: ServerFrame, state: StreamState, metrics: ServiceMetrics) {
        switch frame.kind {
        case .found:
            state.project.withLock { $0 }?.found.increment()
            if let since = state.lastSighting.withLock({ last in defer { last = nil }; return last }) {
                let elapsed = (ContinuousClock.now - since).components
                metrics.transport.foundLatency.recordNanoseconds(elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000)
            }
        case .opStatus(let status) where status.state == .rejected:
            state.project.withLock { $0 }?.rejected.increment()
        default:
            break
        }
    }

    /// The edge: a frame of an open session checked into a domain request (what the log holds) or a refusal,
    /// with what it costs of the rate limits; nil for a frame that asks nothing (a heartbeat: liveness only).
    /// Synchronous, so that none of its values lives in the reader's frame between frames.
    static func inbound(_ frame: ClientFrame, state: StreamState) -> (MatcherHost.Inbound, cost: Double?)? {
        switch frame.kind {
        case .heartbeat: return nil
        case .observe(let observe):
            state.project.withLock { $0 }?.sightings.increment(by: observe.sightings.count)
            let now = ContinuousClock.now
            state.lastSighting.withLock { $0 = $0 ?? now }
        default: break
        }
        do throws(FrameRefusal) {
            guard let request = try frame.validatedRequest() else { return nil }
            return (.request(request), rateCost(of: frame))
        } catch {
            return (.refused(error), rateCost(of: frame))
        }
    }

    /// A session's first frame: it must be a Hello, whose work follows; the session's stream and counters are
    /// in `state` when it returns.
    /// - Throws: `RPCError`, the status that ends the stream.
    func hello(_ frame: ClientFrame, peer: String, pass: HelloGate.Pass, transport: SessionTransport, state: StreamState,
               outbox: Outbox, write: @escaping @Sendable (ServerFrame) async throws -> Void) async throws {
        guard case .hello(let hello) = frame.kind else {
            metrics.rejected.increment()
            throw RPCError(code: .failedPrecondition, message: "the first frame of a session must be a Hello")
        }
        // It said Hello: the deadline is met (checking the key is the service's own time), and
        // what remains is bounded by the key checks and the quotas.
        pass.release()
        let opened = try await admit(hello, peer: peer, transport: transport, outbox: outbox, write: write)
        state.stream.withLock { $0 = opened.stream }
        state.project.withLock { $0 = opened.counters }
    }

    /// A Hello's work: the node's database, the key, the transport's admission, the session opened (or
    /// resumed) on the host.
    /// - Returns: the session's stream number on the host and its project's counters.
    /// - Throws: `RPCError`, the status that ends the stream.
    func admit(_ hello: Sotto_Exchange_V1_Hello, peer: String, transport: SessionTransport, outbox: Outbox,
               write: @escaping @Sendable (ServerFrame) async throws -> Void) async throws
        -> (stream: UInt64, counters: TransportMetrics.ProjectCounters) {
        // A node cut off from its database refuses at once (checking the key would wait for
        // the database), so that the client tries another node.
        guard await host.serving else {
            throw RPCError(code: .unavailable, message: "this node cannot reach its database; try another node")
        }
        let key: AuthenticatedKey?
        do { key = try await APIKeys.authenticate(hello.apiKey, in: store) } catch {
            logger.error("store: \(error)")
            throw RPCError(code: .unavailable, message: "the service cannot check keys now: \(error)")
        }
        guard let key else {
            metrics.authenticationFailures.increment()
            metrics.rejected.increment()
            let id = AuditText.keyID(of: hello.apiKey)
            failedAuthentications.log { suppressed in
                let more = suppressed > 0 ? " (\(suppressed) more failures since the last line)" : ""
                logger.warning("audit: authentication failed for key \(id) from \(peer)\(more)")
            }
            throw RPCError(code: .unauthenticated, message: ExchangeError.unauthenticated.description)
        }
        try transport.admit(key, metrics: metrics)
        await host.limit(key: key)
        let resume = hello.resumeSessionID.isEmpty ? nil : (hello.resumeSessionID, Array(hello.resumeSecret))
        do throws(ExchangeError) {
            let opened = try await host.open(key: key, broadcasts: hello.broadcasts, resume: resume, outbox: outbox)
            let counters = metrics.transport.project(key.project.id)
            counters.sessions.increment()
            metrics.transport.sessions(transport.label).increment()
            return (opened.stream, counters)
        } catch {
            if case .sessionQuotaExceeded = error {
                // The refusal as a typed frame (the client stops instead of reconnecting), then
                // the stream's status; the metadata below stays for clients that predate it.
                try? await write(.error(error, fatal: true))
            }
            var metadata = Metadata()
            if case .sessionQuotaExceeded(let limit) = error {
                metadata.addString("session-quota", forKey: "sotto-error")
                metadata.addString("\(limit)", forKey: "sotto-limit")
            }
            if case .unavailable = error { throw RPCError(code: .unavailable, message: error.description) }
            throw RPCError(code: .resourceExhausted, message: error.description, metadata: metadata)
        }
    }

    /// Runs `work` in a child task and returns what it returns: the memory its calls take is the child's
    /// and is given back when it ends, not kept by the calling task for its lifetime.
    static func inTaskOfItsOwn<Result: Sendable>(_ work: @escaping @Sendable () async throws -> Result) async throws -> Result {
        try await withThrowingTaskGroup(of: Result.self) { group in
            group.addTask { try await work() }
            guard let result = try await group.next() else { throw CancellationError() }
            return result
        }
    }
}
