import CoreMetrics
import NIOCore
import NIOHTTP1
import NIOPosix
import SottoExchangeWire
import Synchronization

/// A tiny HTTP/1.1 endpoint for operators: `GET /metrics` (Prometheus text), `GET /ready` (200 when the
/// service can take sessions: its store answers; 503 otherwise) and `GET /health` (200 while the process runs).
/// Each connection gets ``TransportLimits/httpRequestTimeout`` to send its request and be answered (then it is
/// closed, answered or not), and at most ``TransportLimits/maxHTTPConnections`` are held at once.
public struct HTTPStatusEndpoint: Sendable {
    let channel: any Channel
    /// The bound address, `HOST:PORT` or `unix:PATH`.
    public let address: String

    /// Binds the endpoint.
    /// - Parameters:
    ///   - endpoint: where to listen.
    ///   - metrics: the counters `/metrics` exposes.
    ///   - limits: the request time-out and the connection cap.
    ///   - ready: whether the service can take sessions (for `/ready`).
    public static func start(endpoint: MatcherAddress, metrics: ServiceMetrics, limits: TransportLimits = TransportLimits(),
                             ready: @escaping @Sendable () async -> Bool) async throws -> HTTPStatusEndpoint {
        let open = OpenConnections()
        let timeout = TimeAmount.nanoseconds(Int64(limits.httpRequestTimeout * 1e9))
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                guard open.enter(limit: limits.maxHTTPConnections) else {
                    metrics.transport.httpRefused.increment()
                    return channel.close()
                }
                channel.closeFuture.whenComplete { _ in open.leave() }
                // Answered or not, the connection ends at the deadline (an answer takes milliseconds).
                let deadline = channel.eventLoop.scheduleTask(in: timeout) {
                    metrics.transport.httpTimeouts.increment()
                    channel.close(promise: nil)
                }
                channel.closeFuture.whenComplete { _ in deadline.cancel() }
                return channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(StatusHandler(metrics: metrics, ready: ready))
                }
            }
        let channel: any Channel
        switch endpoint {
        case .tcp(let host, let port): channel = try await bootstrap.bind(host: host == "localhost" ? "127.0.0.1" : host, port: port).get()
        case .unix(let path): channel = try await bootstrap.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true).get()
        }
        let address: String
        if let port = channel.localAddress?.port, let ip = channel.localAddress?.ipAddress {
            address = ip.contains(":") ? "[\(ip)]:\(port)" : "\(ip):\(port)"
        } else {
            address = endpoint.description
        }
        return HTTPStatusEndpoint(channel: channel, address: address)
    }

    public func close() async throws { try await channel.close() }
}

/// Connections of the HTTP endpoint held now.
private final class OpenConnections: Sendable {
    private let count = Mutex(0)

    func enter(limit: Int) -> Bool {
        count.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
    }

    func leave() { count.withLock { $0 -= 1 } }
}

private final class StatusHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let metrics: ServiceMetrics
    let ready: @Sendable () async -> Bool
    private var path = ""

    init(metrics: ServiceMetrics, ready: @escaping @Sendable () async -> Bool) {
        self.metrics = metrics
        self.ready = ready
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            path = head.method == .GET ? String(head.uri.prefix(64)) : ""
        case .body:
            break
        case .end:
            let loop = context.eventLoop
            let contextBox = NIOLoopBound(context, eventLoop: loop)
            let path = self.path
            switch path {
            case "/metrics":
                respond(contextBox.value, status: .ok, body: metrics.exposition(), type: "text/plain; version=0.0.4")
            case "/health":
                respond(contextBox.value, status: .ok, body: "alive\n", type: "text/plain")
            case "/ready":
                let ready = self.ready
                let promise = loop.makePromise(of: Bool.self)
                promise.completeWithTask { await ready() }
                promise.futureResult.whenSuccess { isReady in
                    self.respond(contextBox.value, status: isReady ? .ok : .serviceUnavailable,
                                 body: isReady ? "ready\n" : "not ready: the store does not answer\n", type: "text/plain")
                }
            default:
                respond(contextBox.value, status: .notFound, body: "try /metrics, /ready or /health\n", type: "text/plain")
            }
        }
    }

    private func respond(_ context: ChannelHandlerContext, status: HTTPResponseStatus, body: String, type: String) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: type)
        headers.add(name: "Content-Length", value: "\(body.utf8.count)")
        headers.add(name: "Connection", value: "close")
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        var buffer = context.channel.allocator.buffer(capacity: body.utf8.count)
        buffer.writeString(body)
        context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in bound.value.close(promise: nil) }
    }
}
