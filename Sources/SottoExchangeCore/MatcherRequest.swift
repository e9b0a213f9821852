/// What a client session asks of a matcher (embedded or remote).
public enum MatcherRequest: Sendable, Hashable {
    case publish(OperationID, Message, Strategy)
    case unpublish(OperationID)
    case subscribe(OperationID, MessageFilter, Strategy, lostTimeout: Double)
    case unsubscribe(OperationID)
    /// Frames the session's modem decoded.
    case observe([Sighting])
    /// The session's radio follows the matcher's turns for its token frames, which last `frameAirtime` (s);
    /// 0: no longer. With `aliasAirtime` (s), it can play a room alias of that airtime in its slots.
    case takeTurns(frameAirtime: Double, aliasAirtime: Double?)
}

/// One decoded frame as reported to a matcher: the payload, its in-band SNR (dB) and received level (dBFS).
public struct Sighting: Sendable, Hashable {
    public let payload: Payload
    public let snr: Double
    public let level: Double
    public init(payload: Payload, snr: Double, level: Double) {
        self.payload = payload
        self.snr = snr
        self.level = level
    }
}

/// What a matcher tells one client session, in order.
public enum MatcherNotice: Sendable, Hashable {
    /// The session must broadcast this token (issued or rotated).
    case token([UInt8])
    /// The matcher took the operation. For a subscription: what it has found right now (a resumed
    /// session's client reconciles what it reported against this).
    case accepted(OperationID, visible: [Message])
    /// The matcher refused the operation; it is not active.
    case rejected(OperationID, ExchangeError)
    case found(OperationID, Message)
    case lost(OperationID, Message)
    case signalChanged(OperationID, Message, snr: Double, level: Double)
    case expired(OperationID)
    /// The token heard resolves to nothing: stop reporting it for a while.
    case invalidToken([UInt8])
    /// The link is up. `resumed`: the matcher still held this session (nothing was lost); otherwise a new
    /// session began and every operation was sent again.
    case connected(resumed: Bool)
    /// The link is down and reconnecting; operations are re-established when it is back.
    case disconnected(reason: String)
    /// The matcher's turns for this session's token frames: start one at each of `slotOffsets` (s after the
    /// notice was made; the delay of its delivery comes out of the slot's guard), nothing else for `followFor`
    /// (s), then the sender's own rules again. With `alias`, the slots are for that room alias's frame
    /// (``Payload/roomAlias(_:)``) instead of the token's.
    case turns(slotOffsets: [Double], followFor: Double, alias: UInt16?)
    /// Link adaptation: play this session's token frames in this profile from now on (sent when it changes, and
    /// again to a resumed session).
    case profile(BroadcastProfile)
    /// The link gave up for good (a wrong API key, a session quota): nothing more will come.
    case failed(ExchangeError)
}
