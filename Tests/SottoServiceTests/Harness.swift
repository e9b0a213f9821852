import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import SottoExchange
import SottoExchangeCore
import SottoExchangeClient
import SottoExchangeService
import SottoExchangeWire
import Synchronization
import SottoTestSupport
import Testing

/// A deadline passed while waiting for something.
struct TimedOut: Error, CustomStringConvertible {
    let what: String
    var description: String { "timed out waiting for \(what)" }
}

/// Runs `body`, throwing `TimedOut` after `seconds` (the body is cancelled).
func withDeadline<T: Sendable>(_ seconds: Double, _ what: String = "an operation",
                               _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .seconds(seconds))
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else { throw TimedOut(what: what) }
        return value
    }
}

/// Polls `condition` every 20 ms until it holds or `seconds` pass; returns whether it held.
@discardableResult
func eventually(_ seconds: Double = 5, _ condition: @Sendable () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + .seconds(seconds)
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return await condition()
}

/// A fresh temporary directory (short path: Unix socket paths are limited to about 100 bytes), inside this test
/// process's scratch directory, which is removed when the process exits.
func temporaryDirectory() throws -> String {
    let path = processScratchDirectory("sotto-svc") + "/\(UUID().uuidString.prefix(8))"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// The value of a metric without labels in a Prometheus text exposition (nil when absent).
func metric(_ name: String, in exposition: String) -> Double? {
    for line in exposition.split(separator: "\n") where !line.hasPrefix("#") {
        let parts = line.split(separator: " ")
        if parts.count >= 2, parts[0] == name { return Double(parts[1]) }
    }
    return nil
}

/// A matcher service on loopback or a Unix socket, with its own store (SQLite unless given one: a PostgreSQL
/// store makes it a node that replicates through the database's log), project and key.
final class TestServer: Sendable {
    let directory: String
    let store: any ExchangeStore
    let server: MatcherServer
    let task: Task<Void, any Error>
    /// The bound gRPC address (`HOST:PORT` or `unix:PATH`) and HTTP address, if any.
    let address: MatcherAddress
    let httpAddress: String?
    let project: Project
    let apiKey: String
    /// Run by `stop()` once the server ended (a PostgreSQL store closes its pool there).
    private let onStop: (@Sendable () async -> Void)?

    var metrics: ServiceMetrics { server.metrics }
    func metric(_ name: String) -> Double? { SottoServiceTests.metric(name, in: server.metrics.exposition()) }

    /// Starts a server and waits (at most 10 s) until it listens.
    /// - Parameters:
    ///   - endpoint: default 127.0.0.1:0.
    ///   - reuse: a previous server whose directory, store, project and key to use again (a restart).
    init(endpoint: MatcherAddress = .tcp(host: "127.0.0.1", port: 0), tls: MatcherServer.TLS? = nil,
         metricsEndpoint: MatcherAddress? = nil, configuration: ServiceConfiguration = TestServer.fastConfiguration,
         rate: Double = 10_000, burst: Double = 10_000, reuse: TestServer? = nil,
         clock: any Clock<Duration> = ContinuousClock(), web: WebOptions? = nil, limits: TransportLimits = TransportLimits()) async throws {
        if let reuse {
            directory = reuse.directory
            store = reuse.store
            project = reuse.project
            apiKey = reuse.apiKey
        } else {
            directory = try temporaryDirectory()
            store = try SQLiteStore(path: directory + "/exchange.sqlite")
            project = try await store.createProject(name: "museum-app", maxSessions: 100)
            apiKey = try await store.createKey(project: project.id, label: "test", ratePerSecond: rate, burst: burst).key
        }
        onStop = nil
        (server, task, address, httpAddress) = try await Self.launch(endpoint: endpoint, tls: tls, store: store,
                                                                     metricsEndpoint: metricsEndpoint, configuration: configuration,
                                                                     clock: clock, web: web, limits: limits)
    }

    /// Starts a server on `store`, which holds `project` and `apiKey` already (a node of a ``TestCluster``, or
    /// a server on PostgreSQL, each replicated through the database's log); `onStop` runs when `stop()` has ended it.
    init(store: PostgresStore, project: Project, apiKey: String, configuration: ServiceConfiguration = TestServer.fastConfiguration,
         metricsEndpoint: MatcherAddress? = nil, onStop: (@Sendable () async -> Void)? = nil) async throws {
        directory = ""
        self.store = store
        self.project = project
        self.apiKey = apiKey
        self.onStop = onStop
        (server, task, address, httpAddress) = try await Self.launch(endpoint: .tcp(host: "127.0.0.1", port: 0), tls: nil, store: store,
                                                                     replication: .sharedLog(in: store), metricsEndpoint: metricsEndpoint,
                                                                     configuration: configuration)
    }

    /// A server alone on a fresh database of the shared test PostgreSQL (so it replicates through the log,
    /// as a cluster of one), with its own project and key.
    static func postgres(configuration: ServiceConfiguration = TestServer.fastConfiguration) async throws -> TestServer {
        let store = try await PostgresStore(url: try await PostgresServer.shared().createDatabase())
        do {
            let project = try await store.createProject(name: "museum-app", maxSessions: 100)
            let key = try await store.createKey(project: project.id, label: "test", ratePerSecond: 10_000, burst: 10_000).key
            return try await TestServer(store: store, project: project, apiKey: key, configuration: configuration,
                                        onStop: { await store.shutdown() })
        } catch {
            await store.shutdown()
            throw error
        }
    }

    /// Runs a server and waits (at most 10 s) until it listens.
    private static func launch(endpoint: MatcherAddress, tls: MatcherServer.TLS?, store: any ExchangeStore,
                               replication: Replication = .standalone, metricsEndpoint: MatcherAddress?, configuration: ServiceConfiguration,
                               clock: any Clock<Duration> = ContinuousClock(), web: WebOptions? = nil,
                               limits: TransportLimits = TransportLimits()) async throws
        -> (MatcherServer, Task<Void, any Error>, MatcherAddress, String?) {
        let (listening, continuation) = AsyncStream.makeStream(of: (String, String?).self)
        let server = try MatcherServer(endpoint: endpoint, tls: tls, store: store, replication: replication, metricsEndpoint: metricsEndpoint,
                                       configuration: configuration, limits: limits, web: web, clock: clock) { service, http in
            continuation.yield((service, http))
            continuation.finish()
        }
        let task = Task { try await server.run() }
        let bound = try await withDeadline(10, "the server to listen") { () -> (String, String?)? in
            for await pair in listening { return pair }
            return nil
        }
        guard let bound else { task.cancel(); throw TimedOut(what: "onListening") }
        return (server, task, try MatcherAddress(parsing: bound.0), bound.1)
    }

    /// Short timings for tests.
    static var fastConfiguration: ServiceConfiguration {
        var configuration = ServiceConfiguration()
        configuration.sessionGrace = 3
        configuration.heartbeatInterval = 1
        configuration.tickInterval = 0.05
        configuration.defaultLostTimeout = 2
        return configuration
    }

    var port: Int {
        if case .tcp(_, let port) = address { return port }
        return 0
    }

    /// Another project and key in the same store.
    func otherProjectKey(name: String = "other-app") async throws -> String {
        let other = try await store.createProject(name: name, maxSessions: 100)
        return try await store.createKey(project: other.id, label: "other", ratePerSecond: 10_000, burst: 10_000).key
    }

    /// Cancels the server and waits (at most 10 s) for it to end.
    func stop() async {
        task.cancel()
        let task = self.task
        _ = try? await withDeadline(10, "the server to stop") { _ = try? await task.value; return true }
        await onStop?()
    }

    /// A connected manager of this service (at most 5 s to connect).
    func manager(key: String? = nil, broadcasts: Bool = true, lostTimeout: Double = 2,
                 connections: ConnectionLog? = nil) async throws -> MessageManager {
        let link = try RemoteMatcher(options: .init(endpoint: address, apiKey: key ?? apiKey, broadcasts: broadcasts))
        var onConnection: (@Sendable (MatcherNotice) -> Void)?
        if let connections { onConnection = { notice in connections.append(notice) } }
        let manager = MessageManager(link: link, appID: "test", lostTimeout: lostTimeout, onConnection: onConnection)
        try await manager.connect(timeout: 5)
        return manager
    }
}

/// Notices a manager's link reported (connected, disconnected, failed).
final class ConnectionLog: Sendable {
    private let notices = Mutex<[MatcherNotice]>([])
    func append(_ notice: MatcherNotice) { notices.withLock { $0.append(notice) } }
    var all: [MatcherNotice] { notices.withLock { $0 } }
    var connectedCount: Int { all.filter { if case .connected = $0 { return true } else { return false } }.count }
}

/// Waits (at most `seconds`) until the manager has a token from the service.
func token(of manager: MessageManager, _ seconds: Double = 5) async throws -> [UInt8] {
    let found = await eventually(seconds) { await manager.token != nil }
    guard found, let token = await manager.token else { throw TimedOut(what: "a token") }
    return token
}

/// Collects one subscription's events (through its handler, in order) and waits for them with deadlines.
final class EventRecorder: Sendable {
    private let events = Mutex<[SubscriptionEvent]>([])
    var handler: @Sendable (SubscriptionEvent) -> Void { { event in self.events.withLock { $0.append(event) } } }
    var all: [SubscriptionEvent] { events.withLock { $0 } }
    var found: [Message] { all.compactMap { if case .found(let m) = $0 { return m } else { return nil } } }
    var lost: [Message] { all.compactMap { if case .lost(let m) = $0 { return m } else { return nil } } }
    /// Found and lost only, as a compact text ("F", "L") for order checks.
    var pattern: String { all.compactMap { if case .found = $0 { return "F" } else if case .lost = $0 { return "L" } else { return nil } }.joined() }

    /// Waits (at most `seconds`) until `condition` holds for the events so far.
    @discardableResult
    func wait(_ seconds: Double = 5, until condition: @escaping @Sendable ([SubscriptionEvent]) -> Bool) async -> Bool {
        await eventually(seconds) { condition(self.all) }
    }

    func waitFound(_ count: Int = 1, _ seconds: Double = 5) async -> Bool { await wait(seconds) { events in events.filter { if case .found = $0 { return true } else { return false } }.count >= count } }
    func waitLost(_ count: Int = 1, _ seconds: Double = 5) async -> Bool { await wait(seconds) { events in events.filter { if case .lost = $0 { return true } else { return false } }.count >= count } }
}

/// Collects what an `AsyncSequence` of subscription events yields until `seconds` pass (the handle's
/// `events`, read directly).
func collect(_ events: SubscriptionEvents, for seconds: Double) async -> [SubscriptionEvent] {
    let box = EventRecorder()
    let reader = Task {
        for await event in events { box.handler(event) }
    }
    try? await Task.sleep(for: .seconds(seconds))
    reader.cancel()
    return box.all
}

// MARK: Raw gRPC sessions

/// A service of its own with one raw session that said Hello with the service's key: the set-up of the tests
/// that send the service what the library never would.
struct GreetedSession {
    let service: TestServer
    let client: RawClient
    let session: RawSession

    /// - Throws: `TimedOut` when no Welcome came (the client and the service are stopped first).
    static func start() async throws -> GreetedSession {
        let service = try await TestServer()
        let client = try RawClient(service.address)
        let session = RawSession(client)
        let greeted = GreetedSession(service: service, client: client, session: session)
        guard await session.hello(key: service.apiKey) != nil else {
            await greeted.stop()
            throw TimedOut(what: "the Welcome")
        }
        return greeted
    }

    /// Closes the client and stops the service.
    func stop() async {
        await client.close()
        await service.stop()
    }

    /// ``stop()`` in the background, for a test's `defer`.
    func stopLater() { Task { await stop() } }
}

/// A gRPC client of the exchange service, its connections run in a task.
final class RawClient: Sendable {
    let grpc: GRPCClient<HTTP2ClientTransport.Posix>
    let exchange: Sotto_Exchange_V1_Exchange.Client<HTTP2ClientTransport.Posix>
    let runner: Task<Void, Never>

    init(_ address: MatcherAddress, windowSize: Int? = nil) throws {
        let target: any ResolvableTarget
        switch address {
        case .tcp(let host, let port): target = .ipv4(address: host, port: port)
        case .unix(let path): target = .unixDomainSocket(path: path)
        }
        let transport = try HTTP2ClientTransport.Posix(target: target, transportSecurity: .plaintext, config: .defaults { config in
            if let windowSize { config.http2.targetWindowSize = windowSize }
        })
        grpc = GRPCClient(transport: transport)
        exchange = Sotto_Exchange_V1_Exchange.Client(wrapping: grpc)
        let grpc = self.grpc
        runner = Task { try? await grpc.runConnections() }
    }

    /// Drops every connection at once (no graceful shutdown, no clean end of the streams).
    func kill() { runner.cancel() }

    func close() async {
        grpc.beginGracefulShutdown()
        runner.cancel()
        let runner = self.runner
        _ = try? await withDeadline(5, "the client to close") { await runner.value; return true }
    }
}

/// One session stream, driven by hand: frames out through `send`, frames in collected (unless `reads` is
/// false: then the response stream is never read), and how the stream ended.
final class RawSession: Sendable {
    let outbound: AsyncStream<ClientFrame>.Continuation
    final class State: Sendable {
        let received = Mutex<[ServerFrame]>([])
        let outcome = Mutex<(any Error)??>(nil)
        /// Heartbeats start once something was sent (the first frame must stay the test's own).
        let started = Mutex<Bool>(false)
        /// Barriers sent so far (`settled`).
        let barriers = Mutex<UInt32>(0)
    }
    private let state = State()
    let task: Task<Void, Never>
    let heartbeat: Task<Void, Never>

    /// - Parameter heartbeats: sends a Heartbeat every 0.5 s (the service cuts off silent sessions).
    init(_ client: RawClient, reads: Bool = true, heartbeats: Bool = true) {
        let (frames, outbound) = AsyncStream.makeStream(of: ClientFrame.self)
        self.outbound = outbound
        let state = self.state
        let exchange = client.exchange
        var options = CallOptions.defaults
        options.maxResponseMessageBytes = 4 << 20
        options.maxRequestMessageBytes = 4 << 20
        let callOptions = options
        task = Task {
            do {
                try await exchange.session(options: callOptions, requestProducer: { writer in
                    for await frame in frames { try await writer.write(frame) }
                    // Cancelled (a dropped connection): never a clean end of the request stream.
                    if Task.isCancelled { throw CancellationError() }
                }, onResponse: { response in
                    if reads {
                        for try await frame in response.messages { state.received.withLock { $0.append(frame) } }
                    } else {
                        // Never reads: wait until cancelled.
                        while !Task.isCancelled { try await Task.sleep(for: .seconds(60)) }
                    }
                })
                state.outcome.withLock { $0 = .some(nil) }
            } catch {
                state.outcome.withLock { $0 = .some(error) }
            }
        }
        heartbeat = Task { [outbound] in
            while heartbeats && !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(500))
                if state.started.withLock({ $0 }) { outbound.yield(RawSession.heartbeatFrame) }
            }
        }
    }

    func send(_ frame: ClientFrame) {
        state.started.withLock { started in
            started = true
            outbound.yield(frame)
        }
    }

    static var heartbeatFrame: ClientFrame {
        var frame = ClientFrame()
        frame.kind = .heartbeat(Sotto_Exchange_V1_Heartbeat())
        return frame
    }
    func finish() { outbound.finish() }
    var frames: [ServerFrame] { state.received.withLock { $0 } }
    /// nil while running; then .some(nil) for a clean end or .some(error).
    var ended: (any Error)?? { state.outcome.withLock { $0 } }

    /// The first frame received matching `predicate`, waiting at most `seconds`.
    func frame(_ seconds: Double = 5, where predicate: @escaping @Sendable (ServerFrame) -> Bool) async -> ServerFrame? {
        await eventually(seconds) { self.frames.contains(where: predicate) }
        return frames.first(where: predicate)
    }

    /// The operation status for `op`, waiting at most `seconds`.
    func status(_ op: UInt32, _ seconds: Double = 5) async -> Sotto_Exchange_V1_OperationStatus? {
        let frame = await frame(seconds) { if case .opStatus(let s) = $0.kind { return s.opID == op } else { return false } }
        if case .opStatus(let status)? = frame?.kind { return status }
        return nil
    }

    /// Returns once the service has handled every frame this session sent before, and this session has received
    /// every frame the service routed to it before that (what other sessions' frames, handled earlier, caused):
    /// an Unsubscribe of an operation that never existed (ids from 0xFFFF_0000 on, never the tests' own) is
    /// answered, rejected, in order after them. What a test finds missing then did not come, rather than not yet.
    /// - Returns: false when the answer did not come within `seconds`.
    @discardableResult
    func settled(_ seconds: Double = 5) async -> Bool {
        let op = state.barriers.withLock { count in
            count += 1
            return 0xFFFF_0000 + count
        }
        send(Frames.unsubscribe(op))
        return await status(op, seconds) != nil
    }

    /// How the stream ended, waiting at most `seconds` (nil: still running).
    func end(_ seconds: Double = 5) async -> (any Error)?? {
        await eventually(seconds) { self.ended != nil }
        return ended
    }

    /// Sends a Hello and waits for the Welcome (at most 5 s).
    @discardableResult
    func hello(key: String, broadcasts: Bool = true) async -> Sotto_Exchange_V1_Welcome? {
        send(.hello(key: key, broadcasts: broadcasts, clientVersion: "raw-test"))
        let welcome = await self.frame { if case .welcome = $0.kind { return true } else { return false } }
        if case .welcome(let body)? = welcome?.kind { return body }
        return nil
    }

    func cancel() { heartbeat.cancel(); outbound.finish(); task.cancel() }

    /// Cancels the RPC. Note: grpc-swift's client half-closes the request stream first, so the service
    /// sees a clean end of the session; `RawClient.kill()` drops the connection instead.
    func drop() { heartbeat.cancel(); task.cancel() }
}

/// Frame builders.
enum Frames {
    static func publish(_ op: UInt32, namespace: String = "museum", type: String = "exhibit", content: [UInt8],
                        ttl: UInt32 = 0, mode: Sotto_Exchange_V1_DiscoveryMode = .both) -> ClientFrame {
        var body = Sotto_Exchange_V1_Publish()
        body.opID = op
        body.message.namespace = namespace
        body.message.type = type
        body.message.content = Data(content)
        body.strategy.ttlSeconds = ttl
        body.strategy.mode = mode
        var frame = ClientFrame()
        frame.kind = .publish(body)
        return frame
    }

    static func unpublish(_ op: UInt32) -> ClientFrame {
        var body = Sotto_Exchange_V1_Unpublish()
        body.opID = op
        var frame = ClientFrame()
        frame.kind = .unpublish(body)
        return frame
    }

    static func subscribe(_ op: UInt32, includes: [Sotto_Exchange_V1_FilterInclude]? = nil, lostTimeoutMs: UInt32 = 0) -> ClientFrame {
        var body = Sotto_Exchange_V1_Subscribe()
        body.opID = op
        if let includes { body.includes = includes } else {
            var include = Sotto_Exchange_V1_FilterInclude()
            include.kind = .namespacedType
            include.namespace = "museum"
            include.type = "exhibit"
            body.includes = [include]
        }
        body.lostTimeoutMs = lostTimeoutMs
        var frame = ClientFrame()
        frame.kind = .subscribe(body)
        return frame
    }

    static func unsubscribe(_ op: UInt32) -> ClientFrame {
        var body = Sotto_Exchange_V1_Unsubscribe()
        body.opID = op
        var frame = ClientFrame()
        frame.kind = .unsubscribe(body)
        return frame
    }

    static func observe(token: [UInt8]) -> ClientFrame {
        var sighting = Sotto_Exchange_V1_Sighting()
        sighting.frame = Data(Payload.token(token).frameBytes)
        sighting.snrDb = 20
        sighting.levelDbfs = -30
        var body = Sotto_Exchange_V1_Observe()
        body.sightings = [sighting]
        var frame = ClientFrame()
        frame.kind = .observe(body)
        return frame
    }
}

extension ServerFrame {
    var isFound: Bool { if case .found = kind { return true } else { return false } }
    var isLost: Bool { if case .lost = kind { return true } else { return false } }
    var tokenDirective: [UInt8]? { if case .token(let body) = kind { return Array(body.token) } else { return nil } }
}

/// The exhibit message of the tests: `museum/exhibit`, 37 bytes.
let exhibit = try! Message(namespace: "museum", type: "exhibit", content: Array("The Night Watch, Rembrandt, 1642 oil.".utf8))
let exhibitFilter = try! MessageFilter([.namespacedType(namespace: "museum", type: "exhibit")])

/// Loopback bytes that a subscription hears: the decoded modem frame of a token.
func heard(_ manager: MessageManager, token: [UInt8]) async {
    await manager.heard(frame: Payload.token(token).frameBytes, snr: 20, level: -30, now: 0)
}

/// Keeps handles alive until this call (a released handle cancels its operation).
func keep(_ handles: Any?...) { withExtendedLifetime(handles) {} }

extension ClientFrame {
    /// A Hello frame with `key`, as the tests' raw clients (gRPC streams and WebSockets) open a session.
    static func hello(key: String, broadcasts: Bool = true, clientVersion: String) -> ClientFrame {
        var hello = Sotto_Exchange_V1_Hello()
        hello.apiKey = key
        hello.broadcasts = broadcasts
        hello.clientVersion = clientVersion
        var frame = ClientFrame()
        frame.kind = .hello(hello)
        return frame
    }
}
