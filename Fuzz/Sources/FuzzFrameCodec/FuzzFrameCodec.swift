import CFuzzerDriver
import SottoModem

/// The frame codec alone, thousands of inputs a second (the streaming decoder's fuzzer runs tens): the
/// first byte picks the profile (bits 4-5) and the token length (low 4 bits + 1), the next bytes are the
/// token, and the rest perturbs the ideal log-likelihoods of the encoded frame (one signed byte per symbol
/// and tone, cycled; 0 leaves it alone). Checks: encoding never fails for a valid token; unperturbed
/// likelihoods decode to the token with no corrected bit; whatever the perturbation, decoding ends (no
/// crash, no hang) and a decoded frame has the asked length and encodes again to as many symbols.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFrameCodec(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size >= 2 else { return 0 }
    let profile = Profile.all[Int(data[0] >> 4) & 3]
    let length = Int(data[0] & 15) + 1
    guard size >= 1 + length else { return 0 }
    let token = Array(UnsafeBufferPointer(start: data + 1, count: length))
    guard let symbols = try? FrameFormat.symbols(payload: token, profile: profile) else { fatalError("a valid token did not encode") }
    // Ideal evidence: 0 for the sent value, -strength for the others.
    let strength: Float = 8
    var likelihoods = [Float](repeating: -strength, count: 16 * symbols.count)
    for (s, value) in symbols.enumerated() { likelihoods[16 * s + value] = 0 }
    let clean = FrameFormat.decode(symbolLogLikelihoods: likelihoods, payloadBytes: length, profile: profile)
    precondition(clean?.payload == token && clean?.correctedBits == 0, "a clean frame did not decode to its token")
    let perturbation = UnsafeBufferPointer(start: data + 1 + length, count: size - 1 - length)
    guard !perturbation.isEmpty else { return 0 }
    for i in likelihoods.indices {
        likelihoods[i] += Float(Int8(bitPattern: perturbation[i % perturbation.count])) / 16
    }
    guard let decoded = FrameFormat.decode(symbolLogLikelihoods: likelihoods, payloadBytes: length, profile: profile) else { return 0 }
    precondition(decoded.payload.count == length, "decoded \(decoded.payload.count) bytes for \(length)")
    guard let again = try? FrameFormat.symbols(payload: decoded.payload, profile: profile) else { fatalError("a decoded token did not encode") }
    precondition(again.count == symbols.count, "a decoded token encoded to \(again.count) symbols, not \(symbols.count)")
    return 0
}

/// The executable's entry point (SwiftPM's name for it): libFuzzer's driver with this target's input function.
@_cdecl("FuzzFrameCodec_main")
public func fuzzFrameCodecMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, { data, size in fuzzFrameCodec(data, size) })
}
