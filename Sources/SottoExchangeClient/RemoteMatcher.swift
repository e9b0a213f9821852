import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import Logging
import SottoExchange
import SottoExchangeCore
import SottoExchangeWire
import Synchronization

/// A session of a remote matcher (`sotto serve`) over one gRPC stream: give it to
/// `MessageManager.init(link:appID:lostTimeout:consent:onConnection:)` and the manager works
/// as with an embedded core. The link reconnects with back-off (0.2 s doubling to 5 s, with jitter), resumes
/// its session when the service still holds it, and sends its live operations again otherwise; the manager
/// keeps found and lost alternating across it. Given several nodes of one service (sharing a PostgreSQL), it
/// tries them in turn: after each failure (a refused connection, a stream that ended or was cut off) it
/// moves to the next, so a client of a node that died or lost its database resumes its session on another.
public final class RemoteMatcher: MatcherLink, Sendable {
    /// How to reach and authenticate to the service.
    public struct Options: Sendable {
        /// The service's nodes in the order they are tried: the first one first, then the next one after each
        /// failure, round the list. Never empty.
        public var endpoints: [MatcherAddress]
        /// The first endpoint; setting it leaves only that one.
        public var endpoint: MatcherAddress {
            get { endpoints[0] }
            set { endpoints = [newValue] }
        }
        public var apiKey: String
        /// TLS: nil for plaintext (loopback and Unix sockets only).
        public var tls: TLSOptions?
        /// Whether this session plays a token (false: scan-only device).
        public var broadcasts: Bool
        public var clientVersion: String
        /// First and longest wait between reconnection attempts (s).
        public var backoff: ClosedRange<Double> = 0.2...5
        /// Allows sending the API key in plaintext to an endpoint beyond loopback and Unix sockets (anyone on
        /// the path can read it then). False: such an endpoint without TLS is refused.
        public var insecure = false

        /// Refuses plaintext to an endpoint that is not loopback or a Unix socket, unless ``insecure`` is set.
        /// - Throws: ``PlaintextKeyRefused`` naming the first such endpoint.
        public func checkKeyTransport() throws(PlaintextKeyRefused) {
            guard tls == nil, !insecure, let remote = endpoints.first(where: { !$0.isLocal }) else { return }
            throw PlaintextKeyRefused(endpoint: remote)
        }

        public init(endpoint: MatcherAddress, apiKey: String, tls: TLSOptions? = nil, broadcasts: Bool = true,
                    clientVersion: String = "sotto-swift") {
            self.init(endpoints: [endpoint], apiKey: apiKey, tls: tls, broadcasts: broadcasts, clientVersion: clientVersion)
        }

        /// Several nodes of one service, tried in this order.
        public init(endpoints: [MatcherAddress], apiKey: String, tls: TLSOptions? = nil, broadcasts: Bool = true,
                    clientVersion: String = "sotto-swift") {
            precondition(!endpoints.isEmpty, "a remote matcher needs at least one endpoint")
            self.endpoints = endpoints
            self.apiKey = apiKey
            self.tls = tls
            self.broadcasts = broadcasts
            self.clientVersion = clientVersion
        }
    }

    /// The API key would go in plaintext to an endpoint beyond this machine.
    public struct PlaintextKeyRefused: Error, Sendable, CustomStringConvertible {
        /// The first endpoint that is neither loopback nor a Unix socket.
        public let endpoint: MatcherAddress
        /// Why, and what to do instead.
        public var description: String {
            "\(endpoint) is not loopback or a Unix socket and no TLS was asked for: the API key would cross the network "
                + "in plaintext. Use TLS (sottos://, --tls or --ca) or, knowingly, --insecure"
        }
    }

    /// TLS for the connection: the service's certificate is verified against `trustRoots` (PEM file), or
    /// the system's roots when nil.
    public struct TLSOptions: Sendable {
        public var trustRoots: String?
        public init(trustRoots: String? = nil) { self.trustRoots = trustRoots }
    }

    /// What `run()` reacts to, one at a time, in order.
    private enum Input: Sendable {
        /// Open a stream (at start, and after a back-off).
        case connect
        case send(MatcherRequest)
        case close
        case welcomed(attempt: UInt64, Sotto_Exchange_V1_Welcome)
        /// A notice of the current stream, passed on in the order it came.
        case notice(MatcherNotice)
        case heartbeatTick(attempt: UInt64)
        case streamEnded(attempt: UInt64, StateMachine.StreamOutcome)
        case goAwayTimedOut(attempt: UInt64)
    }

    public let notices: AsyncStream<MatcherNotice>
    private let continuation: AsyncStream<MatcherNotice>.Continuation
    private let input: (stream: AsyncStream<Input>, continuation: AsyncStream<Input>.Continuation)
    private let options: Options
    /// One client per endpoint, in the order of `options.endpoints`.
    private let clients: [GRPCClient<HTTP2ClientTransport.Posix>]
    private let logger: Logger
    /// The task running `run()`, which `close()` awaits.
    private let runner = Mutex<Task<Void, Never>?>(nil)
    /// How long a closing session's stream may take to end before it is cut (s).
    static let goAwayGrace = 2.0

    /// Starts connecting at once.
    /// - Throws: when an endpoint cannot be used (a malformed address), or none is given.
    public init(options: Options, logger: Logger = Logger(label: "sotto.client")) throws {
        guard !options.endpoints.isEmpty else { throw ExchangeError.unavailable("no endpoint to connect to") }
        try options.checkKeyTransport()
        self.options = options
        self.logger = logger
        (notices, continuation) = AsyncStream.makeStream(of: MatcherNotice.self)
        input = AsyncStream.makeStream(of: Input.self)
        clients = try options.endpoints.map { try Self.client(for: $0, tls: options.tls) }
        input.continuation.yield(.connect)
        let task = Task { [self] in await self.run() }
        runner.withLock { $0 = task }
    }

    /// A gRPC client of one endpoint (it connects when first used).
    private static func client(for endpoint: MatcherAddress, tls: TLSOptions?) throws -> GRPCClient<HTTP2ClientTransport.Posix> {
        let target: any ResolvableTarget
        switch endpoint {
        case .tcp(let host, let port):
            if host.contains(":") { target = .ipv6(address: host, port: port) }
            else if host.split(separator: ".").count == 4, host.allSatisfy({ $0.isNumber || $0 == "." }) { target = .ipv4(address: host, port: port) }
            else { target = .dns(host: host, port: port) }
        case .unix(let path): target = .unixDomainSocket(path: path)
        }
        let security: HTTP2ClientTransport.Posix.TransportSecurity
        if let tls {
            security = .tls { config in
                if let roots = tls.trustRoots { config.trustRoots = .certificates([.file(path: roots, format: .pem)]) }
            }
        } else {
            security = .plaintext
        }
        let transport = try HTTP2ClientTransport.Posix(target: target, transportSecurity: security, config: .defaults { config in
            config.backoff.initial = .milliseconds(200)
            config.backoff.max = .seconds(5)
        })
        return GRPCClient(transport: transport)
    }

    public func send(_ request: MatcherRequest) async {
        input.continuation.yield(.send(request))
    }

    /// Ends the session: a welcomed session's stream is ended cleanly (the service then ends the session at
    /// once), given 2 s to do so. Returns when the link has shut down.
    public func close() async {
        input.continuation.yield(.close)
        await runner.withLock { $0 }?.value
    }

    /// The link's life: consumes the inputs, drives the state machine and does what it says, until it is
    /// shut down (closed, refused) or cancelled.
    private func run() async {
        var machine = StateMachine(endpoints: clients.count, backoff: options.backoff)
        var heartbeat = ClientFrame()
        heartbeat.kind = .heartbeat(Sotto_Exchange_V1_Heartbeat())
        await withDiscardingTaskGroup { group in
            for client in clients { group.addTask { try? await client.runConnections() } }
            inputs: for await input in input.stream {
                switch input {
                case .connect:
                    if let open = machine.connect() { startStream(open, in: &group) }
                case .send(let request):
                    machine.send(request)?.yield(ClientFrame(request))
                case .welcomed(let attempt, let welcome):
                    let outcome = machine.welcomed(attempt: attempt, sessionID: welcome.sessionID,
                                                   secret: Array(welcome.resumeSecret), resumed: welcome.resumed)
                    if case .connected(let resumed, let replay, let writer) = outcome {
                        continuation.yield(.connected(resumed: resumed))
                        for request in replay { writer.yield(ClientFrame(request)) }
                    }
                case .notice(let notice):
                    continuation.yield(notice)
                case .heartbeatTick(let attempt):
                    machine.heartbeatTick(attempt: attempt)?.yield(heartbeat)
                case .streamEnded(let attempt, let outcome):
                    switch machine.streamEnded(attempt: attempt, outcome, jitter: Double.random(in: 0.75...1.25)) {
                    case .none:
                        break
                    case .backOff(let reason, let wait, let failed, let next):
                        continuation.yield(.disconnected(reason: reason))
                        logger.info("matcher connection to \(options.endpoints[failed]) lost (\(reason)); \(options.endpoints[next]) in \(String(format: "%.1f", wait)) s")
                        // Cancelled with the group when the link shuts down meanwhile.
                        group.addTask { [input = self.input.continuation] in
                            guard (try? await Task.sleep(for: .seconds(wait))) != nil else { return }
                            input.yield(.connect)
                        }
                    case .fail(let error):
                        continuation.yield(.failed(error))
                        break inputs
                    case .finish:
                        break inputs
                    }
                case .close:
                    switch machine.close() {
                    case .none:
                        break
                    case .finish(let writer):
                        writer?.finish()
                        break inputs
                    case .goAway(let writer, let attempt):
                        writer.finish()
                        group.addTask { [input = self.input.continuation] in
                            guard (try? await Task.sleep(for: .seconds(Self.goAwayGrace))) != nil else { return }
                            input.yield(.goAwayTimedOut(attempt: attempt))
                        }
                    }
                case .goAwayTimedOut(let attempt):
                    if machine.goAwayTimedOut(attempt: attempt) { break inputs }
                }
            }
            // Shut down: later inputs are dropped, streams and timers cancelled, connections closed.
            input.continuation.finish()
            for client in clients { client.beginGracefulShutdown() }
            group.cancelAll()
        }
        continuation.finish()
    }

    /// Runs stream `open` in `group`; its end becomes a `streamEnded` input.
    private func startStream(_ open: StateMachine.Open, in group: inout DiscardingTaskGroup) {
        let client = clients[open.attempt.endpoint]
        group.addTask {
            let outcome = await self.stream(open, on: client)
            self.input.continuation.yield(.streamEnded(attempt: open.attempt.id, outcome))
        }
    }

    /// One stream on `client`, from Hello until it ends: its frames become inputs.
    private func stream(_ open: StateMachine.Open, on client: GRPCClient<HTTP2ClientTransport.Posix>) async -> StateMachine.StreamOutcome {
        var hello = Sotto_Exchange_V1_Hello()
        hello.apiKey = options.apiKey
        hello.clientVersion = options.clientVersion
        hello.broadcasts = options.broadcasts
        hello.resumeSessionID = open.resumeID
        hello.resumeSecret = Data(open.resumeSecret)
        var helloFrameDraft = ClientFrame()
        helloFrameDraft.kind = .hello(hello)
        let helloFrame = helloFrameDraft
        let attempt = open.attempt.id, outbound = open.outbound, input = self.input.continuation, logger = self.logger
        // A fatal Error frame (the service refused the session) comes just before the stream's end.
        let refusal = Mutex<ExchangeError?>(nil)
        let exchange = Sotto_Exchange_V1_Exchange.Client(wrapping: client)
        var callOptions = CallOptions.defaults
        // One endpoint: wait for it to come back. Several: one that cannot be reached fails the attempt at
        // once, and the next is tried.
        callOptions.waitForReady = clients.count == 1
        callOptions.maxResponseMessageBytes = 4 << 20
        defer { open.attempt.writer.finish() }
        do {
            try await exchange.session(options: callOptions, requestProducer: { requests in
                try await requests.write(helloFrame)
                for await frame in outbound { try await requests.write(frame) }
            }, onResponse: { response in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for try await frame in response.messages {
                        switch frame.kind {
                        case .welcome(let welcome):
                            input.yield(.welcomed(attempt: attempt, welcome))
                            // Ticks at half the interval; the state machine sends a heartbeat into silences only.
                            let interval = max(0.5, Double(welcome.heartbeatIntervalMs) / 1000)
                            group.addTask {
                                while (try? await Task.sleep(for: .seconds(interval / 2))) != nil {
                                    input.yield(.heartbeatTick(attempt: attempt))
                                }
                            }
                        case .error(let error):
                            if error.fatal { refusal.withLock { $0 = error.wireError.exchangeError } }
                            logger.warning("matcher: \(error.message)")
                        default:
                            if let notice = frame.notice { input.yield(.notice(notice)) }
                        }
                    }
                    group.cancelAll()
                }
            })
            if let refused = refusal.withLock({ $0 }) { return .refused(refused) }
            return .ended("the service ended the session stream")
        } catch {
            if let refused = refusal.withLock({ $0 }) { return .refused(refused) }
            if let rpc = error as? RPCError {
                // gRPC's own status codes: the key is wrong or revoked.
                if rpc.code == .unauthenticated || rpc.code == .permissionDenied { return .refused(.unauthenticated) }
                return .ended("\(rpc.code): \(rpc.message)")
            }
            return .ended("\(error)")
        }
    }
}
