/// The link of a node to the shared log, as a state machine: the host reports what happened to its appends,
/// reads and ticks, and each step returns what the host must do. Pure: times are seconds on the host's
/// monotonic clock, given by the caller; no database, no tasks.
///
/// ```
///   standalone                 (serving alone, no log: never changes)
///
///   restoring ──snapshot read──▶ serving ──log truncated──▶ restoring
///       │                          │  ▲
///       │          append failed   │  │ append got through (to restoring while a snapshot is due)
///       └──────────────────────▶ degraded(since) ─────────────┐
///                                  │  failing > grace, append hung,             │
///                                  ▼  no append for grace, declared dead, ...   │
///                                 lost ──────── append got through ─────────────┘
/// ```
///
/// While restoring, serving or degraded the node accepts sessions (their opens wait in the log); lost, it
/// refuses them until an append gets through again.
struct LogDriver: Sendable {
    /// Where the node's link to the log is.
    enum State: Equatable, Sendable {
        /// No log: every command is applied at once.
        case standalone
        /// Joined (or fell behind a truncation): the newest snapshot is read before entries are applied.
        case restoring
        /// Appending and applying.
        case serving
        /// Appends fail since `since` (s); the clients wait, at most the database grace.
        case degraded(since: Double)
        /// The node cut its clients off (the database is away, or the others declared it dead) and refuses
        /// sessions until an append gets through.
        case lost
    }

    /// What the host does after an append failed.
    enum Retry: Equatable, Sendable {
        /// Wait the back-off, then append again.
        case backOff
        /// Give up this append: the next heartbeat tries again.
        case giveUp
        /// Cut the clients off (the reason is logged) and rejoin under a fresh node id.
        case loseDatabase(String)
    }

    /// What the host does after an append got no answer within the grace.
    enum Abandon: Equatable, Sendable {
        /// Cut the clients off (the reason is logged) and rejoin under a fresh node id.
        case loseDatabase(String)
        /// Already lost: take a fresh node id all the same, since the abandoned entry may still land.
        case renewNodeID
        /// Already lost, and the entry was empty: nothing.
        case nothing
    }

    private(set) var state: State
    /// When an append last got through (s); at first, when the node started.
    private(set) var lastAppend: Double
    /// How long appends may fail (or not get through) before the node cuts its clients off (s).
    let grace: Double

    /// A node alone (`shared` false) or joining a shared log at `now` (s).
    init(shared: Bool, grace: Double, now: Double) {
        state = shared ? .restoring : .standalone
        lastAppend = now
        self.grace = grace
    }

    /// True unless the node lost its database: it accepts sessions.
    var acceptsSessions: Bool { state != .lost }

    /// True while the newest snapshot must be read before entries are applied.
    var needsSnapshot: Bool { state == .restoring || snapshotDue }
    /// A snapshot is due but the link is degraded or lost: it is read once the link is back.
    private var snapshotDue = false

    /// An append got through at `now`. Returns true when the database answers again after failures (logged).
    mutating func appendSucceeded(now: Double) -> Bool {
        lastAppend = now
        switch state {
        case .standalone, .serving, .restoring: return false
        case .degraded, .lost:
            state = snapshotDue ? .restoring : .serving
            snapshotDue = false
            return true
        }
    }

    /// An append failed at `now` (the database refused it).
    mutating func appendFailed(now: Double, error: String) -> Retry {
        switch state {
        case .standalone, .lost: return .giveUp
        case .serving, .restoring:
            snapshotDue = state == .restoring
            state = .degraded(since: now)
            return .backOff
        case .degraded(let since):
            guard now - since > grace else { return .backOff }
            let reason = "cannot append to the log for \(grace) s: \(error)"
            lose()
            return .loseDatabase(reason)
        }
    }

    /// An append got no answer within the grace and was abandoned (`empty`: it held no command).
    mutating func appendAbandoned(empty: Bool) -> Abandon {
        guard acceptsSessions else { return empty ? .nothing : .renewNodeID }
        lose()
        return .loseDatabase("an append to the log got no answer within \(grace) s")
    }

    /// The newest snapshot was read (or there was none): entries are applied from there.
    mutating func snapshotRead() {
        if state == .restoring { state = .serving }
        snapshotDue = false
    }

    /// The entries the node needs next were truncated: it continues from the newest snapshot.
    mutating func logTruncated() {
        switch state {
        case .serving: state = .restoring
        case .degraded, .lost: snapshotDue = true
        case .standalone, .restoring: break
        }
    }

    /// A tick at `now`: an append that hangs never fails, so what counts is how long ago one got through.
    /// Returns the reason to cut the clients off, if it is time.
    mutating func tick(now: Double) -> String? {
        guard state != .standalone, acceptsSessions, now - lastAppend > grace else { return nil }
        lose()
        return "no append got through to the log for \(grace) s"
    }

    /// The node cuts its clients off and refuses sessions until an append gets through. Alone, a node never
    /// loses its log: it stays standalone.
    mutating func lose() {
        switch state {
        case .standalone: break
        case .restoring: snapshotDue = true; state = .lost
        case .serving, .degraded, .lost: state = .lost
        }
    }
}
