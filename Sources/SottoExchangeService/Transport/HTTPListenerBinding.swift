import NIOCore
import NIOPosix
import NIOSSL
import SottoExchangeWire

/// What the HTTP/1 listeners (the web transport's, the admin API's) share: their TLS context and their bind (which
/// the gRPC listener, ``GuardedListener``, shares too).
enum HTTPListenerBinding {
    /// The server TLS context of `tls` (TLS 1.2 or later, ALPN http/1.1); nil without TLS.
    /// - Parameter tls: certificate chain and key (PEM files), if any.
    static func sslContext(_ tls: MatcherServer.TLS?) throws -> NIOSSLContext? {
        try tls.map { tls -> NIOSSLContext in
            let chain = try NIOSSLCertificate.fromPEMFile(tls.certificateChain)
            let key = try NIOSSLPrivateKey(file: tls.privateKey, format: .pem)
            var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
            configuration.minimumTLSVersion = .tlsv12
            configuration.applicationProtocols = ["http/1.1"]
            return try NIOSSLContext(configuration: configuration)
        }
    }

    /// Binds `endpoint` (TCP, `localhost` as 127.0.0.1; or a Unix socket, a stale file removed) and names the bound
    /// address: `HOST:PORT`, `[V6]:PORT` or `unix:PATH`.
    /// - Parameters:
    ///   - bootstrap: the listener's bootstrap (its options set).
    ///   - endpoint: where to listen.
    ///   - initializer: makes each accepted connection.
    static func bind<Connection: Sendable>(_ bootstrap: sending ServerBootstrap, endpoint: MatcherAddress,
                                           initializer: @escaping @Sendable (any Channel) -> EventLoopFuture<Connection>) async throws
        -> (channel: NIOAsyncChannel<Connection, Never>, address: String) {
        let channel: NIOAsyncChannel<Connection, Never>
        switch endpoint {
        case .tcp(let host, let port):
            channel = try await bootstrap.bind(host: host == "localhost" ? "127.0.0.1" : host, port: port, childChannelInitializer: initializer)
        case .unix(let path):
            channel = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true, childChannelInitializer: initializer)
        }
        let address: String
        switch channel.channel.localAddress {
        case .v4(let v4)?: address = "\(v4.host):\(channel.channel.localAddress?.port ?? 0)"
        case .v6(let v6)?: address = "[\(v6.host)]:\(channel.channel.localAddress?.port ?? 0)"
        case .unixDomainSocket?: if case .unix(let path) = endpoint { address = "unix:\(path)" } else { address = "unix" }
        case nil: address = endpoint.description
        }
        return (channel, address)
    }
}
