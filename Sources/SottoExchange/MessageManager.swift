import Foundation
import Logging
import SottoExchangeCore
import SottoSupport

/// An event of one subscription.
public enum SubscriptionEvent: Sendable, Hashable {
    case found(Message)
    case lost(Message)
    /// Received SNR (dB) of a found message moved by 6 dB or more; with its received level (dBFS).
    case signalChanged(Message, snr: Double, level: Double)
    /// The TTL elapsed; no more events follow.
    case expired
}

/// Status of a publication or subscription.
public enum OperationStatus: Sendable, Hashable { case inactive, starting, active, failed, expired }

/// The events of one subscription, as an `AsyncSequence`. Once the subscription is cancelled, no event
/// is delivered any more, not even one already buffered.
public struct SubscriptionEvents: AsyncSequence, Sendable {
    public typealias Element = SubscriptionEvent
    let stream: AsyncStream<SubscriptionEvent>
    let cancelled: StopFlag

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<SubscriptionEvent>.AsyncIterator
        let cancelled: StopFlag
        public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async -> SubscriptionEvent? {
            guard !cancelled.isSet, let event = await base.next(isolation: actor), !cancelled.isSet else { return nil }
            return event
        }

        public mutating func next() async -> SubscriptionEvent? { await next(isolation: nil) }
    }
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: stream.makeAsyncIterator(), cancelled: cancelled) }
}

/// A publication: cancelling (or releasing the last reference) unpublishes.
public final class PublicationHandle: Sendable {
    let id: OperationID
    let message: Message
    let manager: MessageManager
    init(id: OperationID, message: Message, manager: MessageManager) { self.id = id; self.message = message; self.manager = manager }
    /// Unpublishes; subscribers that had found the message get `lost` at once.
    public func cancel() async { await manager.end(id) }
    public func status() async -> OperationStatus { await manager.status(of: id) }
    /// Hands the id to the manager, whose own task ends the publication.
    deinit { manager.released(id) }
}

/// A subscription: its events, and cancellation.
public final class SubscriptionHandle: Sendable {
    let id: OperationID
    let manager: MessageManager
    /// Found, lost, signal changes and expiry, in order.
    public let events: SubscriptionEvents
    init(id: OperationID, manager: MessageManager, events: SubscriptionEvents) { self.id = id; self.manager = manager; self.events = events }
    /// Unsubscribes; when this returns, no more events are delivered.
    public func cancel() async { events.cancelled.set(); await manager.end(id) }
    public func status() async -> OperationStatus { await manager.status(of: id) }
    /// Hands the id to the manager, whose own task ends the subscription.
    deinit { events.cancelled.set(); manager.released(id) }
}

/// The exchange for one app: publish, subscribe, and feed it what the radio heard.
///
/// Backed either by an embedded `MatcherCore` owned by this manager (one process; time comes from the
/// caller's `now` (s): the monotonic clock live, the sample clock of a recording offline, so a recording
/// yields exactly the timeline it would have produced live), or by a ``MatcherLink``: a ``LocalMatcher``
/// shared by several managers in one process, or a connection to `sotto serve`. The API, the handles, the
/// event sequence and the statuses are the same; with a link, found and lost strictly alternate per
/// subscription and message across reconnections too (this manager keeps what it reported).
public actor MessageManager {
    public let appID: String
    /// This session's id (with a link: assigned by the matcher; local until it is known).
    public let session: SessionID
    private enum Backend {
        case embedded(MatcherCore)
        case linked(any MatcherLink)
    }
    private var backend: Backend
    private let lostTimeout: Double
    private var nextID = 0
    /// Its book.operations, the link's state and the tokens to ignore: a value changed by the matcher's notices.
    private var book = ManagerBook()
    private var logger: Logger
    private let consent: Consent?
    /// Seconds an unknown token is ignored after the matcher called it invalid.
    public static let invalidTokenCache = 600.0
    /// With a link: a payload still being heard is reported at most this often (s); the first sighting at once.
    public static let reportInterval = ExchangeLimits.sightingReportInterval
    /// With a link: how long `publish` and `subscribe` wait for the matcher's answer before returning a
    /// handle whose status is `starting` (s).
    public static let acceptTimeout = 10.0

    private var pump: Task<Void, Never>?
    private var linkTicker: Task<Void, Never>?
    /// With a link: the manager's time (s since its creation) on the clock it was given, and sleeping on it.
    private let linkTime: Stopwatch
    /// Handles released without a cancel (their deinit cannot wait): ended in turn by `reaper`.
    private let releasedIDs: (stream: AsyncStream<(OperationID, MessageManager)>, continuation: AsyncStream<(OperationID, MessageManager)>.Continuation)
    private var reaper: Task<Void, Never>?
    /// Called when the link to a matcher service goes down, comes back or fails for good (with a link only).
    private var connectionHandler: (@Sendable (MatcherNotice) -> Void)?
    /// Called with the matcher's turns for this session's token frames (the radio follows them).
    private var turnsHandler: (@Sendable (_ slotOffsets: [Double], _ followFor: Double, _ alias: UInt16?) -> Void)?

    /// An embedded manager with its own matcher core.
    /// - Parameters:
    ///   - appID: the app; only its own messages and public beacon attachments are found.
    ///   - session: this device's session in the core.
    ///   - lostTimeout: default time without a sighting before `lost` (s).
    ///   - broadcasts: whether this device plays a token (scan-only devices do not).
    ///   - core: the matcher core to own (a fresh one by default, or one shared state restored from a snapshot).
    ///   - consent: when given, publishing and subscribing need the user's consent.
    ///   - now: the caller's clock at creation (s): the same clock as every later `now`.
    public init(appID: String, session: SessionID = SessionID(UUID().uuidString), lostTimeout: Double = 10,
                broadcasts: Bool = true, core: MatcherCore = MatcherCore(), consent: Consent? = nil, now: Double = 0) {
        self.consent = consent
        self.appID = appID
        self.session = session
        self.lostTimeout = lostTimeout
        var core = core
        _ = core.handle(.openSession(session, appID: appID, broadcasts: broadcasts), now: now)  // its token is read from the core
        self.backend = .embedded(core)
        self.linkTime = Stopwatch(ContinuousClock())
        self.releasedIDs = AsyncStream.makeStream()
        var logger = Logger(label: "sotto.exchange")
        logger.logLevel = ProcessInfo.processInfo.environment["SOTTO_DEBUG"] == "1" ? .debug : .info
        self.logger = logger
    }

    /// A manager whose matcher is at the other end of `link` (a ``LocalMatcher`` session or a connection to
    /// `sotto serve`). The matcher keeps the matching's time; this manager's own (how often a sighting is
    /// reported, how long an invalid token is ignored, when a reconnection's unconfirmed messages are lost,
    /// how long `connect` and an operation wait) is `clock`'s, so the `now` arguments, the time of an
    /// embedded core, are not used.
    /// - Parameters:
    ///   - link: the session of a matcher this manager uses.
    ///   - appID: for logs only (the matcher knows the project from the link).
    ///   - lostTimeout: default time without a sighting before `lost` (s).
    ///   - consent: when given, publishing and subscribing need the user's consent.
    ///   - clock: the manager's own time (a monotonic clock live; a manual one in tests).
    ///   - onConnection: called with `connected`, `disconnected` and `failed` notices.
    public init(link: any MatcherLink, appID: String = "", lostTimeout: Double = 10, consent: Consent? = nil,
                clock: any Clock<Duration> = ContinuousClock(), onConnection: (@Sendable (MatcherNotice) -> Void)? = nil) {
        self.consent = consent
        self.linkTime = Stopwatch(clock)
        self.releasedIDs = AsyncStream.makeStream()
        self.appID = appID
        self.session = SessionID("linked-\(UUID().uuidString)")
        self.lostTimeout = lostTimeout
        self.backend = .linked(link)
        self.connectionHandler = onConnection
        var logger = Logger(label: "sotto.exchange")
        logger.logLevel = ProcessInfo.processInfo.environment["SOTTO_DEBUG"] == "1" ? .debug : .info
        self.logger = logger
    }

    /// Starts reading the link's notices (once).
    private func startLink() {
        guard pump == nil, case .linked(let link) = backend else { return }
        let notices = link.notices
        pump = Task { [weak self] in
            for await notice in notices { await self?.receive(notice) }
            await self?.receive(.disconnected(reason: "link closed"))
        }
        let time = linkTime
        linkTicker = Task { [weak self] in
            while (try? await time.sleep(0.25)) != nil {
                await self?.expireUnconfirmed()
            }
        }
    }

    /// Ends the operation of a handle released without a cancel, on this manager's own task (started with
    /// the first handle, cancelled when the manager goes).
    nonisolated func released(_ id: OperationID) {
        releasedIDs.continuation.yield((id, self))
    }

    private func startReaper() {
        guard reaper == nil else { return }
        let ids = releasedIDs.stream
        // The manager comes with each id (a handle may hold its last reference), so the task holds none.
        reaper = Task { for await (id, manager) in ids { await manager.end(id) } }
    }

    deinit {
        releasedIDs.continuation.finish()
        reaper?.cancel()
        pump?.cancel()
        linkTicker?.cancel()
        for waiter in connectionWaiters.values { waiter.timer?.cancel() }
        for operation in book.operations.values { if case .waiting(let waiter) = operation.answer { waiter.timer?.cancel() } }
    }


    private var connectionWaiters: [Int: Waiter] = [:]
    private var nextWaiter = 0

    /// With a link: waits until it is connected, for at most `timeout` (s). Embedded managers return at once.
    /// - Throws: the link's failure (a wrong API key, a session quota) or `unavailable` after the timeout.
    public func connect(timeout: Double = 10) async throws(ExchangeError) {
        guard isLinked else { return }
        startLink()
        if let failure = book.link.failure { throw failure }
        if book.link.connected { return }
        nextWaiter += 1
        let key = nextWaiter, time = linkTime
        let outcome: ExchangeError? = await withCheckedContinuation { continuation in
            // This caller's timer (cancelled once the link connects or fails) wakes this caller only.
            let timer = Task { [weak self] in
                guard (try? await time.sleep(timeout)) != nil else { return }
                await self?.wakeConnectionWaiter(key, .unavailable("not connected after \(timeout) s"))
            }
            connectionWaiters[key] = Waiter(continuation: continuation, timer: timer)
        }
        if let outcome { throw outcome }
    }

    private func wakeConnectionWaiter(_ key: Int, _ outcome: ExchangeError?) {
        guard let waiter = connectionWaiters.removeValue(forKey: key) else { return }
        waiter.timer?.cancel()
        waiter.continuation.resume(returning: outcome)
    }

    private func wakeConnectionWaiters(_ outcome: ExchangeError?) {
        for key in Array(connectionWaiters.keys) { wakeConnectionWaiter(key, outcome) }
    }

    private var clock: Double { linkTime.elapsed() }

    /// Sets what receives the matcher's turns for this session's token frames: the offsets of the slots and
    /// how long to follow them (s after the notice was made), and the room alias to play in those slots instead of
    /// the token (nil: the token). The radio that plays the token sets it.
    /// - Parameter handler: called on the manager's executor for every turns notice; nil: turns are ignored.
    public func setTurnsHandler(_ handler: (@Sendable (_ slotOffsets: [Double], _ followFor: Double, _ alias: UInt16?) -> Void)?) {
        turnsHandler = handler
    }

    /// Switches debug logging at run time (also on with SOTTO_DEBUG=1).
    public func setDebugLogging(_ on: Bool) { logger.logLevel = on ? .debug : .info }

    private var liveCount: Int { book.operations.values.filter(\.isLive).count }

    private func newID() throws(ExchangeError) -> OperationID {
        if let consent, !consent.isGranted { throw .consentNotGranted }
        guard liveCount < ExchangeLimits.maxOperationsPerApp else {
            throw .quotaExceeded(ExchangeLimits.maxOperationsPerApp)
        }
        nextID += 1
        startReaper()
        return OperationID(nextID)
    }

    /// Publishes `message` (audio-bytes messages are carried in the frame itself). With a link, returns once
    /// the matcher accepted it (or after ``acceptTimeout`` with the status `starting`).
    /// - Throws: the matcher's refusal as an `ExchangeError` (limits, quota, rate).
    public func publish(_ message: Message, strategy: Strategy = .default, now: Double) async throws(ExchangeError) -> PublicationHandle {
        if case .infinite = strategy.ttl { throw .invalidTTL(Int.max) }
        let id = try newID()
        book.operations[id] = OperationRecord(status: .starting, mode: strategy.discoveryMode, audio: message.isAudioBytes ? message : nil)
        logger.debug("publish \(message)")
        switch backend {
        case .embedded(var core):
            book.operations[id]?.status = .active
            let events = core.handle(.publish(session, id, message, strategy), now: now)
            backend = .embedded(core)
            apply(events)
        case .linked(let link):
            try await request(.publish(id, message, strategy), id: id, over: link)
        }
        return PublicationHandle(id: id, message: message, manager: self)
    }

    /// Subscribes with `filter`; events come through the handle's `events` and `handler`. With a link,
    /// returns once the matcher accepted it (or after ``acceptTimeout`` with the status `starting`).
    /// - Parameters:
    ///   - filter: which messages to find (namespace and type, or all of this app's types).
    ///   - strategy: discovery mode and TTL.
    ///   - lostTimeout: time without a sighting before `lost` (s); the manager's default if nil.
    ///   - now: the caller's clock (s); ignored with a link.
    ///   - handler: called with each event, in order, besides the handle's `events`.
    public func subscribe(filter: MessageFilter = .allMyTypes, strategy: Strategy = .default, lostTimeout: Double? = nil,
                          now: Double, handler: (@Sendable (SubscriptionEvent) -> Void)? = nil) async throws(ExchangeError) -> SubscriptionHandle {
        let id = try newID()
        let timeout = lostTimeout ?? self.lostTimeout
        let (stream, continuation) = AsyncStream.makeStream(of: SubscriptionEvent.self)
        let flag = StopFlag()
        let subscription = SubscriptionRecord(continuation: continuation, handler: handler, cancelled: flag, lostTimeout: timeout)
        book.operations[id] = OperationRecord(status: .starting, mode: strategy.discoveryMode, subscription: subscription)
        switch backend {
        case .embedded(var core):
            book.operations[id]?.status = .active
            let events = core.handle(.subscribe(session, id, filter, strategy, lostTimeout: timeout), now: now)
            backend = .embedded(core)
            apply(events)
        case .linked(let link):
            do throws(ExchangeError) {
                try await request(.subscribe(id, filter, strategy, lostTimeout: timeout), id: id, over: link)
            } catch {
                book.operations[id]?.takeSubscription()?.continuation.finish()
                throw error
            }
        }
        return SubscriptionHandle(id: id, manager: self, events: SubscriptionEvents(stream: stream, cancelled: flag))
    }

    /// Sends an operation over the link and waits for the matcher's answer while connected.
    private func request(_ request: MatcherRequest, id: OperationID, over link: any MatcherLink) async throws(ExchangeError) {
        startLink()
        book.operations[id]?.answer = .sending
        await link.send(request)
        let answer = book.operations[id]?.answer
        book.operations[id]?.answer = nil
        let refusal: ExchangeError?
        if case .answeredWhileSending(let early) = answer {
            refusal = early
        } else {
            guard book.link.connected else { return }  // re-established with the others when the link is back
            let time = linkTime
            refusal = await withCheckedContinuation { continuation in
                // Cancelled when the answer comes first.
                let timer = Task { [weak self] in
                    guard (try? await time.sleep(Self.acceptTimeout)) != nil else { return }
                    await self?.resolveAccept(id, with: nil)
                }
                book.operations[id]?.answer = .waiting(Waiter(continuation: continuation, timer: timer))
            }
        }
        if let refusal {
            book.operations[id]?.fail()?.finish()
            throw refusal
        }
    }

    private func resolveAccept(_ id: OperationID, with refusal: ExchangeError?) {
        perform(book.resolveAccept(id, with: refusal))
    }

    /// Ends an operation; `cancelled` (the user's cancel, not the session's end) also drops events not
    /// yet read.
    func end(_ id: OperationID, now: Double? = nil, cancelled: Bool = true) async {
        guard var operation = book.operations[id], operation.isLive else { return }
        let isSubscription = operation.subscription != nil
        if cancelled { operation.subscription?.cancelled.set() }
        operation.status = .inactive
        operation.mode = nil
        operation.audio = nil
        operation.takeSubscription()?.continuation.finish()
        book.operations[id] = operation
        switch backend {
        case .embedded(var core):
            let events = core.handle(isSubscription ? .unsubscribe(session, id) : .unpublish(session, id), now: now ?? lastNow)
            backend = .embedded(core)
            if !isSubscription { apply(events) }
        case .linked(let link):
            await link.send(isSubscription ? .unsubscribe(id) : .unpublish(id))
        }
    }

    /// An active operation reports the radio's state (starting while the devices open, failed while they
    /// are in error) and, with a link, the matcher's (starting until it accepted the operation and while
    /// the link is reconnecting); active otherwise.
    func status(of id: OperationID) -> OperationStatus {
        let status = book.operations[id]?.status ?? .inactive
        if case .linked = backend, status == .active, !book.link.connected { return .starting }
        guard status == .active else { return status }
        switch radio {
        case .starting: return .starting
        case .failed: return .failed
        case .running, .none: return .active
        }
    }

    /// The state of the radio feeding this manager.
    package enum RadioState { case none, starting, running, failed }
    private var radio = RadioState.none

    /// Set by the audio radio.
    package func setRadio(_ state: RadioState) { radio = state }

    private var lastNow = 0.0

    /// Whether some live operation listens (scan or both): the radio reports what it hears if any wants to
    /// scan (Nearby's fold of the book.operations' strategies).
    private var scans: Bool { book.operations.values.contains { $0.mode != nil && $0.mode != .broadcast } }
    /// Whether some live operation plays the token (broadcast or both).
    private var broadcastsToken: Bool { book.operations.values.contains { $0.mode != nil && $0.mode != .scan } }

    /// Feeds one decoded frame heard at `now` with this SNR (dB) and level (dBFS): a token frame's bytes, or the
    /// room alias of the modem's alias frame (`alias`; `frame` is then ignored). A token frame that claims the
    /// room-alias kind is ignored (`Payload(decoded:alias:)`), and so is everything while no live operation
    /// scans. `unixTime` (s since 1970) is the wall clock when it was heard, the time base of rotating beacons in an
    /// embedded core; nil when `now` is Unix time itself.
    public func heard(frame: [UInt8], alias: UInt16? = nil, snr: Double, level: Double, now: Double, unixTime: Double? = nil) async {
        guard let payload = Payload(decoded: frame, alias: alias) else { return }
        switch backend {
        case .embedded(var core):
            lastNow = now
            guard scans else { return }
            if case .token(let token) = payload, let until = book.invalidTokens[token], now < until { return }
            let events = core.handle(.observe(session, payload, snr: snr, level: level), now: now, unixTime: unixTime ?? now)
            backend = .embedded(core)
            apply(events)
        case .linked(let link):
            let now = clock
            guard scans, book.link.connected else { return }
            if case .token(let token) = payload {
                if let until = book.invalidTokens[token], now < until { return }
                if token == book.link.token { return }  // our own token: the self-check's business
            }
            if let last = book.link.lastReported[payload], now - last < Self.reportInterval { return }
            book.link.lastReported[payload] = now
            if book.link.lastReported.count > 10_000 { book.link.lastReported = book.link.lastReported.filter { now - $0.value < Self.reportInterval } }
            await link.send(.observe([Sighting(payload: payload, snr: snr, level: level)]))
        }
    }

    /// Tells the matcher that this session's radio follows its turns (``setTurnsHandler(_:)``) for token frames
    /// of `frameAirtime` (s); 0: no longer. A matcher that plans no turns ignores it.
    /// - Parameters:
    ///   - frameAirtime: the airtime of one token frame as the radio plays it (s).
    ///   - aliasAirtime: the airtime of a room-alias frame as the radio plays it (s); nil when it cannot play one.
    public func takeTurns(frameAirtime: Double, aliasAirtime: Double? = nil) async {
        switch backend {
        case .embedded(var core):
            let events = core.handle(.takeTurns(session, frameAirtime: frameAirtime, aliasAirtime: aliasAirtime), now: lastNow)
            backend = .embedded(core)
            apply(events)
        case .linked(let link):
            await link.send(.takeTurns(frameAirtime: frameAirtime, aliasAirtime: aliasAirtime))
        }
    }

    /// Lets time pass to `now`: TTL expiry, lost timeouts, token rotation (embedded; a linked matcher keeps
    /// its own time).
    public func tick(now: Double) {
        lastNow = now
        book.invalidTokens = book.invalidTokens.filter { $0.value > now }
        guard case .embedded(var core) = backend else { return }
        let events = core.handle(.tick, now: now)
        backend = .embedded(core)
        apply(events)
    }

    /// Ends the session: every found message is lost, every operation ends.
    public func close(now: Double) async {
        switch backend {
        case .embedded(var core):
            let events = core.handle(.closeSession(session), now: now)
            backend = .embedded(core)
            apply(events)
        case .linked(let link):
            perform(book.closeLink())
            await link.close()
            pump?.cancel()
            linkTicker?.cancel()
        }
        // Handles released from now on have nothing to end; the reaper ends those already handed in, then stops.
        defer { releasedIDs.continuation.finish() }
        for (id, operation) in book.operations where operation.isLive { await end(id, now: now, cancelled: false) }
    }

    /// What the radio should loop now: the session's token (while some operation broadcasts) and the
    /// audio-bytes publications.
    public var transmitPlan: [Payload] {
        var plan: [Payload] = []
        let token: [UInt8]?
        switch backend {
        case .embedded(let core): token = core.token(of: session)
        case .linked: token = book.link.token
        }
        if let token, liveCount > 0, broadcastsToken { plan.append(.token(token)) }
        plan += book.operations.values.compactMap(\.audio).sorted { $0.content.lexicographicallyPrecedes($1.content) }.map { .audioBytes($0.content) }
        return plan
    }

    /// The modem profile the matcher directs this session to play its token frames in (link adaptation,
    /// `MatcherNotice.profile`): the default profile until it says otherwise, and again on a new session.
    /// The radio that plays the token reads it.
    public var broadcastProfile: BroadcastProfile { book.broadcastProfile }

    /// The token this session broadcasts (nil until the matcher issued one).
    public var token: [UInt8]? {
        switch backend {
        case .embedded(let core): return core.token(of: session)
        case .linked: return book.link.token
        }
    }

    // MARK: Events

    private func apply(_ events: [MatcherEvent]) {
        for event in events {
            let (target, notice) = event.notice
            guard target == session else { continue }
            receive(notice)
        }
    }

    /// One notice from the matcher (embedded events are turned into notices too).
    private func receive(_ notice: MatcherNotice) {
        perform(book.receive(notice, now: isLinked ? clock : lastNow))
    }

    private var isLinked: Bool { if case .linked = backend { return true } else { return false } }

    /// Reports lost what a new session did not confirm in time.
    private func expireUnconfirmed() {
        perform(book.expireUnconfirmed(now: clock))
    }

    /// Does what the book says, in order.
    private func perform(_ actions: [ManagerBook.Action]) {
        for action in actions {
            switch action {
            case .deliver(let event, let subscription):
                guard !subscription.cancelled.isSet else { continue }
                logger.debug("\(event)")
                subscription.continuation.yield(event)
                subscription.handler?(event)
            case .finish(let events):
                events.finish()
            case .answer(let waiter, let refusal):
                waiter.timer?.cancel()
                waiter.continuation.resume(returning: refusal)
            case .wakeConnectionWaiters(let outcome):
                wakeConnectionWaiters(outcome)
            case .connectionChanged(let notice):
                connectionHandler?(notice)
            case .turns(let offsets, let follow, let alias):
                turnsHandler?(offsets, follow, alias)
            case .debug(let message):
                logger.debug("\(message)")
            }
        }
    }
}

/// Everything a ``MessageManager`` knows of one operation, a publication or a subscription.
struct OperationRecord {
    var status: OperationStatus
    /// The discovery mode while the operation counts for the radio (nil once it ended or was refused).
    var mode: Strategy.DiscoveryMode?
    /// An audio-bytes publication's message while the radio plays it.
    var audio: Message?
    /// A subscription's delivery and what it reported, until it ends.
    var subscription: SubscriptionRecord?
    /// With a link: the request's answer while its sender waits for it.
    var answer: OperationAnswer?

    var isLive: Bool { status == .active || status == .starting }

    /// Refused or failed: off the radio, no more events. Returns the subscription's events to finish.
    mutating func fail() -> AsyncStream<SubscriptionEvent>.Continuation? {
        status = .failed
        mode = nil
        audio = nil
        return takeSubscription()?.continuation
    }

    /// Ends the subscription's delivery; the caller finishes its events (what was buffered can still be read
    /// unless it was cancelled).
    mutating func takeSubscription() -> SubscriptionRecord? {
        defer { subscription = nil }
        return subscription
    }
}

/// A subscription's delivery, and what it reported to its reader.
struct SubscriptionRecord {
    let continuation: AsyncStream<SubscriptionEvent>.Continuation
    let handler: (@Sendable (SubscriptionEvent) -> Void)?
    let cancelled: StopFlag
    /// Time without a sighting before `lost` (s).
    let lostTimeout: Double
    /// What it has reported found (found and lost alternate against this).
    var reported: Set<Message> = []
    /// After a reconnection to a new session: messages reported found that the matcher has not confirmed
    /// yet, with the time (s) at which they are reported lost unless found again.
    var unconfirmed: [Message: Double] = [:]
}

/// Where a linked operation's request is.
enum OperationAnswer {
    /// Being sent (a link whose `send` suspends, as a ``LocalMatcher``'s does, can have the answer handled
    /// during the send).
    case sending
    /// The answer came while it was being sent: nil accepted, else the refusal.
    case answeredWhileSending(ExchangeError?)
    /// Its sender waits for the answer.
    case waiting(Waiter)
}

/// A caller waiting for an answer, and the task that gives up on its behalf.
struct Waiter {
    let continuation: CheckedContinuation<ExchangeError?, Never>
    var timer: Task<Void, Never>?
}
