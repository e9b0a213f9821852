import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import Logging
import SottoExchange
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

    private struct State {
        /// Live operations, in the order they were made (sent again on a new session).
        var operations: [(OperationID, MatcherRequest)] = []
        var outbound: AsyncStream<ClientFrame>.Continuation?
        var welcomed = false
        var session = ""
        var secret: [UInt8] = []
        var closed = false
        /// Operations ended while the link was down: the resumed session still has them.
        var endedWhileDown: [MatcherRequest] = []
        /// The session's last TakeTurns (sent again on a new session); nil: none, or it stopped.
        var takeTurns: MatcherRequest?
        /// When a frame was last sent (heartbeats only fill silences).
        var lastSent = ContinuousClock.now
    }

    public let notices: AsyncStream<MatcherNotice>
    private let continuation: AsyncStream<MatcherNotice>.Continuation
    private let state = Mutex(State())
    private let options: Options
    /// One client per endpoint, in the order of `options.endpoints`.
    private let clients: [GRPCClient<HTTP2ClientTransport.Posix>]
    private let logger: Logger
    private let runner = Mutex<Task<Void, Never>?>(nil)

    /// Starts connecting at once.
    /// - Throws: when an endpoint cannot be used (a malformed address), or none is given.
    public init(options: Options, logger: Logger = Logger(label: "sotto.client")) throws {
        guard !options.endpoints.isEmpty else { throw ExchangeError.unavailable("no endpoint to connect to") }
        try options.checkKeyTransport()
        self.options = options
        self.logger = logger
        (notices, continuation) = AsyncStream.makeStream(of: MatcherNotice.self)
        clients = try options.endpoints.map { try Self.client(for: $0, tls: options.tls) }
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
        state.withLock { state in
            switch request {
            case .publish(let op, _, _), .subscribe(let op, _, _, _):
                state.operations.removeAll { $0.0 == op }
                state.operations.append((op, request))
            case .unpublish(let op), .unsubscribe(let op):
                let wasLive = state.operations.contains { $0.0 == op }
                state.operations.removeAll { $0.0 == op }
                if !state.welcomed && wasLive { state.endedWhileDown.append(request) }
            case .observe:
                break
            case .takeTurns(let airtime):
                state.takeTurns = airtime > 0 ? request : nil
            }
            // While not welcomed, operations wait to be sent with the others; sightings are dropped.
            if state.welcomed {
                state.outbound?.yield(ClientFrame(request))
                state.lastSent = ContinuousClock.now
            }
        }
    }

    public func close() async {
        let task = state.withLock { state -> Task<Void, Never>? in
            state.closed = true
            state.outbound?.finish()
            return runner.withLock { $0 }
        }
        // Give the stream a moment to end cleanly (the service then ends the session at once).
        let deadline = ContinuousClock.now + .seconds(2)
        while ContinuousClock.now < deadline, state.withLock({ $0.welcomed }) { try? await Task.sleep(for: .milliseconds(10)) }
        for client in clients { client.beginGracefulShutdown() }
        task?.cancel()
        await task?.value
    }

    private var isClosed: Bool { state.withLock { $0.closed } }

    private func run() async {
        await withDiscardingTaskGroup { group in
            for client in clients { group.addTask { try? await client.runConnections() } }
            var delay = options.backoff.lowerBound
            var index = 0
            while !isClosed && !Task.isCancelled {
                let outcome = await attempt(clients[index])
                if isClosed || Task.isCancelled { break }
                switch outcome {
                case .fatal(let error):
                    continuation.yield(.failed(error))
                    state.withLock { $0.closed = true }
                case .transient(let reason, let wasWelcomed):
                    continuation.yield(.disconnected(reason: reason))
                    if wasWelcomed { delay = options.backoff.lowerBound }
                    let wait = delay * Double.random(in: 0.75...1.25)
                    let failed = options.endpoints[index]
                    index = (index + 1) % clients.count
                    logger.info("matcher connection to \(failed) lost (\(reason)); \(options.endpoints[index]) in \(String(format: "%.1f", wait)) s")
                    try? await Task.sleep(for: .seconds(wait))
                    delay = min(delay * 2, options.backoff.upperBound)
                }
            }
            for client in clients { client.beginGracefulShutdown() }
        }
        continuation.finish()
    }

    private enum Outcome {
        case fatal(ExchangeError)
        case transient(String, welcomed: Bool)
    }

    /// One stream on `client`, from Hello until it ends.
    private func attempt(_ client: GRPCClient<HTTP2ClientTransport.Posix>) async -> Outcome {
        let (outbound, writer) = AsyncStream.makeStream(of: ClientFrame.self)
        var hello = Sotto_Exchange_V1_Hello()
        hello.apiKey = options.apiKey
        hello.clientVersion = options.clientVersion
        hello.broadcasts = options.broadcasts
        state.withLock { state in
            state.outbound = writer
            state.welcomed = false
            hello.resumeSessionID = state.session
            hello.resumeSecret = Data(state.secret)
        }
        var helloFrameDraft = ClientFrame()
        helloFrameDraft.kind = .hello(hello)
        let helloFrame = helloFrameDraft
        let reachedWelcome = Atomic<Bool>(false)
        let exchange = Sotto_Exchange_V1_Exchange.Client(wrapping: client)
        var callOptions = CallOptions.defaults
        // One endpoint: wait for it to come back. Several: one that cannot be reached fails the attempt at
        // once, and the next is tried.
        callOptions.waitForReady = clients.count == 1
        callOptions.maxResponseMessageBytes = 4 << 20
        do {
            try await exchange.session(options: callOptions, requestProducer: { requests in
                try await requests.write(helloFrame)
                for await frame in outbound { try await requests.write(frame) }
            }, onResponse: { response in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for try await frame in response.messages {
                        if case .welcome(let welcome) = frame.kind {
                            reachedWelcome.store(true, ordering: .relaxed)
                            self.welcomed(welcome, writer: writer)
                            let interval = max(0.5, Double(welcome.heartbeatIntervalMs) / 1000)
                            group.addTask {
                                // A heartbeat only when nothing else was sent for an interval.
                                var beat = ClientFrame()
                                beat.kind = .heartbeat(Sotto_Exchange_V1_Heartbeat())
                                while !Task.isCancelled {
                                    try await Task.sleep(for: .seconds(interval / 2))
                                    let idle = self.state.withLock { ContinuousClock.now - $0.lastSent >= .seconds(interval) }
                                    if idle {
                                        writer.yield(beat)
                                        self.state.withLock { $0.lastSent = ContinuousClock.now }
                                    }
                                }
                            }
                            continue
                        }
                        if case .error(let error) = frame.kind {
                            self.logger.warning("matcher: \(error.message)")
                            continue
                        }
                        if let notice = frame.notice { self.continuation.yield(notice) }
                    }
                    group.cancelAll()
                }
            })
            writer.finish()
            state.withLock { $0.welcomed = false; $0.outbound = nil }
            return .transient("the service ended the session stream", welcomed: reachedWelcome.load(ordering: .relaxed))
        } catch {
            writer.finish()
            state.withLock { $0.welcomed = false; $0.outbound = nil }
            if let rpc = error as? RPCError {
                if rpc.code == .unauthenticated { return .fatal(.unauthenticated) }
                if rpc.code == .permissionDenied { return .fatal(.unauthenticated) }
                if rpc.metadata[stringValues: "sotto-error"].contains(where: { $0 == "session-quota" }) {
                    return .fatal(.sessionQuotaExceeded(Int(rpc.metadata[stringValues: "sotto-limit"].first(where: { _ in true }) ?? "") ?? 0))
                }
                return .transient("\(rpc.code): \(rpc.message)", welcomed: reachedWelcome.load(ordering: .relaxed))
            }
            return .transient("\(error)", welcomed: reachedWelcome.load(ordering: .relaxed))
        }
    }

    /// The service took the session: remember how to resume it and send the live operations.
    private func welcomed(_ welcome: Sotto_Exchange_V1_Welcome, writer: AsyncStream<ClientFrame>.Continuation) {
        continuation.yield(.connected(resumed: welcome.resumed))
        state.withLock { state in
            state.session = welcome.sessionID
            state.secret = Array(welcome.resumeSecret)
            state.welcomed = true
            // A resumed session still holds what ended meanwhile; a new one never had it.
            if welcome.resumed { for request in state.endedWhileDown { writer.yield(ClientFrame(request)) } }
            state.endedWhileDown = []
            for (_, request) in state.operations { writer.yield(ClientFrame(request)) }
            if let turns = state.takeTurns { writer.yield(ClientFrame(turns)) }
        }
    }
}

