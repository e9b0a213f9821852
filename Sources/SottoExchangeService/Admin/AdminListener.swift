import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import SottoExchangeWire
import Synchronization

/// Where `sotto serve --admin` listens (loopback or a Unix socket; TLS beyond loopback, as for `--listen`).
public struct AdminOptions: Sendable {
    /// Where the admin listener listens.
    public var endpoint: MatcherAddress
    /// Called with the bound address (`HOST:PORT` or `unix:PATH`).
    public var onListening: @Sendable (String) -> Void
    /// Where the admin API's gRPC listener listens (``AdminGRPCListener``), if anywhere (nil: no gRPC admin API).
    public var grpcEndpoint: MatcherAddress?
    /// Called with the gRPC listener's bound address.
    public var onGRPCListening: @Sendable (String) -> Void = { _ in }

    /// - Parameters:
    ///   - endpoint: where to listen.
    ///   - onListening: called with the bound address.
    public init(endpoint: MatcherAddress, onListening: @escaping @Sendable (String) -> Void = { _ in }) {
        self.endpoint = endpoint
        self.onListening = onListening
    }
}

/// The admin listener: HTTP/1.1 on swift-nio (as the web listener, whose response adapter it shares), one
/// request per connection, answered by ``AdminAPI``. A connection has ``TransportLimits/httpRequestTimeout``
/// to send its request (head and a body of at most ``AdminAPI/maxBodyBytes``); at most
/// ``TransportLimits/maxHTTPConnections`` are held at once.
public struct AdminListener: Sendable {
    typealias Connection = NIOAsyncChannel<HTTPServerRequestPart, HTTPPart<HTTPResponseHead, ByteBuffer>>
    let channel: NIOAsyncChannel<Connection, Never>
    /// The bound address, as `HOST:PORT` or `unix:PATH`.
    public let address: String

    /// Binds the listener.
    /// - Parameters:
    ///   - endpoint: where to listen.
    ///   - tls: certificate and key (ALPN http/1.1); required beyond loopback.
    /// - Throws: `MatcherServerError.tlsRequired` beyond loopback without TLS, or why it cannot bind.
    public static func bind(endpoint: MatcherAddress, tls: MatcherServer.TLS?) async throws -> AdminListener {
        guard tls != nil || endpoint.isLocal else { throw MatcherServerError.tlsRequired(endpoint.description) }
        let sslContext = try HTTPListenerBinding.sslContext(tls)
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 64)
        let initializer: @Sendable (any Channel) -> EventLoopFuture<Connection> = { channel in
            channel.eventLoop.makeCompletedFuture {
                if let sslContext { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext)) }
                try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                try channel.pipeline.syncOperations.addHandler(HTTPResponsePartAdapter())
                return try Connection(wrappingChannelSynchronously: channel)
            }
        }
        let (channel, address) = try await HTTPListenerBinding.bind(bootstrap, endpoint: endpoint, initializer: initializer)
        return AdminListener(channel: channel, address: address)
    }

    /// Stops accepting (the accept loop of ``serve(api:limits:)`` ends).
    public func close() { channel.channel.close(promise: nil) }

    /// Accepts connections until cancelled or closed; each is answered in its own child task.
    /// - Parameters:
    ///   - api: what answers the requests.
    ///   - limits: the request time-out and the connection cap.
    public func serve(api: AdminAPI, limits: TransportLimits = TransportLimits()) async throws {
        let held = AdminConnections()
        try await withThrowingDiscardingTaskGroup { group in
            try await channel.executeThenClose { inbound in
                for try await connection in inbound {
                    let (count, _) = held.count.add(1, ordering: .relaxed)
                    group.addTask {
                        defer { held.count.subtract(1, ordering: .relaxed) }
                        guard count <= limits.maxHTTPConnections else {
                            try? await connection.channel.close()
                            return
                        }
                        // Answered or not, the connection ends at the deadline.
                        let deadline = connection.channel.eventLoop.scheduleTask(in: .nanoseconds(Int64(limits.httpRequestTimeout * 1e9))) {
                            connection.channel.close(promise: nil)
                        }
                        defer { deadline.cancel() }
                        await withTaskCancellationHandler {
                            // A live view's event stream outlives the request's deadline (it ends when its client leaves).
                            try? await Self.answer(connection, api: api, streaming: { deadline.cancel() })
                        } onCancel: {
                            connection.channel.close(promise: nil)
                        }
                    }
                }
            }
        }
    }

    /// Reads one request (head, bounded body, end), answers it and closes the connection. An answer of server-sent
    /// events (``AdminResponse/events``) calls `streaming`, then writes an event per point until the client leaves
    /// (a write fails) or the feed ends; a comment line goes out first, so that a client sees the stream open.
    static func answer(_ connection: Connection, api: AdminAPI, streaming: @Sendable () -> Void = {}) async throws {
        let peer = connection.channel.remoteAddress?.ipAddress ?? "unix"
        try await connection.executeThenClose { inbound, outbound in
            var head: HTTPRequestHead?
            var body: [UInt8] = []
            var tooLarge = false
            for try await part in inbound {
                switch part {
                case .head(let requestHead): head = requestHead
                case .body(let buffer):
                    if body.count + buffer.readableBytes > AdminAPI.maxBodyBytes { tooLarge = true } else { body += buffer.readableBytesView }
                case .end:
                    guard let head else { return }
                    var request = AdminRequest(method: head.method.rawValue, target: head.uri,
                                               headers: head.headers.map { ($0.name, $0.value) }, body: body, peer: peer)
                    if tooLarge { request.body = [UInt8](repeating: 0, count: AdminAPI.maxBodyBytes + 1) }
                    let response = await api.handle(request)
                    var headers = HTTPHeaders()
                    headers.add(name: "Content-Type", value: response.contentType)
                    if response.events == nil { headers.add(name: "Content-Length", value: "\(response.body.count)") }
                    headers.add(name: "Connection", value: "close")
                    headers.add(name: "Cache-Control", value: "no-store")
                    headers.add(name: "X-Content-Type-Options", value: "nosniff")
                    headers.add(name: "X-Frame-Options", value: "DENY")
                    headers.add(name: "Content-Security-Policy", value: "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; frame-ancestors 'none'")
                    for (name, value) in response.headers { headers.add(name: name, value: value) }
                    let status = HTTPResponseStatus(statusCode: response.status)
                    try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers)))
                    if let events = response.events {
                        streaming()
                        do {
                            try await outbound.write(.body(ByteBuffer(bytes: Array(": live\n\n".utf8))))
                            for await point in events.points { try await outbound.write(.body(ByteBuffer(bytes: LiveEvents.event(point)))) }
                            await events.stop()
                        } catch {
                            await events.stop()
                            throw error
                        }
                        try await outbound.write(.end(nil))
                        return
                    }
                    if head.method != .HEAD { try await outbound.write(.body(ByteBuffer(bytes: response.body))) }
                    try await outbound.write(.end(nil))
                    return
                }
            }
        }
    }
}

/// The admin listener's connections held now.
final class AdminConnections: Sendable {
    let count = Atomic<Int>(0)
}
