import CFuzzerDriver
import SottoExchangeCore

/// One input: a matcher snapshot as a node of a cluster reads it from the shared database
/// (MatcherCore(snapshot:generator:)). The first byte picks how: 0, the bytes as a whole snapshot; else the
/// state of a busy core's snapshot with the input written over it at an offset the next two bytes give, and
/// sealed again with a correct header and checksum, so that the fuzzer reaches the state decoder rather than
/// stopping at the checksum: the state is this build's protobuf (format 5); whole snapshots of the hand-written
/// format 4 (corpus: legacy-format-4) reach the old format's reader. A core that restores must then take inputs
/// and snapshot again without trapping.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMatcherSnapshot(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let snapshot: [UInt8]
    if input[0] == 0 {
        snapshot = Array(input.dropFirst())
    } else {
        var state = Base.state
        let offset = input.count >= 3 ? (Int(input[1]) << 8 | Int(input[2])) % max(1, state.count) : 0
        for (i, byte) in input.dropFirst(3).enumerated() {
            if offset + i < state.count { state[offset + i] = byte } else { state.append(byte) }
        }
        snapshot = Base.sealed(state)
    }
    guard var core = try? MatcherCore(snapshot: snapshot, generator: SystemRandomNumberGenerator()) else { return 0 }
    _ = core.handle(.tick, now: 1e6)
    _ = core.handle(.openSession(SessionID("fuzz"), appID: "app", broadcasts: true), now: 1e6 + 1)
    _ = core.snapshot()
    return 0
}

/// A busy core's snapshot, and how a snapshot's header is made (magic, version, state length, FNV-1a 64).
enum Base {
    static let headerSize = 24

    static let state: [UInt8] = {
        var core = MatcherCore()
        var tokens: [[UInt8]] = []
        for i in 0..<6 {
            let id = SessionID("s\(i)")
            for event in core.handle(.openSession(id, appID: "app", broadcasts: true), now: 0) {
                if case .broadcastToken(_, let token) = event { tokens.append(token) }
            }
            if let message = try? Message(namespace: "ns", type: "t", content: [UInt8(i)]) {
                _ = core.handle(.publish(id, OperationID(1), message, .default), now: 0)
            }
            _ = core.handle(.subscribe(id, OperationID(2), .allMyTypes, .default, lostTimeout: 5), now: 0)
        }
        for (i, token) in tokens.enumerated() {
            _ = core.handle(.observe(SessionID("s\((i + 1) % tokens.count)"), .token(token), snr: 20, level: -30), now: 1)
        }
        return Array(core.snapshot().dropFirst(headerSize))
    }()

    static func sealed(_ state: [UInt8]) -> [UInt8] {
        var bytes = Array("SMCS".utf8)
        append(MatcherCore.snapshotFormatVersion, to: &bytes)
        append(UInt64(state.count), to: &bytes)
        var hash: UInt64 = 0xCBF2_9CE4_8422_2325
        for byte in state { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
        append(hash, to: &bytes)
        return bytes + state
    }

    static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }
}

/// The executable's entry point (SwiftPM's name for it): libFuzzer's driver with this target's input function.
@_cdecl("FuzzMatcherSnapshot_main")
public func fuzzMatcherSnapshotMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, { data, size in fuzzMatcherSnapshot(data, size) })
}
