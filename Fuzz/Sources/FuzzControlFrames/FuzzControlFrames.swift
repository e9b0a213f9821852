import CFuzzerDriver
import Foundation
import SottoDaemon

/// One input: the bytes as a stream arriving on the daemon's control socket, split into frames by the same
/// decoder the daemon uses (fed in two pieces, as reads may cut it anywhere) and each frame decoded as a
/// request; and the bytes as one payload, as a request and as a reply. Nothing may crash, no frame may be
/// over the limit, and whatever decodes must be valid and encode back to the same request.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzControlFrames(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    var decoder = ControlFrameDecoder(limit: 1024)
    let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
    decoder.append(bytes[..<cut])
    var pieces = [ArraySlice(bytes[cut...])]
    while true {
        do {
            guard let payload = try decoder.next() else {
                guard let piece = pieces.popLast() else { break }
                decoder.append(piece)
                continue
            }
            precondition(!payload.isEmpty && payload.count <= 1024, "a frame outside the limits was decoded")
            check(payload)
        } catch { break }
    }
    check(bytes)
    _ = try? ControlReply.decode(bytes)
    return 0
}

private func check(_ payload: [UInt8]) {
    guard let request = try? ControlRequest(payload: payload) else { return }
    if case .start(let spec) = request { precondition((try? spec.validate()) != nil, "an invalid operation was accepted") }
    precondition((try? ControlRequest(payload: Array(request.payload))) == request, "a request does not survive encoding")
}

/// The executable's entry point (SwiftPM's name for it): libFuzzer's driver with this target's input function.
@_cdecl("FuzzControlFrames_main")
public func fuzzControlFramesMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, { data, size in fuzzControlFrames(data, size) })
}
