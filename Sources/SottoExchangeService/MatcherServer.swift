import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import SottoExchange
import SottoExchangeWire
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
    public let metricsEndpoint: MatcherAddress?
    public let configuration: ServiceConfiguration
    public let host: MatcherHost
    public let metrics: ServiceMetrics
    let logger: Logger
    /// Called with the bound address of the gRPC service and, if any, of the HTTP endpoint.
    let onListening: @Sendable (_ service: String, _ http: String?) -> Void
    /// Largest client frame accepted (bytes): a 100 KiB message plus its envelope.
    public static let maxRequestPayloadSize = 128 * 1024

    /// - Throws: `MatcherServerError.tlsRequired` for a non-loopback address without TLS, `.socketPath` for a
    ///   Unix socket path taken by anything but a stale socket.
    public init(endpoint: MatcherAddress, tls: TLS?, store: any ExchangeStore, metricsEndpoint: MatcherAddress? = nil,
                configuration: ServiceConfiguration = ServiceConfiguration(), logger: Logger = Logger(label: "sotto.serve"),
                onListening: @escaping @Sendable (_ service: String, _ http: String?) -> Void = { _, _ in }) throws(MatcherServerError) {
        guard tls != nil || endpoint.isLocal else { throw .tlsRequired(endpoint.description) }
        if let metricsEndpoint, !metricsEndpoint.isLocal, tls == nil { throw .tlsRequired(metricsEndpoint.description) }
        // Only a stale socket is removed to bind again (the transports would remove any socket file).
        for case .unix(let path) in [endpoint, metricsEndpoint] { try UnixSocketFile.claim(path) }
        self.endpoint = endpoint
        self.tls = tls
        self.store = store
        self.metricsEndpoint = metricsEndpoint
        self.configuration = configuration
        self.logger = logger
        self.onListening = onListening
        let metrics = ServiceMetrics()
        self.metrics = metrics
        if let shared = store as? any SharedStore {
            // Several nodes: the matcher is replicated through a log in the store's PostgreSQL.
            host = MatcherHost(configuration: configuration, metrics: metrics, logger: logger,
                               log: PostgresLog(configuration: shared.databaseConfiguration, logger: logger))
        } else {
            host = MatcherHost(configuration: configuration, metrics: metrics, logger: logger)
        }
    }

    public func run() async throws {
        let address: GRPCNIOTransportCore.SocketAddress
        switch endpoint {
        case .tcp(let host, let port):
            address = host.contains(":") ? .ipv6(host: host, port: port) : .ipv4(host: host == "localhost" ? "127.0.0.1" : host, port: port)
        case .unix(let path):
            address = .unixDomainSocket(path: path)
        }
        let security: HTTP2ServerTransport.Posix.TransportSecurity = tls.map { tls in
            .tls(certificateChain: [.file(path: tls.certificateChain, format: .pem)], privateKey: .file(path: tls.privateKey, format: .pem))
        } ?? .plaintext
        let transport = HTTP2ServerTransport.Posix(
            address: address, transportSecurity: security,
            config: .defaults { config in
                config.rpc.maxRequestPayloadSize = Self.maxRequestPayloadSize
                config.http2.maxConcurrentStreams = 16_384
            })
        let service = ExchangeService(host: host, store: store, metrics: metrics, logger: logger)
        let server = GRPCServer(transport: transport, services: [service])
        try await host.load(beacons: store.beacons())
        await host.start()
        var http: HTTPStatusEndpoint?
        if let metricsEndpoint {
            http = try await HTTPStatusEndpoint.start(endpoint: metricsEndpoint, metrics: metrics, ready: { [store, host] in
                guard await host.serving else { return false }
                return (try? await store.registryVersion()) != nil
            })
        }
        let httpAddress = http?.address
        do {
            try await serve(server, transport: transport, httpAddress: httpAddress)
        } catch {
            // Cancelled (or failed) rather than shut down gracefully: end the sessions and the endpoint all the same.
            await host.stop()
            try? await http?.close()
            throw error
        }
        await host.stop()
        try? await http?.close()
    }

    private func serve(_ server: GRPCServer<HTTP2ServerTransport.Posix>, transport: HTTP2ServerTransport.Posix,
                       httpAddress: String?) async throws {
        try await withGracefulShutdownHandler {
            try await withThrowingDiscardingTaskGroup { group in
                group.addTask { try await server.serve() }
                group.addTask {
                    let bound = try await transport.listeningAddress
                    let text: String
                    if let ipv4 = bound.ipv4 { text = "\(ipv4.host):\(ipv4.port)" }
                    else if let ipv6 = bound.ipv6 { text = "[\(ipv6.host)]:\(ipv6.port)" }
                    else if let unix = bound.unixDomainSocket { text = "unix:\(unix.path)" }
                    else { text = "\(bound)" }
                    logger.info("serving on \(text)\(tls == nil ? "" : " (TLS)")")
                    onListening(text, httpAddress)
                }
                group.addTask { await self.followRegistry() }
                group.addTask { await self.followRevocations() }
                group.addTask {
                    // Ends the registry loop with the server.
                    try await gracefulShutdown()
                }
            }
        } onGracefulShutdown: {
            server.beginGracefulShutdown()
        }
    }

    /// Reloads beacons when the store's registry changed (another process ran `sotto admin beacon ...`).
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
