import SottoExchangeCore

/// Why a client frame carries no request for the matcher: checked at the edge (the transport that received
/// it), before anything is written to the replication log.
public enum FrameRefusal: Error, Sendable, Hashable {
    /// The frame names an operation, which is refused: its status says why (`op` as the client sent it).
    case operation(UInt32, ExchangeError)
    /// The frame breaks the protocol: an `Error` frame says how (the session goes on).
    case protocolViolation(ExchangeError)

    /// The frame that tells the client.
    public var answer: ServerFrame {
        switch self {
        case .operation(let op, let error): return .status(.rejected(op, error))
        case .protocolViolation(let error): return .error(error)
        }
    }
}

extension ClientFrame {
    /// The request this frame carries, checked against every limit that does not depend on the matcher's
    /// state (what does, such as a duplicate operation or a project's publication bytes, the matcher checks
    /// when it applies the request); nil for a heartbeat, which only keeps the stream alive.
    ///
    /// Sightings whose frame did not come from a Sotto modem (not 2 to 16 bytes, or no payload kind) are left
    /// out; SNR and level are clamped to what a receiver can measure (-100 to 200 dB, -200 to 20 dBFS), NaN to 0.
    /// - Throws: ``FrameRefusal``: an operation refused, or a protocol violation.
    public func validatedRequest() throws(FrameRefusal) -> MatcherRequest? {
        func operation(_ raw: UInt32, unknownIfZero: Bool = false) throws(FrameRefusal) -> OperationID {
            guard raw != 0 else {
                throw .operation(raw, unknownIfZero ? .unknownOperation : .protocolViolation("operation ids start at 1"))
            }
            return OperationID(Int(raw))
        }
        switch kind {
        case .publish(let body):
            let op = try operation(body.opID)
            do throws(ExchangeError) {
                guard body.hasMessage else { throw .protocolViolation("a publication needs a message") }
                let message = try body.message.validated()
                let strategy = try (body.hasStrategy ? body.strategy : Sotto_Exchange_V1_Strategy()).validated(subscription: false)
                return .publish(op, message, strategy)
            } catch {
                throw .operation(body.opID, error)
            }
        case .subscribe(let body):
            let op = try operation(body.opID)
            do throws(ExchangeError) {
                let filter = try MessageFilter.validated(body.includes)
                let strategy = try (body.hasStrategy ? body.strategy : Sotto_Exchange_V1_Strategy()).validated(subscription: true)
                // 0: the service's default lost timeout (the matcher knows it).
                let lostTimeout = Double(body.lostTimeoutMs) / 1000
                guard body.lostTimeoutMs == 0 || ExchangeLimits.lostTimeoutRange.contains(lostTimeout) else {
                    throw .invalidLostTimeout(lostTimeout)
                }
                return .subscribe(op, filter, strategy, lostTimeout: lostTimeout)
            } catch {
                throw .operation(body.opID, error)
            }
        case .unpublish(let body):
            return .unpublish(try operation(body.opID, unknownIfZero: true))
        case .unsubscribe(let body):
            return .unsubscribe(try operation(body.opID, unknownIfZero: true))
        case .observe(let body):
            guard body.sightings.count <= ExchangeLimits.maxSightingsPerReport else {
                throw .protocolViolation(.protocolViolation(
                    "at most \(ExchangeLimits.maxSightingsPerReport) sightings per report, got \(body.sightings.count)"))
            }
            let sightings = body.sightings.compactMap { sighting -> Sighting? in
                // A modem token is 1 to 16 bytes; anything else did not come from a Sotto modem.
                guard (2...16).contains(sighting.frame.count), let payload = Payload(frame: Array(sighting.frame)) else { return nil }
                let snr = sighting.snrDb.isFinite ? min(max(sighting.snrDb, -100), 200) : 0
                let level = sighting.levelDbfs.isFinite ? min(max(sighting.levelDbfs, -200), 20) : 0
                return Sighting(payload: payload, snr: snr, level: level)
            }
            return .observe(sightings)
        case .takeTurns(let body):
            guard body.frameAirtimeMs <= ExchangeLimits.maxFrameAirtimeMs else {
                throw .protocolViolation(.protocolViolation(
                    "frame_airtime_ms \(body.frameAirtimeMs) is beyond \(ExchangeLimits.maxFrameAirtimeMs) ms: no Sotto frame lasts that long"))
            }
            guard body.aliasFrameAirtimeMs <= body.frameAirtimeMs else {
                throw .protocolViolation(.protocolViolation(
                    "alias_frame_airtime_ms \(body.aliasFrameAirtimeMs) is beyond frame_airtime_ms \(body.frameAirtimeMs): a room alias is shorter than a token"))
            }
            return .takeTurns(frameAirtime: Double(body.frameAirtimeMs) / 1000,
                              aliasAirtime: body.aliasFrameAirtimeMs > 0 ? Double(body.aliasFrameAirtimeMs) / 1000 : nil)
        case .heartbeat:
            return nil
        case .hello:
            throw .protocolViolation(.protocolViolation("a session says Hello once, first"))
        case .none:
            throw .protocolViolation(.protocolViolation("an empty or unknown frame"))
        }
    }
}
