import GRPCCore
import GRPCNIOTransportHTTP2
import NIOCore
import NIOPosix
import NIOSSL
import SottoExchangeWire

/// The gRPC listener of `sotto serve`: a NIO server bootstrap whose accepted connections pass through the
/// ``ConnectionGuard`` (caps, shedding) and a ``PrefaceDeadlineHandler`` before gRPC's HTTP/2 pipeline, on
/// TCP (optionally TLS) or a Unix socket.
struct GuardedListener: HTTP2ServerTransport.ListenerFactory {
    let endpoint: MatcherAddress
    let sslContext: NIOSSLContext?
    let connections: ConnectionGuard
    let onPrefaceTimeout: @Sendable () -> Void
    /// Called with the bound address (`HOST:PORT`, `[V6]:PORT` or `unix:PATH`) once the listener is bound; not at all
    /// when it never is (a failed bind, which the transport reports as its error) or was closed as soon as it was (a
    /// graceful shutdown that came first).
    let onBound: @Sendable (String) -> Void

    var eventLoopGroup: any EventLoopGroup { MultiThreadedEventLoopGroup.singleton }

    /// A TLS server context from PEM files (TLS 1.2 at least, ALPN `grpc-exp` and `h2`, as gRPC's own).
    static func sslContext(_ tls: MatcherServer.TLS) throws -> NIOSSLContext {
        let chain = try NIOSSLCertificate.fromPEMFile(tls.certificateChain)
        let key = try NIOSSLPrivateKey(file: tls.privateKey, format: .pem)
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) },
                                                                     privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        configuration.applicationProtocols = ["grpc-exp", "h2"]
        return try NIOSSLContext(configuration: configuration)
    }

    func makeListeningChannel(listenerConfigurator: HTTP2ServerTransport.ListenerConfigurator,
                              connectionConfigurator: HTTP2ServerTransport.ConnectionConfigurator) async throws
        -> NIOAsyncChannel<HTTP2ServerTransport.ConnectionConfigurator.ConnectionChannel, Never> {
        let connections = self.connections, sslContext = self.sslContext, onPrefaceTimeout = self.onPrefaceTimeout
        let prefaceTimeout = connections.limits.prefaceTimeout
        let bootstrap = ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(AdmissionHandler(connections: connections))
                    connections.sweepIdle(on: channel.eventLoop, until: channel.closeFuture)
                }.flatMap { listenerConfigurator.configure(channel: channel) }
            }
        let initializer: @Sendable (any Channel) -> EventLoopFuture<HTTP2ServerTransport.ConnectionConfigurator.ConnectionChannel> = { channel in
            channel.eventLoop.makeCompletedFuture {
                if let sslContext { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext)) }
                try channel.pipeline.syncOperations.addHandler(PrefaceDeadlineHandler(timeout: prefaceTimeout, onTimeout: onPrefaceTimeout))
            }.flatMap {
                connectionConfigurator.configure(channel: channel, tls: sslContext == nil ? .none : .configured(requireALPN: false))
            }
        }
        let (channel, address) = try await HTTPListenerBinding.bind(bootstrap, endpoint: endpoint, initializer: initializer)
        if channel.channel.localAddress != nil { onBound(address) }
        return channel
    }
}
