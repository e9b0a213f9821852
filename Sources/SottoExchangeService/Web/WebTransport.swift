import CoreMetrics
import Foundation
import GRPCCore
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import SottoExchangeWire
import Synchronization

/// The browser transport of `sotto serve --web`: pages cannot speak gRPC (HTTP/2 trailers), so they open a
/// WebSocket at `/session` and exchange the same protobuf frames, one `ClientFrame` or `ServerFrame` per
/// binary message (``WebFrames``). Behind it is the gRPC path's session logic (``ExchangeService``): the
/// same Hello, keys, quotas, rate limits, outbox and cut-offs; what differs is that the key must be bound to
/// the page's origin (``WebOrigin``). The same listener serves the page (``WebPage``) over plain HTTP GET.
public struct WebOptions: Sendable {
    /// Where the web listener listens (TLS needed beyond loopback, as for the gRPC listener).
    public var endpoint: MatcherAddress
    /// The page and the modem's files, if served.
    public var page: WebPage?
    /// Called with the bound address (`HOST:PORT` or `unix:PATH`).
    public var onListening: @Sendable (String) -> Void

    /// - Parameters:
    ///   - endpoint: where to listen.
    ///   - page: the files of the page, if it is served.
    ///   - onListening: called with the bound address.
    public init(endpoint: MatcherAddress, page: WebPage? = nil, onListening: @escaping @Sendable (String) -> Void = { _ in }) {
        self.endpoint = endpoint
        self.page = page
        self.onListening = onListening
    }
}

/// What one accepted connection of the web listener became.
enum WebConnection: Sendable {
    /// A WebSocket at `/session`, with the handshake's `Origin` header and the peer's address.
    case webSocket(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, origin: String?, peer: String)
    /// Plain HTTP (the page's files, or 404).
    case http(NIOAsyncChannel<HTTPServerRequestPart, HTTPPart<HTTPResponseHead, ByteBuffer>>)
}

/// An accepted connection of the web listener: its channel (for its address, and to close it when it is refused)
/// and what its first request makes of it.
struct AcceptedWebConnection: Sendable {
    let channel: any Channel
    let upgrade: EventLoopFuture<WebConnection>
}

/// The web listener: binds, accepts, upgrades `/session` to a WebSocket and runs each as a session.
struct WebListener {
    let channel: NIOAsyncChannel<AcceptedWebConnection, Never>
    /// The bound address, as `HOST:PORT` or `unix:PATH`.
    let address: String

    /// The WebSocket path.
    static let sessionPath = "/session"

    /// Binds the listener.
    /// - Parameters:
    ///   - endpoint: where to listen.
    ///   - tls: certificate and key, if any (ALPN http/1.1).
    ///   - metrics: where messages over the size limit are counted.
    static func bind(endpoint: MatcherAddress, tls: MatcherServer.TLS?, metrics: ServiceMetrics) async throws -> WebListener {
        let sslContext = try HTTPListenerBinding.sslContext(tls)
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
        let initializer: @Sendable (any Channel) -> EventLoopFuture<AcceptedWebConnection> = { channel in
            channel.eventLoop.makeCompletedFuture {
                if let sslContext { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext)) }
                let peer = channel.remoteAddress.map { "\($0)" } ?? "unix"
                let upgrader = NIOTypedWebSocketServerUpgrader<WebConnection>(
                    maxFrameSize: WebFrames.maxMessageSize,
                    shouldUpgrade: { channel, head in
                        let path = head.uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? head.uri
                        return channel.eventLoop.makeSucceededFuture(path == sessionPath ? HTTPHeaders() : nil)
                    },
                    upgradePipelineHandler: { channel, head in
                        channel.eventLoop.makeCompletedFuture {
                            // Fragments are joined (at most the message limit in all), then each message is one frame.
                            try channel.pipeline.syncOperations.addHandler(WebFrames.aggregator())
                            try channel.pipeline.syncOperations.addHandler(OversizeCounter(metrics: metrics))
                            let socket = try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(wrappingChannelSynchronously: channel)
                            return WebConnection.webSocket(socket, origin: head.headers.first(name: "origin"), peer: peer)
                        }
                    })
                let configuration = NIOTypedHTTPServerUpgradeConfiguration(upgraders: [upgrader], notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(HTTPResponsePartAdapter())
                        return WebConnection.http(try NIOAsyncChannel(wrappingChannelSynchronously: channel))
                    }
                })
                return AcceptedWebConnection(channel: channel, upgrade: try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(
                    configuration: .init(upgradeConfiguration: configuration)))
            }
        }
        let (channel, address) = try await HTTPListenerBinding.bind(bootstrap, endpoint: endpoint, initializer: initializer)
        return WebListener(channel: channel, address: address)
    }

    /// Accepts connections until cancelled (or the listener fails); each runs in its own child task and is
    /// closed when this ends. A connection over the caps, in all or from its IP address (``TransportLimits``'
    /// `maxConnections` and `maxConnectionsPerAddress`, one budget with the gRPC listener's connections), is closed
    /// at once; a web connection is never shed for a newer one (each holds a page's session or a request under way).
    /// - Parameters:
    ///   - service: the session logic.
    ///   - page: the page's files, if served.
    ///   - connections: the process's connection budget, shared with the gRPC listener.
    ///   - limits: the time a connection has to send its request.
    ///   - metrics: the transport's counters.
    func serve(service: ExchangeService, page: WebPage?, connections: ConnectionGuard, limits: TransportLimits,
               metrics: ServiceMetrics) async throws {
        let refusals = LogThrottle(interval: 60)
        try await withThrowingDiscardingTaskGroup { group in
            try await channel.executeThenClose { inbound in
                for try await connection in inbound {
                    let address = connection.channel.remoteAddress?.ipAddress
                    let id: UInt64
                    switch connections.admitWeb(address: address) {
                    case .success(let admitted):
                        id = admitted
                    case .failure(let refusal):
                        connection.channel.close(promise: nil)
                        refusals.log { suppressed in
                            service.logger.warning("web: refused a connection from \(address ?? "a Unix socket"): \(refusal)\(suppressed > 0 ? " (\(suppressed) more refused since the last line)" : "")")
                        }
                        continue
                    }
                    group.addTask {
                        defer { connections.closeWeb(id) }
                        await Self.handle(connection, service: service, page: page, limits: limits, metrics: metrics)
                    }
                }
            }
        }
    }

    /// One connection: its request within the time-out, then the page's file or a WebSocket session.
    private static func handle(_ accepted: AcceptedWebConnection, service: ExchangeService, page: WebPage?,
                               limits: TransportLimits, metrics: ServiceMetrics) async {
        // A connection that sends no (complete) request in time is closed (the upgrade fails then).
        let connection = accepted.upgrade, channel = accepted.channel
        let timeout = connection.eventLoop.scheduleTask(in: .nanoseconds(Int64(limits.httpRequestTimeout * 1e9))) {
            metrics.transport.httpTimeouts.increment()
            channel.close(promise: nil)
        }
        let upgraded: WebConnection
        do { upgraded = try await connection.get() } catch { timeout.cancel(); return }
        timeout.cancel()
        switch upgraded {
        case .http(let http):
            try? await WebPage.serve(http, page: page)
        case .webSocket(let socket, let origin, let peer):
            await withTaskCancellationHandler {
                await WebSession.run(socket, origin: origin, peer: peer, service: service, metrics: metrics)
            } onCancel: {
                socket.channel.close(promise: nil)
            }
        }
    }
}

extension WebConnection {
    /// Closes the connection's channel.
    func close() {
        switch self {
        case .webSocket(let socket, _, _): socket.channel.close(promise: nil)
        case .http(let http): http.channel.close(promise: nil)
        }
    }
}

/// One WebSocket session: the socket's messages to ``ExchangeService/run(frames:peer:pass:transport:write:)``
/// and its frames back, then the end as a last `Error` frame (fatal) and a close message.
enum WebSession {
    static func run(_ socket: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, origin: String?, peer: String,
                    service: ExchangeService, metrics: ServiceMetrics) async {
        let allocator = socket.channel.allocator
        try? await socket.executeThenClose { inbound, outbound in
            let (frames, input) = AsyncThrowingStream.makeStream(of: ClientFrame.self)
            let ending = Mutex<(WebSocketErrorCode, String)?>(nil)
            // The socket's messages: client frames to the session, pings answered, protocol errors end it.
            let reader = Task {
                do {
                    for try await message in inbound {
                        switch WebFrames.classify(opcode: message.opcode, payload: Array(message.unmaskedData.readableBytesView)) {
                        case .frame(let frame): input.yield(frame)
                        case .ping(let bytes):
                            try await outbound.write(WebSocketFrame(fin: true, opcode: .pong, data: allocator.buffer(bytes: bytes)))
                        case .ignore: continue
                        case .close:
                            input.finish()
                            return
                        case .refuse(let code, let reason):
                            metrics.rejected.increment()
                            if code == .messageTooLarge { metrics.transport.framesTooLarge.increment() }
                            ending.withLock { $0 = (code, reason) }
                            input.finish(throwing: RPCError(code: .invalidArgument, message: reason))
                            return
                        }
                    }
                    input.finish()
                } catch {
                    // NIO's decoder refused the bytes (a frame over the limit, a bad header), or the socket failed.
                    if error is NIOWebSocketFrameAggregator.Error {
                        ending.withLock { $0 = (.messageTooLarge, "a message over \(WebFrames.maxMessageSize) bytes or \(WebFrames.maxFragments) fragments") }
                    }
                    input.finish(throwing: error)
                }
            }
            defer { reader.cancel() }
            var end: (WebSocketErrorCode, String, WireErrorCode, String)?
            // Whether the session logic sent a fatal Error frame itself (a refused session quota): then the end
            // below adds none, so that the page gets one.
            let sentFatal = Mutex(false)
            do {
                let pass = try service.enterHelloGate(peer: peer)
                try await service.run(frames: RPCAsyncSequence(wrapping: frames), peer: peer, pass: pass, transport: .web(origin: origin)) { frame in
                    try await outbound.write(WebFrames.message(frame, allocator: allocator))
                    if case .error(let error) = frame.kind, error.fatal { sentFatal.withLock { $0 = true } }
                }
            } catch let error as RPCError {
                let detail = error.metadata[stringValues: "sotto-error"].first(where: { _ in true }) ?? "\(error.code)"
                let (close, wire): (WebSocketErrorCode, WireErrorCode) = switch error.code {
                case .unavailable: (.unknown(1013), .unavailable)  // try again later (another node)
                case .invalidArgument: (.protocolError, .protocol)
                case .resourceExhausted: (.policyViolation, .quotaExceeded)
                default: (.policyViolation, .protocol)
                }
                end = (close, error.message, wire, detail)
            } catch {
                end = (.protocolError, "the session ended: \(error)", .protocol, "transport")
            }
            if let (code, reason) = ending.withLock({ $0 }) { end = (code, reason, .protocol, "frame") }
            // A page that stopped reading gets no last frames (they would wait for it): the socket is closed.
            guard socket.channel.isWritable else { return }
            if let end, !sentFatal.withLock({ $0 }) {
                var body = Sotto_Exchange_V1_Error()
                (body.code, body.message, body.detail, body.fatal) = (end.2, end.1, end.3, true)
                var frame = ServerFrame()
                frame.kind = .error(body)
                if let message = try? WebFrames.message(frame, allocator: allocator) { try? await outbound.write(message) }
            }
            try? await outbound.write(WebFrames.close(end?.0 ?? .normalClosure, end?.1 ?? "session ended", allocator: allocator))
        }
    }
}

/// Counts the messages refused for their size: a frame whose header says more than the limit (NIO's decoder;
/// its error handler closes with 1009) or fragments that add up to more (the aggregator).
final class OversizeCounter: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    let metrics: ServiceMetrics
    init(metrics: ServiceMetrics) { self.metrics = metrics }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) { context.fireChannelRead(data) }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if (error as? NIOWebSocketError) == .invalidFrameLength || error is NIOWebSocketFrameAggregator.Error {
            metrics.transport.framesTooLarge.increment()
            metrics.rejected.increment()
        }
        context.fireErrorCaught(error)
    }
}

/// Turns the typed HTTP response parts of the async channel into the pipeline's server response parts.
final class HTTPResponsePartAdapter: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTPPart<HTTPResponseHead, ByteBuffer>
    typealias OutboundOut = HTTPServerResponsePart

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        switch unwrapOutboundIn(data) {
        case .head(let head): context.write(wrapOutboundOut(.head(head)), promise: promise)
        case .body(let buffer): context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: promise)
        case .end(let trailers): context.write(wrapOutboundOut(.end(trailers)), promise: promise)
        }
    }
}
