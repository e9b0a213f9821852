import NIOCore
import NIOWebSocket
import SottoExchangeWire
import SwiftProtobuf

/// The web transport's wire rule, apart from any socket: each WebSocket binary message is one protobuf
/// `ClientFrame` (to the service) or `ServerFrame` (to the page), as the gRPC stream's messages are.
/// Pure, so that the fuzzer and the tests drive it with any bytes.
public enum WebFrames {
    /// Largest WebSocket message accepted (bytes, after reassembly): the gRPC path's request limit.
    public static let maxMessageSize = MatcherServer.maxRequestPayloadSize
    /// Most fragments one message may come in.
    public static let maxFragments = 64

    /// The handler that joins a message's fragments (at most ``maxFragments``, ``maxMessageSize`` bytes in
    /// all) after NIO's frame decoder (whose limit is ``maxMessageSize`` per frame).
    public static func aggregator() -> NIOWebSocketFrameAggregator {
        NIOWebSocketFrameAggregator(minNonFinalFragmentSize: 1, maxAccumulatedFrameCount: maxFragments, maxAccumulatedFrameSize: maxMessageSize)
    }

    /// What the service does with one message from the page.
    public enum Inbound: Sendable, Equatable {
        /// A binary message holding a client frame: to the session.
        case frame(ClientFrame)
        /// A ping: answered with a pong carrying the same bytes.
        case ping([UInt8])
        /// A pong, or anything else to ignore.
        case ignore
        /// The page closes: the session ends.
        case close
        /// The message breaks the protocol: the connection is closed with this code and reason.
        case refuse(WebSocketErrorCode, String)
    }

    /// Classifies one whole (reassembled, unmasked) WebSocket message.
    /// - Parameters:
    ///   - opcode: its opcode.
    ///   - payload: its bytes.
    public static func classify(opcode: WebSocketOpcode, payload: [UInt8]) -> Inbound {
        switch opcode {
        case .binary:
            guard payload.count <= maxMessageSize else {
                return .refuse(.messageTooLarge, "a message of \(payload.count) bytes: at most \(maxMessageSize)")
            }
            do {
                return .frame(try ClientFrame(serializedBytes: payload))
            } catch {
                return .refuse(.dataInconsistentWithMessage, "a binary message that is not a ClientFrame (protobuf)")
            }
        case .text:
            return .refuse(.unacceptableData, "text messages are not part of the protocol: send each ClientFrame as one binary message")
        case .ping:
            return .ping(payload)
        case .pong:
            return .ignore
        case .connectionClose:
            return .close
        default:
            return .refuse(.protocolError, "an unknown WebSocket opcode")
        }
    }

    /// The WebSocket message carrying a server frame.
    /// - Parameters:
    ///   - frame: the frame.
    ///   - allocator: where its buffer comes from.
    static func message(_ frame: ServerFrame, allocator: ByteBufferAllocator) throws -> WebSocketFrame {
        let bytes: [UInt8] = try frame.serializedBytes()
        return WebSocketFrame(fin: true, opcode: .binary, data: allocator.buffer(bytes: bytes))
    }

    /// A close message with its status code and reason (cut to the 123 bytes a close frame has room for).
    /// - Parameters:
    ///   - code: the status.
    ///   - reason: why, for people.
    ///   - allocator: where its buffer comes from.
    static func close(_ code: WebSocketErrorCode, _ reason: String, allocator: ByteBufferAllocator) -> WebSocketFrame {
        var data = allocator.buffer(capacity: 125)
        data.write(webSocketErrorCode: code)
        var text = Substring(reason)
        while text.utf8.count > 123 { text = text.dropLast() }
        data.writeString(String(text))
        return WebSocketFrame(fin: true, opcode: .connectionClose, data: data)
    }
}
