import CFuzzerDriver
import Foundation
import SottoExchangeCore
import SottoExchangeWire

/// One input: the bytes as a client frame of the exchange protocol, decoded and checked at the service's edge
/// (`validatedRequest()`, into the request the matcher and its log get) and with the validating conversions it
/// is made of (messages, strategies, filters, sightings); and the same bytes as a server frame, decoded into the notice a client would act on.
/// Nothing may crash, and whatever validates must be within the exchange's limits.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzClientFrames(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = Data(bytes: data, count: size)
    if let frame = try? ClientFrame(serializedBytes: bytes) {
        // The service's edge: what it passes on to the matcher (and its log) is within every limit.
        if case .some(.some(let request)) = try? frame.validatedRequest() {
            switch request {
            case .publish(let op, let message, let strategy):
                precondition(op.value > 0, "operation id 0 passed")
                precondition(message.content.count <= ExchangeLimits.maxContentBytes, "oversized content passed")
                if case .infinite = strategy.ttl { preconditionFailure("an infinite publication passed") }
            case .subscribe(let op, let filter, _, let lostTimeout):
                precondition(op.value > 0, "operation id 0 passed")
                precondition(!filter.includes.isEmpty, "empty filter passed")
                precondition(lostTimeout == 0 || ExchangeLimits.lostTimeoutRange.contains(lostTimeout), "lost timeout \(lostTimeout) passed")
            case .observe(let sightings):
                precondition(sightings.count <= ExchangeLimits.maxSightingsPerReport, "too many sightings passed")
                precondition(sightings.allSatisfy { $0.snr.isFinite && $0.level.isFinite }, "a non-finite sighting passed")
            case .takeTurns(let frameAirtime, let aliasAirtime):
                precondition(frameAirtime <= Double(ExchangeLimits.maxFrameAirtimeMs) / 1000 && (aliasAirtime ?? 0) <= frameAirtime,
                             "airtimes beyond the limits passed")
            case .unpublish(let op), .unsubscribe(let op):
                precondition(op.value > 0, "operation id 0 passed")
            }
        }
        switch frame.kind {
        case .publish(let body):
            if let message = try? body.message.validated() {
                precondition(message.content.count <= ExchangeLimits.maxContentBytes, "oversized content validated")
                precondition(message.type.unicodeScalars.count <= ExchangeLimits.maxTypeLength, "long type validated")
            }
            if let strategy = try? body.strategy.validated(subscription: false), case .infinite = strategy.ttl {
                preconditionFailure("an infinite publication validated")
            }
        case .subscribe(let body):
            if let filter = try? MessageFilter.validated(body.includes) { precondition(!filter.includes.isEmpty, "empty filter validated") }
            _ = try? body.strategy.validated(subscription: true)
        case .observe(let body):
            for sighting in body.sightings { _ = Payload(frame: Array(sighting.frame)) }
        case .hello(let hello):
            _ = APIKeysParsing.parse(hello.apiKey)
        case .takeTurns(let body):
            // The airtime survives the client's conversion to seconds and back within the millisecond it rounds up.
            let alias = body.aliasFrameAirtimeMs > 0 ? Double(body.aliasFrameAirtimeMs) / 1000 : nil
            let again = ClientFrame(MatcherRequest.takeTurns(frameAirtime: Double(body.frameAirtimeMs) / 1000, aliasAirtime: alias))
            if case .takeTurns(let sent) = again.kind {
                precondition(sent.frameAirtimeMs >= body.frameAirtimeMs && sent.frameAirtimeMs - body.frameAirtimeMs <= 1, "airtime changed")
                precondition(sent.aliasFrameAirtimeMs >= body.aliasFrameAirtimeMs && sent.aliasFrameAirtimeMs - body.aliasFrameAirtimeMs <= 1,
                             "alias airtime changed")
            } else {
                preconditionFailure("TakeTurns did not round-trip")
            }
        case .unpublish, .unsubscribe, .heartbeat, .none:
            break
        }
    }
    if let frame = try? ServerFrame(serializedBytes: bytes), let notice = frame.notice,
       case .turns(let offsets, let follow, let alias) = notice {
        precondition(alias.map { $0 <= Payload.maxRoomAlias } ?? true, "alias out of range")
        // Whatever the service says, a client follows a bounded schedule.
        precondition(follow.isFinite && follow >= 0 && follow <= ExchangeLimits.maxTurnsFollow, "unbounded follow \(follow)")
        precondition(offsets.count <= ExchangeLimits.maxTurnsSlots && offsets.allSatisfy { $0 >= 0 && $0 <= follow }, "unbounded slots")
    }
    return 0
}

/// The shape check of API keys (the service's is in SottoExchangeService; this mirrors its rule without the
/// store): `sotto_<id>_<secret>`, under 200 bytes.
enum APIKeysParsing {
    static func parse(_ key: String) -> (Substring, Substring)? {
        guard key.hasPrefix("sotto_"), key.utf8.count < 200 else { return nil }
        let parts = key.dropFirst(6).split(separator: "_", omittingEmptySubsequences: false)
        return parts.count == 2 ? (parts[0], parts[1]) : nil
    }
}

/// The executable's entry point (SwiftPM's name for it): libFuzzer's driver with this target's input function.
@_cdecl("FuzzClientFrames_main")
public func fuzzClientFramesMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, { data, size in fuzzClientFrames(data, size) })
}
