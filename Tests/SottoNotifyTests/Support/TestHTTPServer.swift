import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// An HTTP/1.1 server on 127.0.0.1 (a port the kernel picks) answering from a route table, recording each path.
final class TestHTTPServer: Sendable {
    enum Reply: Sendable {
        /// Status, headers, body; `length: false` sends the body chunked (no Content-Length).
        case respond(status: HTTPResponseStatus = .ok, headers: [(String, String)] = [], body: [UInt8] = [], length: Bool = true)
        /// Never answers (a stalled server).
        case hold
    }

    /// The paths requested, in order.
    final class Log: Sendable {
        let paths = Mutex<[String]>([])
    }

    private let channel: any Channel
    let port: Int
    let log: Log

    init(routes: @escaping @Sendable (String) -> Reply) async throws {
        let requested = Log()
        log = requested
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Handler(routes: routes, requested: requested))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
    }

    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }

    var paths: [String] { log.paths.withLock { $0 } }

    func stop() async {
        try? await channel.close()
    }

    private final class Handler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart
        let routes: @Sendable (String) -> Reply
        let requested: Log

        init(routes: @escaping @Sendable (String) -> Reply, requested: Log) {
            self.routes = routes
            self.requested = requested
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard case .head(let head) = unwrapInboundIn(data) else { return }
            requested.paths.withLock { $0.append(head.uri) }
            switch routes(head.uri) {
            case .hold:
                return
            case .respond(let status, let extra, let body, let length):
                var headers = HTTPHeaders(extra)
                if length { headers.replaceOrAdd(name: "content-length", value: String(body.count)) }
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
                if !body.isEmpty { context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: body)))), promise: nil) }
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}
