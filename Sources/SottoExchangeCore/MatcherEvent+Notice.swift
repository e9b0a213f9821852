// What the matcher core tells sessions (MatcherEvent) in the words of the session it is for (MatcherNotice).

extension MatcherEvent {
    /// The session an event is for, and what that session is told.
    public var notice: (SessionID, MatcherNotice) {
        switch self {
        case .broadcastToken(let s, let token): return (s, .token(token))
        case .found(let s, let op, let message): return (s, .found(op, message))
        case .lost(let s, let op, let message): return (s, .lost(op, message))
        case .signalChanged(let s, let op, let message, let snr, let level): return (s, .signalChanged(op, message, snr: snr, level: level))
        case .expired(let s, let op): return (s, .expired(op))
        case .invalidToken(let s, let token): return (s, .invalidToken(token))
        case .broadcastTurns(let s, let offsets, let follow, let alias): return (s, .turns(slotOffsets: offsets, followFor: follow, alias: alias))
        case .broadcastProfile(let s, let profile): return (s, .profile(profile))
        }
    }
}
