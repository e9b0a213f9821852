import CoreMetrics
import Foundation
import Logging
import SottoExchange
import SottoExchangeWire

/// Timings and limits of the matcher service.
public struct ServiceConfiguration: Sendable {
    /// How long a session outlives its connection, so a client that reconnects resumes it unchanged (s).
    public var sessionGrace: Double = 15
    /// How often a client sends a frame at least (s); a session silent for three intervals is cut off.
    public var heartbeatInterval: Double = 5
    /// How often timers (lost, expiry, rotation) are checked (s).
    public var tickInterval: Double = 0.1
    /// Lost timeout of a subscription that does not ask for one (s).
    public var defaultLostTimeout: Double = 10
    /// What one session's stream may hold unread.
    public var outbox = Outbox.Limits()
    /// Token length (bytes), rotation interval and grace (s).
    public var tokenLength = 8
    public var rotationInterval: Double = 900
    public var rotationGrace: Double = 10
    /// How often the beacon registry is checked for changes (s).
    public var registryPollInterval: Double = 1

    public init() {}
}

/// The matcher of a `sotto serve` node: the pure ``MatcherCore`` (the one definition of the matching rules)
/// wrapped in an actor that owns the sessions' streams, checks every client frame against the exchange's
/// limits, applies per-key rate limits and per-project session quotas, and routes the core's events to the
/// streams. No network and no database here: the gRPC service and the store feed it.
public actor MatcherHost {
    enum Operation: Equatable {
        case publication(Message, Strategy)
        case subscription(MessageFilter, Strategy, lostTimeout: Double)
    }

    struct SessionState {
        let project: Project
        let keyID: String
        let secret: [UInt8]
        var outbox: Outbox?
        /// When the connection went away (s), nil while attached.
        var detachedAt: Double?
        var operations: [OperationID: Operation] = [:]
    }

    /// A token bucket per API key (requests per second, burst).
    struct Bucket {
        var tokens: Double
        var last: Double
    }

    private var core: MatcherCore
    private var sessions: [SessionID: SessionState] = [:]
    private var sessionsPerProject: [String: Int] = [:]
    private var buckets: [String: Bucket] = [:]
    public let configuration: ServiceConfiguration
    private let metrics: ServiceMetrics
    private let logger: Logger
    private let started = ContinuousClock.now
    private var ticker: Task<Void, Never>?

    public init(configuration: ServiceConfiguration = ServiceConfiguration(), metrics: ServiceMetrics = ServiceMetrics(),
                logger: Logger = Logger(label: "sotto.serve")) {
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        core = MatcherCore(tokenLength: configuration.tokenLength, rotationInterval: configuration.rotationInterval,
                           rotationGrace: configuration.rotationGrace)
    }

    /// Seconds since the host started (monotonic).
    public var now: Double {
        return (ContinuousClock.now - started).inSeconds
    }

    /// Starts the timer loop (lost timeouts, expiry, rotation, silent and detached sessions).
    public func start() {
        guard ticker == nil else { return }
        let interval = configuration.tickInterval
        ticker = Task { [weak self] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(interval))
                await self?.tick()
            }
        }
    }

    /// Ends every session (service shutdown).
    public func stop() {
        ticker?.cancel()
        for id in Array(sessions.keys) {
            sessions[id]?.outbox?.finish(cutOff: .shutdown)
            close(id)
        }
    }

    /// Sessions held (attached or within their grace period).
    public var sessionCount: Int { sessions.count }

    // MARK: Sessions

    /// What a new or resumed session is told first.
    public struct Opened: Sendable {
        public let session: SessionID
        public let resumed: Bool
    }

    /// Opens (or resumes) a session for an authenticated key; its frames go to `outbox`.
    /// - Throws: `sessionQuotaExceeded` when the project holds its quota of sessions.
    public func open(key: AuthenticatedKey, broadcasts: Bool, resume: (session: String, secret: [UInt8])?,
                     outbox: Outbox) throws(ExchangeError) -> Opened {
        let now = self.now
        if let resume, !resume.session.isEmpty, let existing = sessions[SessionID(resume.session)],
           existing.project.id == key.project.id, APIKeys.constantTimeEqual(existing.secret, resume.secret) {
            let id = SessionID(resume.session)
            existing.outbox?.finish(cutOff: .replaced)
            sessions[id]?.outbox = outbox
            sessions[id]?.detachedAt = nil
            push(welcome(id, secret: existing.secret, project: key.project, resumed: true), to: id)
            if let token = core.token(of: id) { push(ServerFrame(.token(token)), to: id) }
            metrics.sessionsResumed.increment()
            return Opened(session: id, resumed: true)
        }
        let held = sessionsPerProject[key.project.id, default: 0]
        guard held < key.project.maxSessions else {
            metrics.rejected.increment()
            throw .sessionQuotaExceeded(key.project.maxSessions)
        }
        var generator = SystemRandomNumberGenerator()
        let id = SessionID("s_" + APIKeys.hex((0..<12).map { _ in UInt8.random(in: 0...255, using: &generator) }))
        let secret = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        sessions[id] = SessionState(project: key.project, keyID: key.keyID, secret: secret, outbox: outbox)
        sessionsPerProject[key.project.id, default: 0] += 1
        metrics.sessions.record(sessions.count)
        push(welcome(id, secret: secret, project: key.project, resumed: false), to: id)
        route(core.handle(.openSession(id, appID: key.project.id, broadcasts: broadcasts), now: now))
        logger.debug("session \(id) opened for project \(key.project.name)")
        return Opened(session: id, resumed: false)
    }

    private func welcome(_ id: SessionID, secret: [UInt8], project: Project, resumed: Bool) -> ServerFrame {
        var body = Sotto_Exchange_V1_Welcome()
        body.sessionID = id.value
        body.resumeSecret = Data(secret)
        body.resumed = resumed
        body.project = project.name
        body.sessionGraceMs = UInt32(configuration.sessionGrace * 1000)
        body.heartbeatIntervalMs = UInt32(configuration.heartbeatInterval * 1000)
        var frame = ServerFrame()
        frame.kind = .welcome(body)
        return frame
    }

    /// The connection of `session` went away: the session stays for the grace period, to be resumed.
    public func detach(_ session: SessionID, outbox: Outbox) {
        guard sessions[session]?.outbox === outbox else { return }
        sessions[session]?.outbox = nil
        sessions[session]?.detachedAt = now
    }

    /// The client ended its session: everything it published is withdrawn at once.
    public func end(_ session: SessionID, outbox: Outbox) {
        guard sessions[session]?.outbox === outbox else { return }
        close(session)
    }

    private func close(_ id: SessionID) {
        guard let state = sessions.removeValue(forKey: id) else { return }
        sessionsPerProject[state.project.id, default: 1] -= 1
        if sessionsPerProject[state.project.id] == 0 { sessionsPerProject[state.project.id] = nil }
        route(core.handle(.closeSession(id), now: now))
        metrics.sessions.record(sessions.count)
        logger.debug("session \(id) closed")
    }

    // MARK: Frames

    /// One frame from the client of `session`.
    public func receive(_ frame: ClientFrame, from session: SessionID) {
        guard let state = sessions[session] else { return }
        let now = self.now
        if case .heartbeat = frame.kind { return }
        // Ending an operation is always taken (it only lightens the load, and a client that was refused
        // would believe it ended while the service kept it).
        let ends: Bool
        switch frame.kind {
        case .unpublish, .unsubscribe: ends = true
        default: ends = false
        }
        guard ends || admit(key: state.keyID, now: now) else {
            metrics.rateLimited.increment()
            let error = ExchangeError.rateLimited(rate(of: state.keyID))
            switch frame.kind {
            case .publish(let body): push(.status(.rejected(body.opID, error)), to: session)
            case .subscribe(let body): push(.status(.rejected(body.opID, error)), to: session)
            default: push(.error(error), to: session)
            }
            return
        }
        switch frame.kind {
        case .publish(let body): publish(body, session: session, now: now)
        case .subscribe(let body): subscribe(body, session: session, now: now)
        case .unpublish(let body): end(body.opID, publication: true, session: session, now: now)
        case .unsubscribe(let body): end(body.opID, publication: false, session: session, now: now)
        case .observe(let body): observe(body, session: session, now: now)
        case .hello:
            push(.error(.protocolViolation("a session says Hello once, first")), to: session)
        case .heartbeat: break
        case .none:
            push(.error(.protocolViolation("an empty or unknown frame")), to: session)
        }
    }

    private func operationID(_ raw: UInt32) -> OperationID? { raw == 0 ? nil : OperationID(Int(raw)) }

    private func publish(_ body: Sotto_Exchange_V1_Publish, session: SessionID, now: Double) {
        do throws(ExchangeError) {
            guard let op = operationID(body.opID) else { throw .protocolViolation("operation ids start at 1") }
            guard body.hasMessage else { throw .protocolViolation("a publication needs a message") }
            let message = try body.message.validated()
            let strategy = try (body.hasStrategy ? body.strategy : Sotto_Exchange_V1_Strategy()).validated(subscription: false)
            try apply(.publication(message, strategy), op: op, session: session) { core, now in
                core.handle(.publish(session, op, message, strategy), now: now)
            }
        } catch {
            metrics.rejected.increment()
            push(.status(.rejected(body.opID, error)), to: session)
        }
    }

    private func subscribe(_ body: Sotto_Exchange_V1_Subscribe, session: SessionID, now: Double) {
        do throws(ExchangeError) {
            guard let op = operationID(body.opID) else { throw .protocolViolation("operation ids start at 1") }
            let filter = try MessageFilter.validated(body.includes)
            let strategy = try (body.hasStrategy ? body.strategy : Sotto_Exchange_V1_Strategy()).validated(subscription: true)
            let lostTimeout = body.lostTimeoutMs == 0 ? configuration.defaultLostTimeout : Double(body.lostTimeoutMs) / 1000
            guard ExchangeLimits.lostTimeoutRange.contains(lostTimeout) else { throw .invalidLostTimeout(lostTimeout) }
            try apply(.subscription(filter, strategy, lostTimeout: lostTimeout), op: op, session: session) { core, now in
                core.handle(.subscribe(session, op, filter, strategy, lostTimeout: lostTimeout), now: now)
            }
        } catch {
            metrics.rejected.increment()
            push(.status(.rejected(body.opID, error)), to: session)
        }
    }

    /// Records an operation and runs it through the core. Sending an operation again with the same
    /// parameters (a client re-establishing it after a reconnection) changes nothing and answers with what
    /// a subscription has found.
    private func apply(_ operation: Operation, op: OperationID, session: SessionID,
                       _ run: (inout MatcherCore, Double) -> [MatcherEvent]) throws(ExchangeError) {
        guard let state = sessions[session] else { return }
        if let existing = state.operations[op] {
            if existing == operation {
                let visible: [Message]
                if case .subscription = operation { visible = core.visibleMessages(session: session, operation: op) } else { visible = [] }
                push(.status(.accepted(UInt32(op.value), visible: visible)), to: session)
                return
            }
            switch (existing, operation) {
            case (.publication, .publication), (.subscription, .subscription): break  // replaced below
            default: throw .duplicateOperation
            }
        } else if state.operations.count >= ExchangeLimits.maxOperationsPerApp {
            throw .quotaExceeded(ExchangeLimits.maxOperationsPerApp)
        }
        sessions[session]?.operations[op] = operation
        push(.status(.accepted(UInt32(op.value))), to: session)
        route(run(&core, now))
    }

    private func end(_ raw: UInt32, publication: Bool, session: SessionID, now: Double) {
        guard let op = operationID(raw), let existing = sessions[session]?.operations[op] else {
            push(.status(.rejected(raw, .unknownOperation)), to: session)
            return
        }
        let isPublication: Bool
        if case .publication = existing { isPublication = true } else { isPublication = false }
        guard isPublication == publication else {
            push(.status(.rejected(raw, .unknownOperation)), to: session)
            return
        }
        sessions[session]?.operations[op] = nil
        route(core.handle(publication ? .unpublish(session, op) : .unsubscribe(session, op), now: now))
    }

    private func observe(_ body: Sotto_Exchange_V1_Observe, session: SessionID, now: Double) {
        guard body.sightings.count <= ExchangeLimits.maxSightingsPerReport else {
            metrics.rejected.increment()
            push(.error(.protocolViolation("at most \(ExchangeLimits.maxSightingsPerReport) sightings per report, got \(body.sightings.count)")), to: session)
            return
        }
        metrics.reports.increment()
        for sighting in body.sightings {
            // A modem token is 1 to 16 bytes; anything else did not come from a Sotto modem.
            guard (2...16).contains(sighting.frame.count), let payload = Payload(frame: Array(sighting.frame)) else { continue }
            let snr = sighting.snrDb.isFinite ? min(max(sighting.snrDb, -100), 200) : 0
            let level = sighting.levelDbfs.isFinite ? min(max(sighting.levelDbfs, -200), 20) : 0
            metrics.sightings.increment()
            route(core.handle(.observe(session, payload, snr: snr, level: level), now: now))
        }
    }

    // MARK: Rate limits

    private var rates: [String: (rate: Double, burst: Double)] = [:]

    /// Registers a key's limits (called when it authenticates).
    public func limit(key: AuthenticatedKey) {
        rates[key.keyID] = (key.ratePerSecond, key.burst)
    }

    private func rate(of key: String) -> Double { rates[key]?.rate ?? 0 }

    private func admit(key: String, now: Double) -> Bool {
        guard let (rate, burst) = rates[key] else { return true }
        var bucket = buckets[key] ?? Bucket(tokens: burst, last: now)
        bucket.tokens = min(burst, bucket.tokens + (now - bucket.last) * rate)
        bucket.last = now
        let admitted = bucket.tokens >= 1
        if admitted { bucket.tokens -= 1 }
        buckets[key] = bucket
        return admitted
    }

    // MARK: Beacons

    /// Registers beacons and their attachments in the core (the store's registry; registering again replaces).
    public func load(beacons: [BeaconRecord]) {
        for beacon in beacons {
            route(core.handle(.registerBeacon(id: beacon.id, appID: beacon.projectID, attachments: beacon.attachments,
                                              publicVisibility: beacon.isPublic, rotation: beacon.rotation), now: now))
        }
    }

    // MARK: Time and routing

    func tick() {
        let now = self.now
        route(core.handle(.tick, now: now))
        let silentLimit = 3 * configuration.heartbeatInterval
        for (id, state) in sessions {
            if let detachedAt = state.detachedAt {
                if now - detachedAt > configuration.sessionGrace { close(id) }
            } else if let outbox = state.outbox, outbox.silence > silentLimit {
                logger.info("session \(id) silent for \(silentLimit) s: cut off")
                metrics.cutOff.increment()
                outbox.finish(cutOff: .silent)
                detach(id, outbox: outbox)
            }
        }
    }

    private func route(_ events: [MatcherEvent]) {
        for event in events {
            switch event {
            case .found: metrics.found.increment()
            case .lost: metrics.lost.increment()
            case .invalidToken: metrics.invalidTokens.increment()
            default: break
            }
            let (session, notice) = event.notice
            var frame = ServerFrame(notice)
            if case .found(let session, let op, let message) = event, case .found(var body) = frame.kind,
               let signal = core.signal(session: session, operation: op, message: message) {
                body.snrDb = signal.snr
                body.levelDbfs = signal.level
                frame.kind = .found(body)
            }
            push(frame, to: session)
        }
    }

    private func push(_ frame: ServerFrame, to session: SessionID) {
        guard let outbox = sessions[session]?.outbox else { return }
        if !outbox.push(frame) {
            logger.info("session \(session) does not read its stream: cut off")
            metrics.cutOff.increment()
            outbox.finish(cutOff: .slowReader)
            detach(session, outbox: outbox)
        }
    }
}

