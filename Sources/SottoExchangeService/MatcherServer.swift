import CoreMetrics
import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import SottoExchangeCore
import SottoExchangeWire

/// What `sotto serve` runs: the gRPC exchange service on a TCP port or a Unix socket, the matcher host, the
/// beacon registry kept in step with the store, and an optional HTTP endpoint for `/metrics` (Prometheus),
/// `/ready` and `/health`. A `Service` of swift-service-lifecycle: SIGTERM or SIGINT ends it gracefully.
public struct MatcherServer: Service {
    /// TLS material (PEM files).
    public struct TLS: Sendable {
        public let certificateChain: String
        public let privateKey: String
        public init(certificateChain: String, privateKey: String) {
            self.certificateChain = certificateChain
            self.privateKey = privateKey
        }
    }

    public let endpoint: MatcherAddress
    public let tls: TLS?
    public let store: any ExchangeStore
    /// Alone, or replicated through a log shared with other nodes.
    public let replication: Replication
    public let metricsEndpoint: MatcherAddress?
    public let configuration: ServiceConfiguration
    public let host: MatcherHost
    public let metrics: ServiceMetrics
    /// Bounds on what peers can make the transport hold (connections, streams, time before Hello).
    public let limits: TransportLimits
    /// The browser transport (a WebSocket listener, and the page), if any.
    public let web: WebOptions?
    /// The admin API's listener (`--admin`), if any.
    public let admin: AdminOptions?
    /// This process's id among the nodes sharing live counters (fresh at each start, so that a restarted node's
    /// counters, counted from zero again, are not taken for the old ones).
    public let liveNode = "n_" + APIKeys.hex((0..<8).map { _ in UInt8.random(in: 0...255) })
    /// How often a node of a shared log shares its live counters (s).
    public static let liveSharingInterval = 1.0
    let logger: Logger
    /// Called with the bound address of the gRPC service and, if any, of the HTTP endpoint.
    let onListening: @Sendable (_ service: String, _ http: String?) -> Void
    /// Largest client frame accepted (bytes): a 100 KiB message plus its envelope.
    public static let maxRequestPayloadSize = 128 * 1024

    /// - Parameters:
    ///   - endpoint: where the gRPC service listens.
    ///   - tls: certificate and key; required beyond loopback.
    ///   - store: projects, keys and beacons.
    ///   - replication: ``Replication/standalone``, or the log that the nodes of one database share
    ///     (``Replication/sharedLog(in:)``).
    ///   - metricsEndpoint: where the HTTP endpoint listens, if anywhere.
    ///   - configuration: the matcher's timings and bounds.
    ///   - limits: the transport's bounds (connections, streams, time before Hello).
    ///   - web: the browser transport's listener and page, if any (TLS needed beyond loopback).
    ///   - admin: the admin API's listener, if any (TLS needed beyond loopback).
    ///   - logger: where the service logs.
    ///   - clock: the matcher host's time (its timers, session grace, lost timeouts); a manual clock in tests.
    ///     Transport deadlines, silence and the database's I/O stay on real time.
    ///   - onListening: called with the bound addresses.
    /// - Throws: `MatcherServerError.tlsRequired` for a non-loopback address without TLS, `.socketPath` for a
    ///   Unix socket path taken by anything but a stale socket.
    public init(endpoint: MatcherAddress, tls: TLS?, store: any ExchangeStore, replication: Replication = .standalone,
                metricsEndpoint: MatcherAddress? = nil,
                configuration: ServiceConfiguration = ServiceConfiguration(), limits: TransportLimits = TransportLimits(),
                web: WebOptions? = nil, admin: AdminOptions? = nil, logger: Logger = Logger(label: "sotto.serve"), clock: any Clock<Duration> = ContinuousClock(),
                onListening: @escaping @Sendable (_ service: String, _ http: String?) -> Void = { _, _ in }) throws(MatcherServerError) {
        guard tls != nil || endpoint.isLocal else { throw .tlsRequired(endpoint.description) }
        if let metricsEndpoint, !metricsEndpoint.isLocal, tls == nil { throw .tlsRequired(metricsEndpoint.description) }
        if let web, !web.endpoint.isLocal, tls == nil { throw .tlsRequired(web.endpoint.description) }
        if let admin, !admin.endpoint.isLocal, tls == nil { throw .tlsRequired(admin.endpoint.description) }
        if let grpc = admin?.grpcEndpoint, !grpc.isLocal, tls == nil { throw .tlsRequired(grpc.description) }
        // Only a stale socket is removed to bind again (the transports would remove any socket file).
        for case .unix(let path) in [endpoint, metricsEndpoint, web?.endpoint, admin?.endpoint, admin?.grpcEndpoint] { try UnixSocketFile.claim(path) }
        self.web = web
        self.admin = admin
        self.endpoint = endpoint
        self.tls = tls
        self.store = store
        self.replication = replication
        self.metricsEndpoint = metricsEndpoint
        self.configuration = configuration
        self.limits = limits
        self.logger = logger
        self.onListening = onListening
        let metrics = ServiceMetrics()
        self.metrics = metrics
        switch replication.kind {
        case .standalone:
            host = MatcherHost(configuration: configuration, metrics: metrics, logger: logger, clock: clock)
        case .postgresLog(let database):
            // Several nodes: the matcher is replicated through a log in their PostgreSQL.
            host = MatcherHost(configuration: configuration, metrics: metrics, logger: logger,
                               log: PostgresLog(configuration: database, logger: logger), clock: clock)
        }
    }

    public func run() async throws {
        let metrics = self.metrics, logger = self.logger
        let connections = ConnectionGuard(limits: limits, metrics: metrics.transport, logger: logger)
        if connections.maxConnections < limits.maxConnections {
            logger.notice("at most \(connections.maxConnections) connections: the descriptor limit is \(TransportLimits.descriptorLimit()) (ulimit -n)")
        }
        let sslContext = try tls.map { try GuardedListener.sslContext($0) }
        try await host.load(beacons: store.beacons())
        await host.start()
        var http: HTTPStatusEndpoint?
        if let metricsEndpoint {
            http = try await HTTPStatusEndpoint.start(endpoint: metricsEndpoint, metrics: metrics, limits: limits, ready: { [store, host] in
                guard await host.serving, await !host.stopped else { return false }
                return (try? await store.registryVersion()) != nil
            })
        }
        let httpAddress = http?.address
        // The gRPC listener says where it is bound once it is (with the HTTP endpoint's address).
        let listenerBound = ListenerBound()
        let onListening = self.onListening, secure = tls != nil
        let listener = GuardedListener(endpoint: endpoint, sslContext: sslContext, connections: connections,
                                       onPrefaceTimeout: { metrics.transport.prefaceTimeouts.increment() }) { address in
            logger.info("serving on \(address)\(secure ? " (TLS)" : "")")
            listenerBound.mark()
            onListening(address, httpAddress)
        }
        var config = HTTP2ServerTransport.Custom<GuardedListener>.Config.defaults
        config.rpc.maxRequestPayloadSize = Self.maxRequestPayloadSize
        config.http2.maxConcurrentStreams = limits.maxStreamsPerConnection
        config.connection.maxIdleTime = .nanoseconds(Int64(limits.idleTimeout * 1e9))
        config.channelDebuggingCallbacks.onAcceptHTTP2Stream = { stream in
            stream.eventLoop.makeCompletedFuture {
                connections.streamOpened(stream)
                try stream.pipeline.syncOperations.addHandler(FrameSizeGuard(limit: Self.maxRequestPayloadSize) {
                    metrics.transport.framesTooLarge.increment()
                    metrics.rejected.increment()
                }, position: .first)
            }
        }
        let transport = HTTP2ServerTransport.Custom(listenerFactory: listener, config: config)
        let service = ExchangeService(host: host, store: store, metrics: metrics, logger: logger, limits: limits)
        let server = GRPCServer(transport: transport, services: [service])
        var webListener: WebListener?
        var adminListener: AdminListener?
        var adminGRPC: AdminGRPCListener?
        do {
            if let web { webListener = try await WebListener.bind(endpoint: web.endpoint, tls: tls, metrics: metrics) }
            if let admin { adminListener = try await AdminListener.bind(endpoint: admin.endpoint, tls: tls) }
            if let grpc = admin?.grpcEndpoint { adminGRPC = try AdminGRPCListener(endpoint: grpc, tls: tls, limits: limits) }
        } catch {
            webListener?.channel.channel.close(promise: nil)
            await host.stop()
            try? await http?.close()
            throw error
        }
        do {
            try await serve(server, listenerBound: listenerBound, helloGate: service.helloGate,
                            web: webListener.map { ($0, service) },
                            connections: connections, admin: adminListener, adminGRPC: adminGRPC)
        } catch is DrainDeadlinePassed {
            logger.notice("drain time (\(configuration.drainTimeout) s) over: closed the connections left")
        } catch {
            // Cancelled (or failed) rather than shut down gracefully: end the sessions and the endpoint all the same.
            await host.stop()
            try? await http?.close()
            throw error
        }
        await host.stop()
        try? await http?.close()
    }

    /// The parts of the service that run side by side; the end of the two transports (the gRPC server, and the
    /// web listener with its sessions) ends the rest.
    private enum Part: Sendable { case server, web, other }

    /// Serves until a graceful shutdown (SIGINT, SIGTERM through the service group) has drained the streams.
    /// Shutting down: the listener closes and connections get GOAWAY (no new stream), every session is told
    /// with UNAVAILABLE "shutting down" (clients move to another node; alone, the sessions end), and the
    /// streams get ``ServiceConfiguration/drainTimeout`` seconds to end before the connections left are closed.
    private func serve(_ server: GRPCServer<HTTP2ServerTransport.Custom<GuardedListener>>, listenerBound: ListenerBound,
                       helloGate: HelloGate, web webListener: (WebListener, ExchangeService)? = nil,
                       connections: ConnectionGuard, admin adminListener: AdminListener? = nil, adminGRPC: AdminGRPCListener? = nil) async throws {
        let host = self.host, logger = self.logger, drain = configuration.drainTimeout
        try await withGracefulShutdownHandler {
            // A graceful shutdown that comes before the gRPC listener is bound (a signal right at the start, while
            // the web listener already serves) stops the server before it listens: the transport then ends with an
            // error ("I/O on closed channel", or "can only be started once" when the server had not started yet).
            // That is the end asked for, with nothing served and nothing to announce.
            try await withThrowingTaskGroup(of: Part.self) { group in
                group.addTask {
                    do { try await server.serve() } catch where Task.isShuttingDownGracefully && !listenerBound.isBound {}
                    return .server
                }
                if let (listener, service) = webListener, let web {
                    // The browser transport: its sessions end with the host's (stop below), its listener with the server.
                    logger.info("serving web clients on \(listener.address)\(tls == nil ? "" : " (TLS)")")
                    web.onListening(listener.address)
                    group.addTask {
                        try await listener.serve(service: service, page: web.page, connections: connections, limits: self.limits,
                                                metrics: self.metrics)
                        return .web
                    }
                }
                if let adminListener, let admin {
                    // The admin API: a revoked key's sessions on this node end at once (other nodes: their revocation poll).
                    // Its live views sample the service's own state every second (this node's, and the other nodes' as they share it).
                    let live = LiveFeed { await self.liveStatistics() }
                    group.addTask { await live.run(); return .other }
                    let api = AdminAPI(store: store, secureCookies: !admin.endpoint.isLocal, onRevoke: { keys in await host.revoke(keys: keys) }, live: live)
                    logger.info("serving the admin API on \(adminListener.address)\(tls == nil ? "" : " (TLS)")")
                    admin.onListening(adminListener.address)
                    group.addTask {
                        try await adminListener.serve(api: api, limits: self.limits)
                        return .other
                    }
                    if let adminGRPC {
                        // The same API over gRPC, on its own address (the same credentials, throttle and audit).
                        group.addTask {
                            try await adminGRPC.serve(api: api) { address in
                                logger.info("serving the admin API over gRPC on \(address)\(tls == nil ? "" : " (TLS)")")
                                admin.onGRPCListening(address)
                            }
                            return .other
                        }
                    }
                }
                // The Hello deadlines of both transports' streams.
                group.addTask { await helloGate.enforceDeadlines(); return .other }
                group.addTask { await self.followRegistry(); return .other }
                group.addTask { await self.followRevocations(); return .other }
                if replication.isShared { group.addTask { await self.shareLiveCounters(); return .other } }
                group.addTask {
                    // Shutting down: the server has stopped accepting (onGracefulShutdown below); tell the sessions.
                    guard (try? await gracefulShutdown()) != nil else { return .other }
                    // No new page connects while the sessions drain.
                    webListener?.0.channel.channel.close(promise: nil)
                    let streams = await host.streamCount
                    logger.info("shutting down: telling \(streams) stream\(streams == 1 ? "" : "s") to move to another node; draining for at most \(drain) s")
                    await host.stop()
                    try? await Task.sleep(for: .seconds(drain))
                    if !Task.isCancelled { throw DrainDeadlinePassed() }
                    return .other
                }
                // The gRPC server ends once its streams have, the web listener once its sessions have (or either on
                // an error): the other parts are stopped when both have ended, and a part that ends by that
                // cancellation (an accept loop throws CancellationError) has ended as asked, not failed.
                var serverEnded = false, webEnded = webListener == nil || web == nil, stopping = false
                while true {
                    do {
                        guard let part = try await group.next() else { break }
                        if part == .server { serverEnded = true }
                        if part == .web { webEnded = true }
                        if serverEnded && webEnded && !stopping { stopping = true; group.cancelAll() }
                    } catch is CancellationError where stopping {
                        continue
                    }
                }
            }
        } onGracefulShutdown: {
            server.beginGracefulShutdown()
            // No new page connects from now on either (the accept loop ends; the sessions drain as above).
            webListener?.0.channel.channel.close(promise: nil)
            adminListener?.close()
        }
    }

    /// Whether the gRPC listener has bound its address (set once, by the listener; read by the server's task).
    private final class ListenerBound: Sendable {
        private let bound = Mutex(false)
        var isBound: Bool { bound.withLock { $0 } }
        func mark() { bound.withLock { $0 = true } }
    }

    /// The streams did not end within the drain time: what remains is closed (the server task is cancelled).
    private struct DrainDeadlinePassed: Error {}

    /// Reloads beacons when the store's registry changed (another process ran `sotto admin beacon ...`).
    /// The service's state for the live views: the matcher's census (service-wide), this node's counters and,
    /// on a shared log, the other nodes' as they last shared them (within three sharing intervals).
    public func liveStatistics() async -> ServiceStatistics {
        var statistics = await host.statistics()
        guard replication.isShared else { return statistics }
        let since = Date().timeIntervalSince1970 - 3 * Self.liveSharingInterval
        if var others = try? await store.sharedLiveCounters(since: since) {
            others[liveNode] = nil
            statistics.otherNodes = others
        }
        return statistics
    }

    /// Shares this node's live counters through the store every ``liveSharingInterval`` seconds, so that every
    /// node's live views count the whole service (a node without `--admin` shares too).
    func shareLiveCounters() async {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            // The counters alone, off the host's actor: `statistics()` would also count every session's operations
            // (the census) on the actor each second, holding up what the sessions ask of it (the PostgreSQL node's
            // found latency, `Benchmarks/README.md`).
            let counters = host.live.all
            try? await store.shareLiveCounters(node: liveNode, counters: counters, time: Date().timeIntervalSince1970)
            try? await Task.sleep(for: .seconds(Self.liveSharingInterval))
        }
    }

    func followRegistry() async {
        var version = (try? await store.registryVersion()) ?? 0
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            try? await Task.sleep(for: .seconds(configuration.registryPollInterval))
            guard let now = try? await store.registryVersion(), now != version else { continue }
            version = now
            if let beacons = try? await store.beacons() {
                await host.load(beacons: beacons)
                logger.info("beacon registry reloaded (\(beacons.count) beacons)")
            }
        }
    }
}

/// Why the server cannot start.
public enum MatcherServerError: Error, Sendable, CustomStringConvertible {
    case tlsRequired(String)
    /// A Unix-socket path that cannot be bound: the path, and why (not a socket, a live service's socket).
    case socketPath(String, String)

    public var description: String {
        switch self {
        case .tlsRequired(let address):
            return "\(address) is reachable from other machines: give --tls-cert and --tls-key (plaintext only on loopback or a Unix socket)"
        case .socketPath(let path, let reason):
            return "cannot listen on unix:\(path): \(reason)"
        }
    }
}
