import Foundation
import Logging
import Synchronization

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
    let cancelled: CancelFlag

    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: AsyncStream<SubscriptionEvent>.AsyncIterator
        let cancelled: CancelFlag
        public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async -> SubscriptionEvent? {
            guard !cancelled.isSet, let event = await base.next(isolation: actor), !cancelled.isSet else { return nil }
            return event
        }

        public mutating func next() async -> SubscriptionEvent? { await next(isolation: nil) }
    }
    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: stream.makeAsyncIterator(), cancelled: cancelled) }
}

/// Set once, read from anywhere.
public final class CancelFlag: Sendable {
    private let value = Atomic<Bool>(false)
    var isSet: Bool { value.load(ordering: .acquiring) }
    func set() { value.store(true, ordering: .releasing) }
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
    deinit { let manager = self.manager, id = self.id; Task { await manager.end(id) } }
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
    deinit { events.cancelled.set(); let manager = self.manager, id = self.id; Task { await manager.end(id) } }
}

/// The embedded exchange for one app: publish, subscribe, and feed it what the radio heard.
///
/// Owns a ``MatcherCore`` (the same state machine a network service could host) with this process's
/// session. Time comes from `clock` (seconds): the monotonic clock live, the sample clock of a
/// recording offline, so a recording yields exactly the timeline it would have produced live.
public actor MessageManager {
    public let appID: String
    public let session: SessionID
    private var core: MatcherCore
    private let lostTimeout: Double
    private var nextID = 0
    private var subscriptions: [OperationID: (continuation: AsyncStream<SubscriptionEvent>.Continuation, handler: (@Sendable (SubscriptionEvent) -> Void)?, cancelled: CancelFlag)] = [:]
    private var statuses: [OperationID: OperationStatus] = [:]
    private var audioPublications: [OperationID: Message] = [:]
    private var invalidTokens: [[UInt8]: Double] = [:]
    private var logger: Logger
    private let consent: Consent?
    /// Seconds an unknown token is ignored after the matcher called it invalid.
    public static let invalidTokenCache = 600.0

    /// - Parameters:
    ///   - lostTimeout: default time without a sighting before `lost` (s).
    ///   - broadcasts: whether this device plays a token (scan-only devices do not).
    ///   - consent: when given, publishing and subscribing need the user's consent.
    public init(appID: String, session: SessionID = SessionID(UUID().uuidString), lostTimeout: Double = 10,
                broadcasts: Bool = true, core: MatcherCore = MatcherCore(), consent: Consent? = nil, now: Double = 0) {
        self.consent = consent
        self.appID = appID
        self.session = session
        self.lostTimeout = lostTimeout
        self.core = core
        var logger = Logger(label: "sotto.exchange")
        logger.logLevel = ProcessInfo.processInfo.environment["SOTTO_DEBUG"] == "1" ? .debug : .info
        self.logger = logger
        _ = self.core.handle(.openSession(session, appID: appID, broadcasts: broadcasts), now: now)
    }

    /// Switches debug logging at run time (also on with SOTTO_DEBUG=1).
    public func setDebugLogging(_ on: Bool) { logger.logLevel = on ? .debug : .info }

    private func newID() throws(ExchangeError) -> OperationID {
        if let consent, !consent.isGranted { throw .consentNotGranted }
        guard statuses.values.filter({ $0 == .active }).count < ExchangeLimits.maxOperationsPerApp else {
            throw .quotaExceeded(ExchangeLimits.maxOperationsPerApp)
        }
        nextID += 1
        return OperationID(nextID)
    }

    /// Publishes `message` (audio-bytes messages are carried in the frame itself).
    public func publish(_ message: Message, strategy: Strategy = .default, now: Double) throws(ExchangeError) -> PublicationHandle {
        if case .infinite = strategy.ttl { throw .invalidTTL(Int.max) }
        let id = try newID()
        statuses[id] = .active
        if message.isAudioBytes { audioPublications[id] = message }
        apply(core.handle(.publish(session, id, message, strategy), now: now))
        logger.debug("publish \(message)")
        return PublicationHandle(id: id, message: message, manager: self)
    }

    /// Subscribes with `filter`; events come through the handle's `events` and `handler`.
    public func subscribe(filter: MessageFilter = .allMyTypes, strategy: Strategy = .default, lostTimeout: Double? = nil,
                          now: Double, handler: (@Sendable (SubscriptionEvent) -> Void)? = nil) throws(ExchangeError) -> SubscriptionHandle {
        let id = try newID()
        let (stream, continuation) = AsyncStream.makeStream(of: SubscriptionEvent.self)
        let flag = CancelFlag()
        subscriptions[id] = (continuation, handler, flag)
        statuses[id] = .active
        apply(core.handle(.subscribe(session, id, filter, strategy, lostTimeout: lostTimeout ?? self.lostTimeout), now: now))
        return SubscriptionHandle(id: id, manager: self, events: SubscriptionEvents(stream: stream, cancelled: flag))
    }

    /// Ends an operation (unpublish / unsubscribe).
    /// Ends an operation; `cancelled` (the user's cancel, not the session's end) also drops events not
    /// yet read.
    func end(_ id: OperationID, now: Double? = nil, cancelled: Bool = true) {
        guard statuses[id] == .active else { return }
        statuses[id] = .inactive
        if let subscription = subscriptions.removeValue(forKey: id) {
            if cancelled { subscription.cancelled.set() }
            subscription.continuation.finish()
            _ = core.handle(.unsubscribe(session, id), now: now ?? lastNow)
        } else {
            audioPublications[id] = nil
            apply(core.handle(.unpublish(session, id), now: now ?? lastNow))
        }
    }

    /// An active operation reports the radio's state: starting while the devices open, failed while they
    /// are in error, active otherwise (and active without a radio, e.g. offline).
    func status(of id: OperationID) -> OperationStatus {
        let status = statuses[id] ?? .inactive
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

    /// Set by ``AudioRadio``.
    package func setRadio(_ state: RadioState) { radio = state }

    private var lastNow = 0.0

    /// Feeds one decoded frame (the modem's token bytes) heard at `now` with this SNR (dB) and level (dBFS).
    public func heard(frame: [UInt8], snr: Double, level: Double, now: Double) {
        lastNow = now
        guard let payload = Payload(frame: frame) else { return }
        if case .token(let token) = payload, let until = invalidTokens[token], now < until { return }
        apply(core.handle(.observe(session, payload, snr: snr, level: level), now: now))
    }

    /// Lets time pass to `now`: TTL expiry, lost timeouts, token rotation.
    public func tick(now: Double) {
        lastNow = now
        invalidTokens = invalidTokens.filter { $0.value > now }
        apply(core.handle(.tick, now: now))
    }

    /// Ends the session: every found message is lost, every operation ends.
    public func close(now: Double) {
        apply(core.handle(.closeSession(session), now: now))
        for id in statuses.keys where statuses[id] == .active { end(id, now: now, cancelled: false) }
    }

    /// What the radio should loop now: the session's token and the audio-bytes publications.
    public var transmitPlan: [Payload] {
        var plan: [Payload] = []
        if let token = core.token(of: session), !statuses.values.filter({ $0 == .active }).isEmpty { plan.append(.token(token)) }
        plan += audioPublications.values.sorted { $0.content.lexicographicallyPrecedes($1.content) }.map { .audioBytes($0.content) }
        return plan
    }

    private func apply(_ events: [MatcherEvent]) {
        for event in events {
            switch event {
            case .found(let s, let op, let message) where s == session: deliver(op, .found(message))
            case .lost(let s, let op, let message) where s == session: deliver(op, .lost(message))
            case .signalChanged(let s, let op, let message, let snr, let level) where s == session:
                deliver(op, .signalChanged(message, snr: snr, level: level))
            case .expired(let s, let op) where s == session:
                if subscriptions[op] != nil { deliver(op, .expired) }
                statuses[op] = .expired
                if let subscription = subscriptions.removeValue(forKey: op) { subscription.continuation.finish() }
                audioPublications[op] = nil
            case .invalidToken(let s, let token) where s == session:
                invalidTokens[token] = lastNow + Self.invalidTokenCache
                logger.debug("invalid token \(token)")
            default: break
            }
        }
    }

    private func deliver(_ op: OperationID, _ event: SubscriptionEvent) {
        guard let subscription = subscriptions[op], !subscription.cancelled.isSet else { return }
        logger.debug("\(event)")
        subscription.continuation.yield(event)
        subscription.handler?(event)
    }
}
