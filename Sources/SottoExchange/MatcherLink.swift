import SottoExchangeCore

/// A connection from one client session to a matcher. The embedded ``LocalMatcher`` and the remote client
/// of `sotto serve` both provide it, so ``MessageManager`` has one API for both.
public protocol MatcherLink: Sendable {
    /// The notices for this session, in order; one sequence per link.
    var notices: AsyncStream<MatcherNotice> { get }
    /// Sends a request; its outcome arrives as notices.
    func send(_ request: MatcherRequest) async
    /// Ends the session: its publications are withdrawn and its subscriptions end.
    func close() async
}

/// One matcher core shared by several managers in one process (a kiosk, a test with many virtual devices):
/// each ``link(appID:broadcasts:)`` is a session of the same core. Time is this object's monotonic clock (s).
public actor LocalMatcher {
    private var core: MatcherCore
    private var continuations: [SessionID: AsyncStream<MatcherNotice>.Continuation] = [:]
    private let started = ContinuousClock.now
    private var ticker: Task<Void, Never>?
    private var nextSession = 0

    public init(core: MatcherCore = MatcherCore()) {
        self.core = core
    }

    private var now: Double {
        return (ContinuousClock.now - started).inSeconds
    }

    /// A new session of app `appID`.
    public func link(appID: String, broadcasts: Bool = true) -> Link {
        nextSession += 1
        let id = SessionID("local-\(nextSession)")
        let (stream, continuation) = AsyncStream.makeStream(of: MatcherNotice.self)
        continuations[id] = continuation
        continuation.yield(.connected(resumed: false))
        route(core.handle(.openSession(id, appID: appID, broadcasts: broadcasts), now: now))
        if ticker == nil {
            ticker = Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: .milliseconds(100))
                    await self?.tick()
                }
            }
        }
        return Link(matcher: self, session: id, notices: stream)
    }

    private func tick() { route(core.handle(.tick, now: now)) }

    fileprivate func handle(_ request: MatcherRequest, from session: SessionID) {
        let now = self.now
        switch request {
        case .publish(let op, let message, let strategy):
            continuations[session]?.yield(.accepted(op, visible: []))
            route(core.handle(.publish(session, op, message, strategy), now: now))
        case .unpublish(let op):
            route(core.handle(.unpublish(session, op), now: now))
        case .subscribe(let op, let filter, let strategy, let lostTimeout):
            continuations[session]?.yield(.accepted(op, visible: []))
            route(core.handle(.subscribe(session, op, filter, strategy, lostTimeout: lostTimeout), now: now))
        case .unsubscribe(let op):
            route(core.handle(.unsubscribe(session, op), now: now))
        case .observe(let sightings):
            for sighting in sightings {
                route(core.handle(.observe(session, sighting.payload, snr: sighting.snr, level: sighting.level), now: now))
            }
        case .takeTurns(let airtime, let aliasAirtime):
            route(core.handle(.takeTurns(session, frameAirtime: airtime, aliasAirtime: aliasAirtime), now: now))
        }
    }

    fileprivate func close(_ session: SessionID) {
        route(core.handle(.closeSession(session), now: now))
        continuations.removeValue(forKey: session)?.finish()
    }

    private func route(_ events: [MatcherEvent]) {
        for event in events {
            let (session, notice) = event.notice
            continuations[session]?.yield(notice)
        }
    }

    /// A session of a ``LocalMatcher``.
    public struct Link: MatcherLink {
        let matcher: LocalMatcher
        let session: SessionID
        public let notices: AsyncStream<MatcherNotice>
        public func send(_ request: MatcherRequest) async { await matcher.handle(request, from: session) }
        public func close() async { await matcher.close(session) }
    }
}

extension Duration {
    /// This duration in seconds (s).
    public var inSeconds: Double { Double(components.seconds) + Double(components.attoseconds) * 1e-18 }
}
