import SottoSupport

/// One stream of one node: where a session's frames go. A node numbers its streams; the pair is unique in
/// a cluster because every node process (and every rejoin) has a fresh random id.
public struct NodeStream: Hashable, Sendable, CustomStringConvertible {
    /// The node holding the stream.
    public var node: String
    /// The stream's number on that node.
    public var stream: UInt64
    public var description: String { "\(node)/\(stream)" }

    public init(node: String, stream: UInt64) {
        self.node = node
        self.stream = stream
    }
}

/// The project a session belongs to, as the replica needs it: its id, its name (told in the Welcome) and its
/// session quota.
package struct SessionProject: Sendable, Hashable {
    package var id: String
    package var name: String
    /// Most sessions the project may hold at once.
    package var maxSessions: Int

    package init(id: String, name: String, maxSessions: Int) {
        self.id = id
        self.name = name
        self.maxSessions = maxSessions
    }
}

/// A beacon as the matcher registers it (the store's record, or for a decommissioned one a beacon of no
/// project that resolves to nothing).
package struct RegisteredBeacon: Sendable, Hashable {
    /// The stable ID (1 to 15 bytes).
    package var id: [UInt8]
    package var projectID: String
    /// Public attachments are delivered to subscribers of every project.
    package var isPublic: Bool
    /// How a rotating beacon's broadcast ID changes; nil for a fixed beacon.
    package var rotation: BeaconRotation?
    package var attachments: [Message]

    package init(id: [UInt8], projectID: String, isPublic: Bool, rotation: BeaconRotation?, attachments: [Message]) {
        self.id = id
        self.projectID = projectID
        self.isPublic = isPublic
        self.rotation = rotation
        self.attachments = attachments
    }
}

/// The session a stream holds, once its Open was applied.
public struct OpenedSession: Sendable {
    public let session: SessionID
    public let resumed: Bool
    /// The stream's number on its node.
    public let stream: UInt64
}

/// What a node asks of the matcher on behalf of its clients: the commands of the replication log.
package enum ReplicaCommand: Sendable {
    /// A stream said Hello with a valid key: resume `resume` if its secret matches, else open `session`.
    package struct Open: Sendable {
        package var stream: UInt64
        package var session: SessionID
        /// SHA-256 of the new session's resume secret.
        package var secretHash: [UInt8]
        package var resume: (session: SessionID, secretHash: [UInt8])?
        package var project: SessionProject
        package var keyID: String
        package var broadcasts: Bool
        /// The key's own session quota (the service's `AuthenticatedKey.maxSessions`); nil: the project's only.
        package var keyMaxSessions: Int?

        package init(stream: UInt64, session: SessionID, secretHash: [UInt8], resume: (session: SessionID, secretHash: [UInt8])?,
                     project: SessionProject, keyID: String, broadcasts: Bool, keyMaxSessions: Int? = nil) {
            self.stream = stream
            self.session = session
            self.secretHash = secretHash
            self.resume = resume
            self.project = project
            self.keyID = keyID
            self.broadcasts = broadcasts
            self.keyMaxSessions = keyMaxSessions
        }
    }
    case open(Open)
    /// The stream went away: the session waits to be resumed for the grace period.
    case detach(SessionID, stream: UInt64)
    /// The client ended its session.
    case end(SessionID, stream: UInt64)
    /// A session's request, checked at the edge by the transport that received it (what depends on the
    /// matcher's state is checked when it is applied).
    case request(SessionID, stream: UInt64, MatcherRequest)
    /// The store's beacon registry.
    case beacons([RegisteredBeacon])
    /// Keys revoked in the store (ids, sorted): every session they opened ends, attached to any node's stream
    /// or waiting in its grace period.
    case revoke(keys: [String])
    /// What the appending node's streams spent of the rate limits since its previous report.
    case usage(RateUsage)
}

/// One append to the log: a node's batch of commands, applied at the time the log gave it.
package struct ReplicaEntry: Sendable {
    package var node: String
    /// Entropy for the tokens this entry issues (32 bytes from the appending node's CSPRNG); empty on a
    /// single node, whose matcher draws from the system's CSPRNG directly.
    package var seed: [UInt8]
    /// The appending node's wall clock (s since 1970), for the clock-skew metric only.
    package var nodeClock: Double
    package var commands: [ReplicaCommand]

    package init(node: String, seed: [UInt8] = [], nodeClock: Double = 0, commands: [ReplicaCommand]) {
        self.node = node
        self.seed = seed
        self.nodeClock = nodeClock
        self.commands = commands
    }
}

/// What the matcher tells one session, before any client protocol: the node holding the session's stream
/// writes it in that transport's frames.
package enum SessionNotice: Sendable, Hashable {
    /// The session is open (or resumed) in `project`: the Welcome, without the resume secret (which only the
    /// node that opened the stream knows; it fills it in).
    case welcome(SessionID, project: String, resumed: Bool)
    /// A notice of the matcher (a token, an operation's status, found, lost, expired, turns...).
    case matcher(MatcherNotice)
    /// A message found, with the in-band SNR (dB) and level (dBFS) it was heard with.
    case foundWithSignal(OperationID, Message, snr: Double, level: Double)
    /// An unpublish or unsubscribe is done: the operation is over (after the events its end caused).
    case ended(OperationID)
}

/// What applying an entry asks of the node that applied it. Every replica produces the same outputs; each
/// node acts on those for its own streams and ignores the rest.
package enum ReplicaOutput: Sendable {
    /// Tell the session, on the stream holding it.
    case deliver(NodeStream, SessionNotice)
    /// The Open from this stream is done: the session the stream now holds, or why not.
    case opened(NodeStream, Result<OpenedSession, ExchangeError>)
    /// The stream no longer holds its session.
    case cutOff(NodeStream, CutOff)
    /// The node was declared dead (silent for `nodeTimeout`): its sessions wait to be resumed elsewhere and
    /// its entries are ignored from now on. A node that reads this of itself must rejoin under a new id.
    case nodeDeclaredDead(String)
    /// The session ended (closed, or its grace period ran out).
    case sessionClosed(SessionID)
    /// What `node`'s streams spent of the rate limits: the other nodes take it from their own budgets.
    case usage(node: String, RateUsage)
}

/// Timings that every replica of a cluster must share (they decide what the log means).
package struct ReplicaTimings: Sendable {
    /// How long a session outlives its stream (s).
    package var sessionGrace: Double
    /// Sent to clients in Welcome (s).
    package var heartbeatInterval: Double
    /// Lost timeout of a subscription that does not ask for one (s).
    package var defaultLostTimeout: Double
    /// A node with no entry for this long is declared dead (s).
    package var nodeTimeout: Double
    /// A pause of the whole log longer than this is a database outage, not a dead node: liveness restarts (s).
    /// A pause longer than half the node timeout is one too (see ``outageThreshold``).
    package var outageGap: Double
    /// Most bytes the live publications of one project may hold (namespaces, types and contents).
    package var projectPublicationBytes: Int = ReplicaTimings.defaultProjectPublicationBytes
    /// The turns the matcher plans for sessions that hear each other (nil: none).
    package var broadcastTurns: BroadcastCoordinator.Rules? = nil
    /// The in-band SNR (dB) from which a sighting counts for earshot (the core's `earshotSNR`; not in its snapshot).
    package var earshotSNR: Double = MatcherCore.defaultEarshotSNR
    /// The rules of link adaptation (nil: off).
    package var linkAdaptation: LinkAdaptation.Rules? = nil

    /// The pause of the whole log beyond which it counts as an outage (s): the outage gap, or half the node
    /// timeout when that is shorter. A node is declared dead only for a silence during which the log moved
    /// for at least half the node timeout; otherwise a short database restart (a pause longer than the node
    /// timeout but shorter than the outage gap) would have every node declare every other one dead.
    package var outageThreshold: Double { min(outageGap, nodeTimeout / 2) }

    /// Most bytes the live publications of one project hold by default (64 MiB).
    package static let defaultProjectPublicationBytes = 64 << 20

    package init(sessionGrace: Double, heartbeatInterval: Double, defaultLostTimeout: Double, nodeTimeout: Double, outageGap: Double,
                 projectPublicationBytes: Int = ReplicaTimings.defaultProjectPublicationBytes,
                 broadcastTurns: BroadcastCoordinator.Rules? = nil, earshotSNR: Double = MatcherCore.defaultEarshotSNR,
                 linkAdaptation: LinkAdaptation.Rules? = nil) {
        self.sessionGrace = sessionGrace
        self.heartbeatInterval = heartbeatInterval
        self.defaultLostTimeout = defaultLostTimeout
        self.nodeTimeout = nodeTimeout
        self.outageGap = outageGap
        self.projectPublicationBytes = projectPublicationBytes
        self.broadcastTurns = broadcastTurns
        self.earshotSNR = earshotSNR
        self.linkAdaptation = linkAdaptation
    }
}

/// The replicated state of the matcher service: the pure ``MatcherCore`` plus the session registry
/// (projects, keys, resume secrets' hashes, operations, which stream of which node holds each session,
/// quotas). Applying the same entries in the same order gives every replica the same state, so one node
/// serves alone (entries applied as they come) and several nodes share one PostgreSQL log (entries
/// applied in the log's order, at the database's time: node clocks never decide a timer).
package struct ExchangeReplica: Sendable {
    package enum Operation: Equatable, Sendable {
        case publication(Message, Strategy)
        case subscription(MessageFilter, Strategy, lostTimeout: Double)
    }

    package struct Session: Sendable {
        package var project: SessionProject
        package var keyID: String
        package var secretHash: [UInt8]
        /// The stream holding the session; nil while detached.
        package var attachment: NodeStream?
        package var operations: [OperationID: Operation]

        package init(project: SessionProject, keyID: String, secretHash: [UInt8], attachment: NodeStream?,
                     operations: [OperationID: Operation] = [:]) {
            self.project = project
            self.keyID = keyID
            self.secretHash = secretHash
            self.attachment = attachment
            self.operations = operations
        }
    }

    package private(set) var core: MatcherCore
    package var sessions: [SessionID: Session] = [:]
    package var sessionsPerProject: [String: Int] = [:]
    /// Sessions per key id, derived from `sessions` (not in snapshots: rebuilt when one is read).
    package var sessionsPerKey: [String: Int] = [:]
    /// Detached sessions and when they were detached (s).
    package var detached: [SessionID: Double] = [:]
    /// Live nodes and when each was last heard (s).
    package var nodes: [String: Double] = [:]
    /// Nodes declared dead and when (s); forgotten after a day.
    package var deadNodes: [String: Double] = [:]
    /// Time of the last entry applied (s).
    package var time: Double?
    /// Unix time of the last entry applied (s), for rotating beacons.
    package var unixTime: Double = 0
    package let timings: ReplicaTimings

    /// How long a dead node's id is remembered (s): its late entries are ignored meanwhile.
    package static let deadNodeMemory = 86_400.0

    package init(core: MatcherCore, timings: ReplicaTimings) {
        self.core = core
        // A core restored from a snapshot keeps its turns' state when the rules are the same.
        if core.turns?.rules != timings.broadcastTurns {
            self.core.turns = timings.broadcastTurns.map(BroadcastCoordinator.init(rules:))
        }
        self.core.earshotSNR = timings.earshotSNR
        // Likewise link adaptation's state.
        if core.linkAdaptation?.rules != timings.linkAdaptation {
            self.core.linkAdaptation = timings.linkAdaptation.map(LinkAdaptation.init(rules:))
        }
        self.timings = timings
    }

    /// Applies one entry at `time` (s; a time earlier than the last one counts as the last one) when the
    /// wall clock that orders the log reads `unixTime` (s since 1970; the database's clock in a cluster, so
    /// every replica resolves rotating beacons alike); nil: `time` is Unix time (tests).
    package mutating func apply(_ entry: ReplicaEntry, at entryTime: Double, unixTime: Double? = nil) -> [ReplicaOutput] {
        var outputs: [ReplicaOutput] = []
        let now = max(entryTime, time ?? entryTime)
        self.unixTime = unixTime ?? now
        if let last = time, now - last > timings.outageThreshold {
            // Nobody could append: the database was away. Every node gets its full timeout again.
            for node in nodes.keys { nodes[node]! += now - last }
        }
        time = now
        let accepted = deadNodes[entry.node] == nil
        if accepted { nodes[entry.node] = now } else { outputs.append(.nodeDeclaredDead(entry.node)) }
        for (node, heard) in nodes where now - heard > timings.nodeTimeout {
            nodes[node] = nil
            deadNodes[node] = now
            outputs.append(.nodeDeclaredDead(node))
            for (id, session) in sessions where session.attachment?.node == node { detach(id, now: now) }
        }
        for (node, declared) in deadNodes where now - declared > Self.deadNodeMemory { deadNodes[node] = nil }

        if !entry.seed.isEmpty { core.useGenerator(SeededEntropy(seed: entry.seed)) }
        if accepted {
            for command in entry.commands { apply(command, node: entry.node, now: now, into: &outputs) }
        }
        handle(.tick, now: now, into: &outputs)
        for (id, since) in detached where now - since > timings.sessionGrace { close(id, now: now, into: &outputs) }
        return outputs
    }

    // MARK: Commands

    private mutating func apply(_ command: ReplicaCommand, node: String, now: Double, into outputs: inout [ReplicaOutput]) {
        switch command {
        case .open(let open):
            self.open(open, at: NodeStream(node: node, stream: open.stream), now: now, into: &outputs)
        case .detach(let id, let stream):
            if sessions[id]?.attachment == NodeStream(node: node, stream: stream) { detach(id, now: now) }
        case .end(let id, let stream):
            if sessions[id]?.attachment == NodeStream(node: node, stream: stream) { close(id, now: now, into: &outputs) }
        case .request(let id, let stream, let request):
            // Requests of a stream that no longer holds its session (resumed elsewhere) are dropped.
            guard let attachment = sessions[id]?.attachment, attachment == NodeStream(node: node, stream: stream) else { return }
            receive(request, session: id, attachment: attachment, now: now, into: &outputs)
        case .beacons(let beacons):
            for beacon in beacons {
                handle(.registerBeacon(id: beacon.id, appID: beacon.projectID, attachments: beacon.attachments,
                                                  publicVisibility: beacon.isPublic, rotation: beacon.rotation), now: now, into: &outputs)
            }
        case .revoke(let keys):
            revoke(Set(keys), now: now, into: &outputs)
        case .usage(let usage):
            outputs.append(.usage(node: node, usage))
        }
    }

    /// Ends every session of the `keys`, in the order of their ids (the same on every replica): those attached
    /// lose their stream (REVOKED), those waiting in their grace period go at once rather than at its end.
    private mutating func revoke(_ keys: Set<String>, now: Double, into outputs: inout [ReplicaOutput]) {
        let ended = sessions.filter { keys.contains($0.value.keyID) }.keys.sorted { $0.value < $1.value }
        for id in ended {
            if let attachment = sessions[id]?.attachment { outputs.append(.cutOff(attachment, .revoked)) }
            close(id, now: now, into: &outputs)
        }
    }

    private mutating func open(_ open: ReplicaCommand.Open, at attachment: NodeStream, now: Double, into outputs: inout [ReplicaOutput]) {
        // A session resumes only with the key that opened it: a rotated or revoked key's sessions stay behind.
        if let resume = open.resume, let existing = sessions[resume.session], existing.project.id == open.project.id,
           existing.keyID == open.keyID, ConstantTime.equal(existing.secretHash, resume.secretHash) {
            let id = resume.session
            if let previous = existing.attachment, previous != attachment { outputs.append(.cutOff(previous, .replaced)) }
            sessions[id]?.attachment = attachment
            detached[id] = nil
            outputs.append(.deliver(attachment, .welcome(id, project: existing.project.name, resumed: true)))
            if let token = core.token(of: id) { outputs.append(.deliver(attachment, .matcher(.token(token)))) }
            // The profile it should play that token in: a change made while it was detached was not delivered.
            if let profile = core.broadcastProfile(of: id) { outputs.append(.deliver(attachment, .matcher(.profile(profile)))) }
            outputs.append(.opened(attachment, .success(OpenedSession(session: id, resumed: true, stream: attachment.stream))))
            return
        }
        let id = open.session
        guard sessions[id] == nil else {
            // A fresh 96-bit id that exists already: the opening node's generator is broken.
            outputs.append(.opened(attachment, .failure(.unavailable("session id collision"))))
            return
        }
        guard sessionsPerProject[open.project.id, default: 0] < open.project.maxSessions else {
            outputs.append(.opened(attachment, .failure(.sessionQuotaExceeded(open.project.maxSessions))))
            return
        }
        if let quota = open.keyMaxSessions, sessionsPerKey[open.keyID, default: 0] >= quota {
            outputs.append(.opened(attachment, .failure(.sessionQuotaExceeded(quota))))
            return
        }
        sessions[id] = Session(project: open.project, keyID: open.keyID, secretHash: open.secretHash, attachment: attachment)
        sessionsPerProject[open.project.id, default: 0] += 1
        sessionsPerKey[open.keyID, default: 0] += 1
        outputs.append(.deliver(attachment, .welcome(id, project: open.project.name, resumed: false)))
        handle(.openSession(id, appID: open.project.id, broadcasts: open.broadcasts), now: now, into: &outputs)
        outputs.append(.opened(attachment, .success(OpenedSession(session: id, resumed: false, stream: attachment.stream))))
    }

    private mutating func detach(_ id: SessionID, now: Double) {
        guard sessions[id]?.attachment != nil else { return }
        sessions[id]?.attachment = nil
        detached[id] = now
    }

    private mutating func close(_ id: SessionID, now: Double, into outputs: inout [ReplicaOutput]) {
        guard let session = sessions.removeValue(forKey: id) else { return }
        detached[id] = nil
        sessionsPerProject[session.project.id, default: 1] -= 1
        if sessionsPerProject[session.project.id] == 0 { sessionsPerProject[session.project.id] = nil }
        sessionsPerKey[session.keyID, default: 1] -= 1
        if sessionsPerKey[session.keyID] == 0 { sessionsPerKey[session.keyID] = nil }
        handle(.closeSession(id), now: now, into: &outputs)
        outputs.append(.sessionClosed(id))
    }

    // MARK: Requests

    private mutating func receive(_ request: MatcherRequest, session: SessionID, attachment: NodeStream, now: Double,
                                  into outputs: inout [ReplicaOutput]) {
        switch request {
        case .publish(let op, let message, let strategy):
            publish(op, message, strategy, session: session, attachment: attachment, now: now, into: &outputs)
        case .subscribe(let op, let filter, let strategy, let requested):
            // 0: the service's default.
            let lostTimeout = requested == 0 ? timings.defaultLostTimeout : requested
            do throws(ExchangeError) {
                try record(.subscription(filter, strategy, lostTimeout: lostTimeout), op: op, session: session, attachment: attachment,
                           into: &outputs) { core in
                    core.handle(.subscribe(session, op, filter, strategy, lostTimeout: lostTimeout), now: now)
                }
            } catch {
                outputs.append(.deliver(attachment, .matcher(.rejected(op, error))))
            }
        case .unpublish(let op): end(op, publication: true, session: session, attachment: attachment, now: now, into: &outputs)
        case .unsubscribe(let op): end(op, publication: false, session: session, attachment: attachment, now: now, into: &outputs)
        case .observe(let sightings):
            for sighting in sightings.prefix(ExchangeLimits.maxSightingsPerReport) {
                handle(.observe(session, sighting.payload, snr: sighting.snr, level: sighting.level), now: now, into: &outputs)
            }
        case .takeTurns(let frameAirtime, let aliasAirtime):
            handle(.takeTurns(session, frameAirtime: frameAirtime, aliasAirtime: aliasAirtime), now: now, into: &outputs)
        }
    }

    private mutating func publish(_ op: OperationID, _ message: Message, _ strategy: Strategy, session: SessionID, attachment: NodeStream,
                                  now: Double, into outputs: inout [ReplicaOutput]) {
        do throws(ExchangeError) {
            if let project = sessions[session]?.project.id {
                let replaced = core.publishedMessage(session: session, operation: op).map(MatcherCore.heldBytes) ?? 0
                let added = MatcherCore.heldBytes(of: message) - replaced
                if added > 0, core.publicationBytes(ofApp: project) + added > timings.projectPublicationBytes {
                    throw .publicationBytesExceeded(timings.projectPublicationBytes)
                }
            }
            try record(.publication(message, strategy), op: op, session: session, attachment: attachment, into: &outputs) { core in
                core.handle(.publish(session, op, message, strategy), now: now)
            }
        } catch {
            outputs.append(.deliver(attachment, .matcher(.rejected(op, error))))
        }
    }

    /// Records an operation and runs it through the core. Sending an operation again with the same
    /// parameters (a client re-establishing it after a reconnection) changes nothing and answers with what
    /// a subscription has found.
    private mutating func record(_ operation: Operation, op: OperationID, session: SessionID, attachment: NodeStream,
                                 into outputs: inout [ReplicaOutput],
                                 _ run: (inout MatcherCore) -> [MatcherEvent]) throws(ExchangeError) {
        guard let state = sessions[session] else { return }
        if let existing = state.operations[op] {
            if existing == operation {
                let visible: [Message]
                if case .subscription = operation { visible = core.visibleMessages(session: session, operation: op) } else { visible = [] }
                outputs.append(.deliver(attachment, .matcher(.accepted(op, visible: visible))))
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
        outputs.append(.deliver(attachment, .matcher(.accepted(op, visible: []))))
        let events = run(&core)
        route(events, into: &outputs)
    }

    private mutating func end(_ op: OperationID, publication: Bool, session: SessionID, attachment: NodeStream, now: Double,
                              into outputs: inout [ReplicaOutput]) {
        guard let existing = sessions[session]?.operations[op] else {
            outputs.append(.deliver(attachment, .matcher(.rejected(op, .unknownOperation))))
            return
        }
        let isPublication: Bool
        if case .publication = existing { isPublication = true } else { isPublication = false }
        guard isPublication == publication else {
            outputs.append(.deliver(attachment, .matcher(.rejected(op, .unknownOperation))))
            return
        }
        sessions[session]?.operations[op] = nil
        handle(publication ? .unpublish(session, op) : .unsubscribe(session, op), now: now, into: &outputs)
        // The acknowledgement (STATE_ENDED), after the events the end caused.
        outputs.append(.deliver(attachment, .ended(op)))
    }

    // MARK: Routing

    /// Runs one input through the core and routes its events (the events first: `route` reads the core's
    /// state after the input, so it must not be handed a copy of `self` taken before).
    private mutating func handle(_ input: MatcherInput, now: Double, into outputs: inout [ReplicaOutput]) {
        let events = core.handle(input, now: now, unixTime: unixTime)
        route(events, into: &outputs)
    }

    /// The core's events as frames for the streams holding their sessions (a detached session's are dropped:
    /// a resumed client reconciles against what its subscriptions have found).
    private func route(_ events: [MatcherEvent], into outputs: inout [ReplicaOutput]) {
        for event in events {
            let (session, notice) = event.notice
            guard let attachment = sessions[session]?.attachment else { continue }
            if case .found(let session, let op, let message) = event, let signal = core.signal(session: session, operation: op, message: message) {
                outputs.append(.deliver(attachment, .foundWithSignal(op, message, snr: signal.snr, level: signal.level)))
            } else {
                outputs.append(.deliver(attachment, .matcher(notice)))
            }
        }
    }
}
