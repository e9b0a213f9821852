import CoreMetrics
import Crypto
import Foundation
import Logging
import SottoExchange
import SottoExchangeCore
import SottoExchangeWire

/// Timings and limits of the matcher service. Nodes sharing one PostgreSQL must use the same session grace,
/// heartbeat, lost timeout, token and node-liveness settings (they decide what the shared log means).
public struct ServiceConfiguration: Sendable {
    /// How long a session outlives its connection, so a client that reconnects resumes it unchanged (s).
    public var sessionGrace: Double = 15
    /// How often a client sends a frame at least (s); a session silent for three intervals is cut off.
    public var heartbeatInterval: Double = 5
    /// How often timers (lost, expiry, rotation) are checked (s). With a shared log, also how often an idle
    /// node appends an empty entry (its heartbeat).
    public var tickInterval: Double = 0.1
    /// Lost timeout of a subscription that does not ask for one (s).
    public var defaultLostTimeout: Double = 10
    /// What one session's stream may hold unread.
    public var outbox = Outbox.Limits()
    /// Token length (bytes), rotation interval and grace (s).
    public var tokenLength = 8
    public var rotationInterval: Double = 900
    public var rotationGrace: Double = 10
    /// How the matcher gives turns to sessions that hear each other and gave their frame airtime in Hello
    /// (`BroadcastCoordinator`); nil: no turns, every device keeps its own sender's rules. Every node of a
    /// cluster must use the same.
    public var broadcastTurns: BroadcastCoordinator.Rules? = BroadcastCoordinator.Rules()
    /// Link adaptation (`LinkAdaptation`): sessions heard weakly (or not at all by those they hear) are told to
    /// play their token frames in the robust profile, and the default one again once heard well; nil: off, no
    /// session is told a profile. Every node of a cluster must use the same.
    public var linkAdaptation: LinkAdaptation.Rules? = LinkAdaptation.Rules()
    /// How often the beacon registry is checked for changes (s).
    public var registryPollInterval: Double = 1
    /// On shutdown (SIGINT, SIGTERM), how long the service waits for its streams to end once their sessions
    /// were told it is going away (UNAVAILABLE), before it closes the connections that remain (s).
    public var drainTimeout: Double = 5
    /// Most bytes the live publications of one project may hold (namespaces, types and contents), over all
    /// its sessions; a publication beyond it is rejected (QUOTA_EXCEEDED, detail `publication-bytes`).
    /// Nodes sharing a PostgreSQL must use the same value.
    public var projectPublicationBytes = ServiceConfiguration.defaultProjectPublicationBytes
    /// The default of ``projectPublicationBytes``: 64 MiB.
    public static let defaultProjectPublicationBytes = ReplicaTimings.defaultProjectPublicationBytes
    /// Work units (frames, and sightings: a report of n sightings counts n) per second that one project's
    /// sessions may send, summed over its keys; nodes sharing a log share it (and each key's rate) by
    /// reporting what they spend every half second. Nodes sharing a PostgreSQL must use
    /// the same value.
    public var projectRate: Double = 20_000
    /// Work units one project may send at once above ``projectRate``.
    public var projectBurst: Double = 40_000
    /// Session opens (and resumes) per second a key may make, as a share of its rate (at least one per
    /// second; the burst is the same share of the key's burst, at least ten).
    public var sessionOpenShare: Double = 0.1
    /// How often the store is checked for revoked keys (s): a revoked key's streams are cut off within
    /// this, plus one query.
    public var revocationPollInterval: Double = 0.25
    /// Shared log: a node that appended nothing for this long is declared dead, and its sessions wait to be
    /// resumed on another node (s).
    public var nodeTimeout: Double = 5
    /// Shared log: a pause of the whole log longer than this (or than half the node timeout, if shorter) is a
    /// database outage (every node was cut off), after which no node is declared dead for its silence during
    /// the outage (s).
    public var outageGap: Double = 2
    /// Shared log: how long a node keeps its clients waiting while it cannot reach the database (a restart)
    /// before it cuts them off so that they move to another node (s).
    public var databaseGrace: Double = 10
    /// Shared log: most commands a node holds while the database is slow or away; more cuts its clients off.
    public var maxPendingCommands = 200_000
    /// Shared log: how often the state is snapshotted into the database, so that the log before it can go
    /// and a starting node does not replay it all (s). One node writes it: the live one with the lowest id.
    public var snapshotInterval: Double = 60
    /// Test hook: seconds added to this node's wall clock (a skewed clock). In a cluster it decides nothing;
    /// serving alone, it is the time base of rotating beacons.
    public var clockSkew: Double = 0
    /// Test hook: moves a node's clocks forward while it runs (serving alone; nil: the real clocks).
    public var timeShift: ServiceTimeShift?
    /// The in-band SNR (dB) from which a sighting counts for an earshot publication or subscription
    /// (`MatcherCore.earshotSNR`), 30 dB by default, within ``earshotSNRRange``. Nodes sharing a PostgreSQL
    /// must use the same value.
    public var earshotSNR = MatcherCore.defaultEarshotSNR
    /// The earshot thresholds a node accepts (dB): the decoder reports in-band SNRs in about this span.
    public static let earshotSNRRange: ClosedRange<Double> = 0...60

    public init() {}

    var timings: ReplicaTimings {
        ReplicaTimings(sessionGrace: sessionGrace, heartbeatInterval: heartbeatInterval, defaultLostTimeout: defaultLostTimeout,
                       nodeTimeout: nodeTimeout, outageGap: outageGap, projectPublicationBytes: projectPublicationBytes,
                       broadcastTurns: broadcastTurns, earshotSNR: earshotSNR, linkAdaptation: linkAdaptation)
    }
}

/// The matcher of a `sotto serve` node: owns the streams of its clients, applies per-key rate limits, and
/// turns what they send into commands for the replicated state (`ExchangeReplica`: the pure
/// `MatcherCore` plus the session registry). Serving alone, a node applies each command at once; sharing a
/// PostgreSQL log with other nodes, it appends commands in batches and applies every node's entries in the
/// log's order. Either way it delivers what the replica outputs for its own streams. No network and no
/// database here: the gRPC service and the log feed it.
public actor MatcherHost {
    /// The session a stream holds, once the replica applied its Open.
    public typealias Opened = OpenedSession

    /// Longest pause between two checks for silent streams (s). The limit is three heartbeats (15 s by
    /// default): checking 10 000 streams at every tick (0.1 s) cost a busy node a few per cent for nothing.
    static let silenceCheckInterval: Double = 1
    /// How often a node sharing a log reports what its streams spent of the rate limits to the others (s).
    static let usageInterval: Double = 0.5

    private var replica: ExchangeReplica
    /// This node's id in the log: fresh for each process and after each loss of the database.
    public private(set) var nodeID: String
    /// The client streams of this node, by number.
    private var streams = StreamRegistry()
    /// The rate limits, checked before frames reach this actor.
    nonisolated let limiter: RateLimiter
    /// Per-project counters of the live views (``statistics()``).
    nonisolated let live = LiveCounters()
    public let configuration: ServiceConfiguration
    private let metrics: ServiceMetrics
    private let logger: Logger
    /// Time since the host started on its clock (a manual one in tests): its timers and the matching run on
    /// it; the database's I/O (deadlines of appends and reads, their retry pauses) runs on real time.
    private let time: Stopwatch
    private var tasks: [Task<Void, Never>] = []
    /// When streams were last checked for silence, and usage last reported (s on ``monotonic``).
    private var lastSilenceCheck = 0.0
    private var lastUsageReport = 0.0
    /// The sessions count the gauge last got (-1 before the first, so that it starts at 0).
    private var recordedSessions = -1

    // Shared log only.
    private let log: (any ReplicationLog)?
    /// Where this node's link to the log is (standalone without one).
    private var link: LogDriver
    private var pending: [ReplicaCommand] = []
    /// The append in flight; abandoned when this node's id is retired.
    private var appendInFlight: Task<Deadline.Outcome<Int64>, Never>?
    private var appliedSequence: Int64 = 0
    private var wakeWriter: AsyncStream<Void>.Continuation?
    private var wakeReader: AsyncStream<Void>.Continuation?
    private var lastSnapshot = 0.0
    private var snapshotting = false
    /// False while this node cannot reach the database (it refuses sessions meanwhile).
    public var serving: Bool { link.acceptsSessions }
    /// True once ``stop()`` began: the service is shutting down and opens no session.
    public private(set) var stopped = false

    /// A node serving alone.
    /// - Parameters:
    ///   - configuration: the matcher's timings and bounds.
    ///   - metrics: where the host counts what it does.
    ///   - logger: where the host logs.
    ///   - clock: the time of the host's timers and of the matching (monotonic; a manual clock in tests).
    public init(configuration: ServiceConfiguration = ServiceConfiguration(), metrics: ServiceMetrics = ServiceMetrics(),
                logger: Logger = Logger(label: "sotto.serve"), clock: any Clock<Duration> = ContinuousClock()) {
        self.init(configuration: configuration, metrics: metrics, logger: logger, log: nil, clock: clock)
    }

    init(configuration: ServiceConfiguration, metrics: ServiceMetrics, logger: Logger, log: (any ReplicationLog)?,
         clock: any Clock<Duration> = ContinuousClock()) {
        self.configuration = configuration
        self.metrics = metrics
        self.logger = logger
        self.log = log
        time = Stopwatch(clock)
        link = LogDriver(shared: log != nil, grace: configuration.databaseGrace, now: 0)
        limiter = RateLimiter(configuration: configuration, recordsUsage: log != nil, clock: clock)
        nodeID = Self.freshNodeID()
        replica = ExchangeReplica(core: MatcherCore(tokenLength: configuration.tokenLength,
                                                    rotationInterval: configuration.rotationInterval,
                                                    rotationGrace: configuration.rotationGrace),
                                  timings: configuration.timings)
    }

    private static func freshNodeID() -> String {
        var generator = SystemRandomNumberGenerator()
        return "n_" + APIKeys.hex((0..<6).map { _ in UInt8.random(in: 0...255, using: &generator) })
    }

    /// Seconds since the host started on its clock (monotonic).
    private var monotonic: Double { time.elapsed() }
    /// Seconds since the host started (monotonic), plus the test hook's time shift.
    public var now: Double { monotonic + (configuration.timeShift?.seconds ?? 0) }
    /// This node's wall clock (s since 1970, with the test hooks' skew and time shift): the time base of rotating beacons
    /// when serving alone (in a cluster, the database's clock is).
    var unixTime: Double { Date().timeIntervalSince1970 + configuration.clockSkew + (configuration.timeShift?.seconds ?? 0) }

    /// Starts the timer loop (and, with a shared log, the loops that append and apply entries).
    public func start() {
        guard tasks.isEmpty else { return }
        let interval = configuration.tickInterval, time = self.time
        tasks.append(Task { [weak self] in
            while !Task.isCancelled {
                try? await time.sleep(interval)
                await self?.tick()
            }
        })
        guard log != nil else { return }
        let (writerWakes, writer) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let (readerWakes, reader) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        wakeWriter = writer
        wakeReader = reader
        tasks.append(Task { [weak self] in
            for await _ in writerWakes {
                guard let self, await self.appendPending() else { return }
            }
        })
        tasks.append(Task { [weak self] in
            for await _ in readerWakes {
                guard let self, await self.applyNewEntries() else { return }
            }
        })
        if let log {
            tasks.append(Task { [weak self] in
                for await _ in log.appended() { await self?.wakeReader?.yield() }
            })
        }
    }

    /// Ends every stream (service shutdown). Alone, the sessions end; with a shared log they stay for their
    /// grace period, so that clients resume them on another node.
    public func stop() async {
        guard !stopped else { return }
        stopped = true
        for task in tasks { task.cancel() }
        tasks = []
        appendInFlight?.cancel()
        wakeWriter?.finish()
        wakeReader?.finish()
        let held = streams.removeAll()
        limiter.forgetAllStreams()
        for (number, stream) in held {
            stream.outbox.finish(cutOff: .shutdown)
            stream.waiter?.resume(returning: .failure(.unavailable("the service is shutting down")))
            if let session = stream.session, log == nil { perform(apply([.end(session, stream: number)])) }
        }
        if let log {
            if !pending.isEmpty { _ = try? await log.append(entry(pending)) }
            pending = []
            log.close()
        }
    }

    /// Sessions held in the whole service (attached or within their grace period).
    public var sessionCount: Int { replica.sessions.count }

    /// Streams held by this node.
    public var streamCount: Int { streams.count }

    /// Sightings held over all sessions (each session at most `MatcherCore.maxSourcesPerSession`).
    public var sightingsHeld: Int { replica.core.totalSightingCount }

    /// The live views' reading (issue 34): per project, its sessions, publications and subscriptions now (from
    /// the matcher's state) and its counters so far (sightings, found, lost, invalid tokens, rate-limited frames,
    /// SNR of sightings) on this node.
    public func statistics() -> ServiceStatistics {
        ServiceStatistics(census: replica.core.census(), counters: live.all)
    }

    // MARK: Streams

    /// Opens (or resumes) a session for an authenticated key on a new stream whose frames go to `outbox`.
    /// - Throws: `sessionQuotaExceeded` when the project (or the key, with a quota of its own) holds its quota of
    ///   sessions; `unavailable` when this node cannot reach the shared database.
    public func open(key: AuthenticatedKey, broadcasts: Bool, resume: (session: String, secret: [UInt8])?,
                     outbox: Outbox) async throws(ExchangeError) -> Opened {
        guard !stopped else { throw .unavailable("the service is shutting down; try another node") }
        guard serving else { throw .unavailable("this node cannot reach its database; try another node") }
        if let openRate = limiter.admitOpen(key: key) {
            metrics.rateLimited.increment()
            live.count(key.project.id) { $0.rateLimited += 1 }
            throw .rateLimited(openRate)
        }
        var generator = SystemRandomNumberGenerator()
        let id = SessionID("s_" + APIKeys.hex((0..<12).map { _ in UInt8.random(in: 0...255, using: &generator) }))
        let secret = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let presented = resume?.secret ?? []
        let number = streams.add(StreamRegistry.Stream(outbox: outbox, keyID: key.keyID, projectID: key.project.id,
                                                       newSecret: secret, presentedSecret: presented))
        limiter.register(stream: number, keyID: key.keyID, projectID: key.project.id, outbox: outbox)
        var resumeRequest: (session: SessionID, secretHash: [UInt8])?
        if let resume, !resume.session.isEmpty {
            resumeRequest = (SessionID(resume.session), Array(SHA256.hash(data: resume.secret)))
        }
        let command = ReplicaCommand.open(.init(stream: number, session: id, secretHash: Array(SHA256.hash(data: secret)),
                                                resume: resumeRequest, project: SessionProject(key.project), keyID: key.keyID,
                                                broadcasts: broadcasts, keyMaxSessions: key.maxSessions))
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Opened, ExchangeError>, Never>) in
            streams[number]?.waiter = continuation
            submit(command)
            if log != nil { scheduleOpenTimeout(number) }
        }
        switch result {
        case .success(let opened): return opened
        case .failure(let error):
            streams.remove(number)
            limiter.forget(stream: number)
            throw error
        }
    }

    private func scheduleOpenTimeout(_ number: UInt64) {
        let grace = configuration.databaseGrace, time = self.time
        Task { [weak self] in
            try? await time.sleep(grace)
            await self?.openTimedOut(number)
        }
    }

    private func openTimedOut(_ number: UInt64) {
        guard let waiter = streams[number]?.waiter else { return }
        streams[number]?.waiter = nil
        waiter.resume(returning: .failure(.unavailable("the shared database did not answer within \(configuration.databaseGrace) s")))
    }

    /// The stream went away: its session stays for the grace period, to be resumed.
    public func detach(stream number: UInt64) {
        limiter.forget(stream: number)
        guard let stream = streams.remove(number), let session = stream.session else { return }
        submit(.detach(session, stream: number))
    }

    /// The client ended its session: everything it published is withdrawn at once.
    public func end(stream number: UInt64) {
        limiter.forget(stream: number)
        guard let stream = streams.remove(number), let session = stream.session else { return }
        submit(.end(session, stream: number))
    }

    /// What the client of a stream sent, checked at the edge by the transport that received it.
    ///
    /// Indirect (one pointer): it is held across the hop to this actor in every session's reader task, whose memory
    /// is the deepest its calls ever took for as long as the session lives; inline, a request (a publication, a
    /// filter) made each session's tasks keep about 3 kB more (`scripts/load-node`, in `Benchmarks/README.md`).
    public indirect enum Inbound: Sendable {
        /// A request for the matcher.
        case request(MatcherRequest)
        /// A frame that carried none: the answer goes to the client without the matcher (nor the log).
        case refused(FrameRefusal)
    }

    /// One request (or refused frame) from the client of a stream. The rate limits are checked first, on the
    /// caller's task: a refused one never waits for this actor (a publish or subscribe is answered
    /// RATE_LIMITED, anything else with an Error at most once a second).
    /// - Parameters:
    ///   - inbound: what the client sent, checked at the edge.
    ///   - cost: its work units for the rate limits (a frame 1, a report of n sightings n); nil for what is
    ///     never refused (ending an operation).
    ///   - number: the stream.
    public nonisolated func receive(_ inbound: Inbound, cost: Double?, stream number: UInt64) async {
        guard case .refused(let rate, let notify, let outbox) = limiter.admit(cost: cost, stream: number) else {
            switch inbound {
            case .request(let request): await receiveAdmitted(request, stream: number)
            case .refused(let refusal): await refuse(refusal, stream: number)
            }
            return
        }
        metrics.rateLimited.increment()
        if let project = limiter.projectID(stream: number) { live.count(project) { $0.rateLimited += 1 } }
        let error = ExchangeError.rateLimited(rate)
        let answer: ServerFrame?
        switch inbound {
        case .request(.publish(let op, _, _)), .request(.subscribe(let op, _, _, _)):
            answer = .status(.rejected(UInt32(clamping: op.value), error))
        case .refused(.operation(let op, _)):
            answer = .status(.rejected(op, error))
        default:
            answer = notify ? .error(error) : nil
        }
        if let answer, !outbox.push(answer) { await cutOffSlowReader(number) }
    }

    /// Answers a frame the edge refused (counted as rejected, as the matcher's own rejections are).
    private func refuse(_ refusal: FrameRefusal, stream number: UInt64) {
        metrics.rejected.increment()
        push(refusal.answer, to: number)
    }

    private func receiveAdmitted(_ request: MatcherRequest, stream number: UInt64) {
        guard let stream = streams[number], let session = stream.session else { return }
        if case .observe(let sightings) = request {
            metrics.reports.increment()
            metrics.sightings.increment(by: Int64(sightings.count))
            live.count(stream.projectID) { counters in
                counters.sightings += sightings.count
                for sighting in sightings { counters.countSNR(sighting.snr) }
            }
        }
        submit(.request(session, stream: number, request))
    }

    // MARK: Rate limits

    /// Registers a key's limits (called when it authenticates). Each node enforces them on its own streams;
    /// nodes sharing a log report what they spend to each other, so the limits hold over the cluster.
    /// - Parameter key: the key that authenticated.
    public func limit(key: AuthenticatedKey) {
        limiter.limit(key: key)
    }

    // MARK: Revocation

    /// The keys of this node's streams and of every session held (attached anywhere, or waiting in its grace
    /// period): those whose revocation must bite.
    public var keyIDsInUse: Set<String> {
        var keys = streams.keyIDs
        for session in replica.sessions.values { keys.insert(session.keyID) }
        return keys
    }

    /// Cuts off this node's streams of the `revoked` keys at once (UNAUTHENTICATED at their clients, which do
    /// not reconnect), and ends every session those keys opened, here or on another node, attached or waiting
    /// in its grace period: what they published is withdrawn and they can no longer be resumed. Logs an
    /// audit line per key.
    /// - Parameter revoked: ids of keys revoked in the store.
    public func revoke(keys revoked: Set<String>) {
        let hit = streams.holding(keys: revoked)
        var sessions: [String: Int] = [:]
        for session in replica.sessions.values where revoked.contains(session.keyID) { sessions[session.keyID, default: 0] += 1 }
        guard !hit.isEmpty || !sessions.isEmpty else { return }
        var perKey: [String: Int] = [:]
        for (number, stream) in hit {
            perKey[stream.keyID, default: 0] += 1
            metrics.cutOff.increment()
            streams.remove(number)
            limiter.forget(stream: number)
            stream.outbox.finish(cutOff: .revoked)
            if let waiter = stream.waiter {
                stream.waiter = nil
                waiter.resume(returning: .failure(.unauthenticated))
            }
        }
        submit(.revoke(keys: revoked.sorted()))
        for keyID in Set(perKey.keys).union(sessions.keys).sorted() {
            let streamCount = perKey[keyID, default: 0], sessionCount = sessions[keyID, default: 0]
            logger.warning("""
                audit: API key \(keyID) revoked: cut off \(streamCount) stream\(streamCount == 1 ? "" : "s") here, \
                ended \(sessionCount) session\(sessionCount == 1 ? "" : "s") (attached or waiting to be resumed)
                """)
        }
    }

    // MARK: Beacons

    /// Registers beacons and their attachments (the store's registry; registering again replaces).
    public func load(beacons: [BeaconRecord]) {
        // A decommissioned beacon is registered as one of no project: its ID resolves to nothing for anyone.
        submit(.beacons(beacons.map(\.registered)))
    }

    // MARK: Commands and the log

    /// Alone: applies the command now. Shared: queues it for the next append.
    private func submit(_ command: ReplicaCommand) {
        guard log != nil else {
            perform(apply([command]))
            return
        }
        pending.append(command)
        if pending.count > configuration.maxPendingCommands {
            loseDatabase("more than \(configuration.maxPendingCommands) commands waiting for the database")
            return
        }
        if pending.count == 1 { wakeWriter?.yield() }
    }

    /// Applies commands of this node serving alone, at the host's clock.
    private func apply(_ commands: [ReplicaCommand]) -> [ReplicaOutput] {
        replica.apply(ReplicaEntry(node: nodeID, commands: commands), at: now, unixTime: unixTime)
    }

    private func entry(_ commands: [ReplicaCommand]) -> ReplicaEntry {
        var generator = SystemRandomNumberGenerator()
        return ReplicaEntry(node: nodeID, seed: (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) },
                            nodeClock: Date().timeIntervalSince1970 + configuration.clockSkew, commands: commands)
    }

    /// Appends what is pending (or an empty entry as this node's heartbeat), retrying while the database is
    /// away; after `databaseGrace` of failures the node cuts its clients off. Returns false once stopped.
    ///
    /// An append that does not answer within `databaseGrace` is abandoned and cuts the clients off too: a
    /// query can hang rather than fail (a partition that drops packets; the database's pool queues requests
    /// while it cannot connect; a query sent as a restart closes its connection may never answer), and a
    /// writer waiting on it would never append again. The abandoned entry may still land, so it is never sent
    /// again and this node's id goes with it. An append in flight when the node loses its database for
    /// another reason (the others declared it dead) is abandoned at once, so that it rejoins at once.
    private func appendPending() async -> Bool {
        guard let log else { return false }
        let batch = pending
        pending = []
        let entry = entry(batch)
        var delay = 0.05
        while !Task.isCancelled {
            let grace = configuration.databaseGrace
            let attempt = Task { await Deadline.race(.seconds(grace)) { try await log.append(entry) } }
            appendInFlight = attempt
            let outcome = await attempt.value
            appendInFlight = nil
            guard case .finished(let result) = outcome else {
                switch link.appendAbandoned(empty: batch.isEmpty) {
                case .loseDatabase(let reason): cutOffClients(reason)
                case .renewNodeID: nodeID = Self.freshNodeID()
                case .nothing: break
                }
                return true
            }
            do {
                _ = try result.get()
                metrics.logAppends.increment()
                metrics.logCommands.increment(by: Int64(batch.count))
                if link.appendSucceeded(now: monotonic) { logger.info("the database answers again") }
                wakeReader?.yield()
                if !pending.isEmpty { wakeWriter?.yield() }
                return true
            } catch {
                switch link.appendFailed(now: monotonic, error: "\(error)") {
                case .loseDatabase(let reason):
                    // What was queued came from streams that are now cut off: their clients resume elsewhere.
                    cutOffClients(reason)
                    return true
                case .giveUp: return true  // the next heartbeat tries again
                case .backOff:
                    try? await Task.sleep(for: .seconds(delay))
                    delay = min(delay * 2, 1)
                }
            }
        }
        return false
    }

    /// Applies the log's entries after the last one applied. Returns false once stopped.
    private func applyNewEntries() async -> Bool {
        guard let log else { return false }
        if link.needsSnapshot {
            do {
                let outcome = await Deadline.race(.seconds(configuration.databaseGrace)) { try await log.latestSnapshot() }
                guard case .finished(let result) = outcome else {
                    throw LogEntryError(description: "no answer within \(configuration.databaseGrace) s")
                }
                if let (sequence, bytes) = try result.get() { try restore(sequence: sequence, bytes) }
                link.snapshotRead()
            } catch {
                logger.error("reading the newest snapshot: \(error)")
                try? await Task.sleep(for: .milliseconds(200))
                wakeReader?.yield()
                return true
            }
        }
        while !Task.isCancelled {
            let batch: [LoggedEntry]
            // A read can hang like an append; it changes nothing, so one that does not answer within 2 s is
            // abandoned and made again.
            let sequence = appliedSequence, limit = min(configuration.databaseGrace, 2)
            let outcome = await Deadline.race(.seconds(limit)) { try await log.entries(after: sequence, limit: 1_000) }
            do {
                guard case .finished(let result) = outcome else { throw LogEntryError(description: "no answer within \(limit) s") }
                batch = try result.get()
            } catch {
                logger.debug("reading the log: \(error)")
                try? await Task.sleep(for: .milliseconds(100))
                wakeReader?.yield()
                return true
            }
            guard !batch.isEmpty else { return true }
            if let first = batch.first, first.sequence != appliedSequence + 1 {
                // The entries this node needs next were truncated (it fell a snapshot interval behind, or
                // it starts on a log whose beginning is gone): continue from the newest snapshot.
                logger.warning("the log continues at \(first.sequence) after \(appliedSequence): reloading the newest snapshot")
                link.logTruncated()
                wakeReader?.yield()
                return true
            }
            for logged in batch {
                appliedSequence = logged.sequence
                if logged.entry.node == nodeID { metrics.clockSkew.record(logged.entry.nodeClock - logged.wallClock) }
                metrics.logEntriesApplied.increment()
                perform(replica.apply(logged.entry, at: logged.time, unixTime: logged.wallClock))
            }
        }
        return false
    }

    /// Continues from a snapshot of the state after entry `sequence` (if it is ahead of this node).
    private func restore(sequence: Int64, _ bytes: [UInt8]) throws {
        guard sequence > appliedSequence else { return }
        replica = try ExchangeReplica(snapshot: bytes, timings: configuration.timings)
        appliedSequence = sequence
        logger.info("continuing from the snapshot after entry \(sequence) (\(bytes.count) bytes, \(replica.sessions.count) sessions)")
    }

    /// Writes a snapshot when it is due and this node is the live node with the lowest id (every node agrees
    /// on which that is: the replicas know the same nodes). The encoding runs off the actor, on a copy.
    private func snapshotIfDue() {
        guard let log, !snapshotting, monotonic - lastSnapshot >= configuration.snapshotInterval else { return }
        lastSnapshot = monotonic
        guard replica.nodes.keys.min() == nodeID, appliedSequence > 0 else { return }
        snapshotting = true
        let state = replica, sequence = appliedSequence, logger = self.logger
        Task.detached { [weak self] in
            let bytes = state.snapshot()
            do { try await log.saveSnapshot(sequence: sequence, bytes: bytes) } catch {
                logger.warning("saving a snapshot: \(error)")
            }
            await self?.snapshotDone()
        }
    }

    private func snapshotDone() { snapshotting = false }

    /// This node cannot use the database (or was declared dead by the others): it cuts its clients off so
    /// that they resume their sessions on another node, and rejoins under a new id.
    private func loseDatabase(_ reason: String) {
        link.lose()
        cutOffClients(reason)
    }

    /// What losing the database does, once ``link`` is lost: the clients are cut off, what was pending
    /// dropped, and the node rejoins under a new id.
    private func cutOffClients(_ reason: String) {
        logger.error("\(reason): cutting off \(streams.count) streams")
        pending = []
        appendInFlight?.cancel()
        let held = streams.removeAll()
        limiter.forgetAllStreams()
        for (_, stream) in held {
            metrics.cutOff.increment()
            stream.outbox.finish(cutOff: .databaseUnreachable)
            stream.waiter?.resume(returning: .failure(.unavailable("this node lost its database")))
        }
        nodeID = Self.freshNodeID()
    }

    // MARK: Time and outputs

    /// Cuts off the streams whose clients sent nothing for three heartbeat intervals.
    private func cutOffSilentStreams() {
        let silentLimit = 3 * configuration.heartbeatInterval
        let silent = streams.silent(longerThan: silentLimit)
        for (number, stream) in silent {
            logger.info("stream \(number) silent for \(silentLimit) s: cut off")
            metrics.cutOff.increment()
            stream.outbox.finish(cutOff: .silent)
            detach(stream: number)
        }
    }

    func tick() {
        let monotonic = self.monotonic
        if monotonic - lastSilenceCheck >= min(Self.silenceCheckInterval, configuration.heartbeatInterval / 2) {
            lastSilenceCheck = monotonic
            cutOffSilentStreams()
        }
        if log == nil {
            perform(apply([]))
        } else {
            // An append that hangs (a partition that drops packets rather than refusing connections) never
            // fails: what counts is how long ago an append last got through.
            if let reason = link.tick(now: monotonic) { cutOffClients(reason) }
            if monotonic - lastUsageReport >= Self.usageInterval {
                lastUsageReport = monotonic
                let usage = limiter.drainUsage()
                if serving, !usage.isEmpty { submit(.usage(usage)) }
            }
            if monotonic - link.lastAppend >= configuration.tickInterval {
                wakeWriter?.yield()  // an empty entry: this node's heartbeat, and the clock for everyone's timers
            }
            snapshotIfDue()
        }
    }

    private func perform(_ outputs: [ReplicaOutput]) {
        // The gauge before any frame leaves: a client that has its Welcome finds its session counted.
        if replica.sessions.count != recordedSessions {
            recordedSessions = replica.sessions.count
            metrics.sessions.record(recordedSessions)
        }
        for output in outputs {
            switch output {
            case .deliver(let attachment, let notice):
                guard attachment.node == nodeID, let stream = streams[attachment.stream] else { continue }
                switch notice {
                case .matcher(.found), .foundWithSignal:
                    metrics.found.increment()
                    live.count(stream.projectID) { $0.found += 1 }
                case .matcher(.lost):
                    metrics.lost.increment()
                    live.count(stream.projectID) { $0.lost += 1 }
                case .matcher(.invalidToken):
                    metrics.invalidTokens.increment()
                    live.count(stream.projectID) { $0.invalidTokens += 1 }
                case .matcher(.rejected): metrics.rejected.increment()
                default: break
                }
                // The notice in the client protocol's frame; the Welcome with the secret only this node knows.
                var frame = ServerFrame(notice, sessionGrace: configuration.sessionGrace, heartbeatInterval: configuration.heartbeatInterval)
                if case .welcome(var body) = frame.kind {
                    body.resumeSecret = Data(body.resumed ? stream.presentedSecret : stream.newSecret)
                    frame.kind = .welcome(body)
                }
                push(frame, to: attachment.stream)
            case .opened(let attachment, let result):
                guard attachment.node == nodeID else { continue }
                guard let waiter = streams[attachment.stream]?.waiter else {
                    // The stream stopped waiting (the database answered after databaseGrace) or went away before
                    // its session opened: detach the session, which no stream of this node will ever serve.
                    if case .success(let opened) = result { submit(.detach(opened.session, stream: attachment.stream)) }
                    continue
                }
                streams[attachment.stream]?.waiter = nil
                switch result {
                case .success(let opened):
                    streams[attachment.stream]?.session = opened.session
                    if opened.resumed { metrics.sessionsResumed.increment() }
                    logger.debug("session \(opened.session) \(opened.resumed ? "resumed" : "opened") on \(attachment)")
                case .failure:
                    metrics.rejected.increment()
                }
                waiter.resume(returning: result)
            case .cutOff(let attachment, let reason):
                guard attachment.node == nodeID, let stream = streams.remove(attachment.stream) else { continue }
                limiter.forget(stream: attachment.stream)
                stream.outbox.finish(cutOff: reason)
            case .nodeDeclaredDead(let node):
                if node == nodeID { loseDatabase("the other nodes declared this node dead (silent for \(configuration.nodeTimeout) s)") }
            case .sessionClosed(let session):
                logger.debug("session \(session) closed")
            case .usage(let node, let usage):
                if node != nodeID { limiter.debit(usage) }
            }
        }
    }

    private func push(_ frame: ServerFrame, to number: UInt64) {
        guard let stream = streams[number] else { return }
        if !stream.outbox.push(frame) { cutOffSlowReader(number) }
    }

    /// Cuts off a stream whose client does not read (its outbox is full).
    private func cutOffSlowReader(_ number: UInt64) {
        guard let stream = streams[number] else { return }
        logger.info("stream \(number) does not read: cut off")
        metrics.cutOff.increment()
        stream.outbox.finish(cutOff: .slowReader)
        detach(stream: number)
    }
}
