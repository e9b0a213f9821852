import Foundation
import SottoExchangeCore
import SottoExchangeWire

extension ServerFrame {
    /// The frame of the exchange protocol (gRPC and WebSocket alike) that tells a session `notice`.
    /// - Parameters:
    ///   - notice: what the matcher tells the session.
    ///   - sessionGrace: how long the session outlives its stream (s), for the Welcome.
    ///   - heartbeatInterval: how often the client says something (s), for the Welcome.
    init(_ notice: SessionNotice, sessionGrace: Double, heartbeatInterval: Double) {
        switch notice {
        case .welcome(let session, let project, let resumed):
            var body = Sotto_Exchange_V1_Welcome()
            body.sessionID = session.value
            body.resumed = resumed
            body.project = project
            body.sessionGraceMs = UInt32(sessionGrace * 1000)
            body.heartbeatIntervalMs = UInt32(heartbeatInterval * 1000)
            self.init()
            kind = .welcome(body)
        case .matcher(let notice):
            self.init(notice)
        case .foundWithSignal(let op, let message, let snr, let level):
            self.init(MatcherNotice.found(op, message))
            if case .found(var body) = kind {
                body.snrDb = snr
                body.levelDbfs = level
                kind = .found(body)
            }
        case .ended(let op):
            self = .status(.ended(UInt32(clamping: op.value)))
        }
    }
}
