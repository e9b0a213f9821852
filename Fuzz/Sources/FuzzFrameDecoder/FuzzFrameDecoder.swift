import CFuzzerDriver
import SottoModem

/// One input: the bytes as 16-bit little-endian samples at 48 kHz, decoded for the default profile in two
/// chunks (split at the first byte's share), then finished, listening for alias frames too when the first byte is odd, and cancelling each frame decoded to
/// look under it (`cancelsInterference`) when its second bit is set.
/// Every frame must have a valid token length, and an alias frame an alias of 12 bits in its two bytes.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFrameDecoder(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    guard size >= 3 else { return 0 }
    let count = (size - 1) / 2
    var samples = [Float](repeating: 0, count: count)
    for i in 0..<count {
        let value = Int16(bitPattern: UInt16(data[1 + 2 * i]) | UInt16(data[2 + 2 * i]) << 8)
        samples[i] = Float(value) / 32_768
    }
    let split = Int(data[0]) * count / 255
    guard let decoder = try? StreamingDecoder(sampleRate: 48_000, profiles: [.standard], aliasFrames: data[0] & 1 == 1,
                                                 cancelsInterference: data[0] & 2 == 2) else { fatalError("decoder") }
    var frames = samples.withUnsafeBufferPointer { decoder.process(UnsafeBufferPointer(rebasing: $0[0..<split])) }
    frames += samples.withUnsafeBufferPointer { decoder.process(UnsafeBufferPointer(rebasing: $0[split...])) }
    frames += decoder.finish()
    for frame in frames {
        precondition(FrameFormat.payloadBytes.contains(frame.token.count), "token of \(frame.token.count) bytes")
        if let alias = frame.alias {
            precondition(data[0] & 1 == 1 && alias <= FrameFormat.maxAlias && frame.token == [UInt8(alias >> 8), UInt8(alias & 0xFF)],
                         "alias frame \(alias) as \(frame.token)")
        }
    }
    return 0
}

/// The executable's entry point (SwiftPM's name for it): libFuzzer's driver with this target's input function.
@_cdecl("FuzzFrameDecoder_main")
public func fuzzFrameDecoderMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, { data, size in fuzzFrameDecoder(data, size) })
}
