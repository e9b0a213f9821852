import NIOCore
import NIOHPACK
import NIOHTTP2

/// Reads the 5-byte gRPC message prefixes (compressed flag, 32-bit big-endian length) of a request body as it
/// arrives, in pieces of any size, and reports the first message declared longer than the limit: a pure
/// core, no I/O.
struct MessageLengthScanner: Sendable, Equatable {
    /// Largest message accepted (bytes).
    let limit: Int
    /// Prefix bytes read so far of the next message (0 to 4).
    private var prefix: [UInt8] = []
    /// Bytes of the current message still to come.
    private var remaining = 0

    init(limit: Int) { self.limit = limit }

    /// Reads the next piece of the body; returns the declared length of the first message over the limit.
    mutating func scan(_ bytes: some Collection<UInt8>) -> Int? {
        var index = bytes.startIndex
        while index != bytes.endIndex {
            if remaining > 0 {
                let skip = min(remaining, bytes.distance(from: index, to: bytes.endIndex))
                index = bytes.index(index, offsetBy: skip)
                remaining -= skip
                continue
            }
            prefix.append(bytes[index])
            index = bytes.index(after: index)
            if prefix.count == 5 {
                let length = prefix[1...4].reduce(0) { $0 << 8 | Int($1) }
                prefix.removeAll(keepingCapacity: true)
                if length > limit { return length }
                remaining = length
            }
        }
        return nil
    }
}

/// First handler of each HTTP/2 stream: a request message declared longer than the limit ends the stream
/// at once with the gRPC status RESOURCE_EXHAUSTED naming the limit (trailers `sotto-error: frame-too-large`
/// and `sotto-limit`), before any of it is buffered, instead of the transport's RST_STREAM.
final class FrameSizeGuard: ChannelDuplexHandler {
    typealias InboundIn = HTTP2Frame.FramePayload
    typealias InboundOut = HTTP2Frame.FramePayload
    typealias OutboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    private var scanner: MessageLengthScanner
    private let onRefusal: @Sendable () -> Void
    private var headersSent = false
    private var refused = false

    /// - Parameters:
    ///   - limit: largest request message (bytes).
    ///   - onRefusal: called once when a stream is ended for a message over the limit.
    init(limit: Int, onRefusal: @escaping @Sendable () -> Void) {
        scanner = MessageLengthScanner(limit: limit)
        self.onRefusal = onRefusal
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !refused else { return }
        if case .data(let body) = unwrapInboundIn(data), case .byteBuffer(let buffer) = body.data,
           let length = scanner.scan(buffer.readableBytesView) {
            refuse(context: context, length: length)
            return
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard !refused else {
            promise?.fail(ChannelError.ioOnClosedChannel)
            return
        }
        if case .headers = unwrapOutboundIn(data) { headersSent = true }
        context.write(data, promise: promise)
    }

    private func refuse(context: ChannelHandlerContext, length: Int) {
        refused = true
        onRefusal()
        var headers = HPACKHeaders()
        if !headersSent {
            headers.add(name: ":status", value: "200")
            headers.add(name: "content-type", value: "application/grpc")
        }
        headers.add(name: "grpc-status", value: "8")  // RESOURCE_EXHAUSTED
        headers.add(name: "grpc-message", value: "a frame of \(length) bytes is over the limit of \(scanner.limit) bytes")
        headers.add(name: "sotto-error", value: "frame-too-large")
        headers.add(name: "sotto-limit", value: "\(scanner.limit)")
        let trailers = HTTP2Frame.FramePayload.headers(.init(headers: headers, endStream: true))
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(trailers)).whenComplete { _ in channel.close(promise: nil) }
    }
}
