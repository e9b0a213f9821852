import CFuzzerDriver
import NIOCore
import NIOEmbedded
import NIOWebSocket
import SottoExchangeService
import SottoExchangeWire

/// One input: the bytes a page sends on its WebSocket after the handshake, through the web transport's
/// decoding as `sotto serve --web` sets it up (NIO's frame decoder at the transport's size limit, the
/// transport's fragment aggregator, then ``WebFrames/classify(opcode:payload:)``); and the same bytes as an
/// `Origin` header through ``WebOrigin``. Nothing may crash; a message the transport takes as a client frame
/// is a binary one within the size limit; an origin that normalises is stable and allowed for itself.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzWebFrames(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let channel = EmbeddedChannel()
    defer { _ = try? channel.finish() }
    do {
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: WebFrames.maxMessageSize)))
        try channel.pipeline.syncOperations.addHandler(WebFrames.aggregator())
    } catch {
        preconditionFailure("the pipeline: \(error)")
    }
    // Two writes, split where the first byte says: frames cut across reads are reassembled.
    let cut = bytes.isEmpty ? 0 : min(Int(bytes[0]) * 8, bytes.count)
    for part in [bytes[..<cut], bytes[cut...]] where !part.isEmpty {
        do { try channel.writeInbound(ByteBuffer(bytes: part)) } catch { break }  // refused bytes: the connection ends
    }
    while let frame = try? channel.readInbound(as: WebSocketFrame.self) {
        let payload = Array(frame.unmaskedData.readableBytesView)
        switch WebFrames.classify(opcode: frame.opcode, payload: payload) {
        case .frame(let clientFrame):
            precondition(frame.opcode == .binary && payload.count <= WebFrames.maxMessageSize, "a client frame from \(frame.opcode)")
            _ = try? clientFrame.serializedBytes() as [UInt8]
        case .ping(let echo): precondition(echo == payload, "a pong that is not the ping's bytes")
        case .refuse(_, let reason): precondition(reason.utf8.count < 1_000, "an unbounded reason")
        case .ignore, .close: break
        }
    }
    let text = String(decoding: bytes, as: UTF8.self)
    if let origin = try? WebOrigin.normalize(text) {
        precondition((try? WebOrigin.normalize(origin)) == origin, "normalising \(origin) again changes it")
        precondition(WebOrigin.allows(text, [origin]), "\(origin) not allowed for itself")
        precondition(!origin.contains(" ") && origin.utf8.count <= 300, "an origin that cannot be stored: \(origin)")
    }
    return 0
}

/// The executable's entry point (SwiftPM's name for it): libFuzzer's driver with this target's input function.
@_cdecl("FuzzWebFrames_main")
public func fuzzWebFramesMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, { data, size in fuzzWebFrames(data, size) })
}
