import Foundation
import SottoExchange
import SottoExchangeCore
import SottoExchangeWire
import Synchronization

/// The rate limits of one node as a value: token buckets of work units per key and per project (a frame
/// costs 1, a report of n sightings n), and of session opens per key. Pure: every step is given the time
/// (s on the node's monotonic clock). ``RateLimiter`` holds one behind a lock.
struct RateLimits: Sendable {
    /// A token bucket: work units available now, refilled at a rate up to a burst.
    struct Bucket: Sendable {
        var tokens: Double
        var last: Double

        /// Refills for the time since the last use (an infinite rate: full).
        mutating func refill(rate: Double, burst: Double, now: Double) {
            guard rate.isFinite else {
                tokens = burst
                last = now
                return
            }
            tokens = min(burst, tokens + max(0, now - last) * rate)
            last = now
        }
    }

    /// A stream of the node: whose budget it spends, and when it was last told it is over it (s).
    struct Entry: Sendable {
        let keyID: String
        let projectID: String
        let outbox: Outbox
        var lastNotice = -Double.infinity
    }

    /// What to do with a frame.
    enum Verdict {
        /// Within the limits (or a frame that is never refused): to the host.
        case admitted
        /// Over a limit of `rate` per second: answer on `outbox`; `notify` false for a report refused within a
        /// second of the last notice to this stream (one Error a second, not one per refused frame).
        case refused(rate: Double, notify: Bool, outbox: Outbox)
    }

    private var streams: [UInt64: Entry] = [:]
    private var rates: [String: (rate: Double, burst: Double)] = [:]
    private var keys: [String: Bucket] = [:]
    private var projects: [String: Bucket] = [:]
    private var opens: [String: Bucket] = [:]
    /// Spent on this node since the last ``drainUsage()`` (only when `recordsUsage`).
    private var spent = RateUsage()
    private let projectRate: Double, projectBurst: Double, openShare: Double
    /// True on a node sharing a log: what is spent is recorded, to be reported to the other nodes.
    private let recordsUsage: Bool

    /// Fewest session opens a key may make at once, whatever its burst (a device reconnecting, a few
    /// processes starting together).
    static let minimumOpenBurst: Double = 10
    /// Shortest interval between two notices to one stream that its reports are refused (s).
    static let noticeInterval = 1.0

    init(configuration: ServiceConfiguration, recordsUsage: Bool = false) {
        projectRate = configuration.projectRate
        projectBurst = configuration.projectBurst
        openShare = configuration.sessionOpenShare
        self.recordsUsage = recordsUsage
    }

    /// Registers a key's limits (when it authenticates).
    mutating func limit(key: AuthenticatedKey) {
        rates[key.keyID] = (key.ratePerSecond, key.burst)
    }

    func projectID(stream number: UInt64) -> String? { streams[number]?.projectID }

    mutating func register(stream number: UInt64, keyID: String, projectID: String, outbox: Outbox) {
        streams[number] = Entry(keyID: keyID, projectID: projectID, outbox: outbox)
    }

    mutating func forget(stream number: UInt64) { streams.removeValue(forKey: number) }

    mutating func forgetAllStreams() { streams = [:] }

    /// Takes `cost` (work units: a frame 1, a report of n sightings n; nil for what is never refused, such as
    /// ending an operation, which only lightens the load: a refused client would believe it ended while the
    /// service kept it) from the stream's key's bucket and its project's (both or neither) at `now` (s). A
    /// stream these limits do not know is never refused.
    mutating func admit(cost: Double?, stream number: UInt64, now: Double) -> Verdict {
        guard let cost, var entry = streams[number] else { return .admitted }
        let (rate, burst) = rates[entry.keyID] ?? (.infinity, .infinity)
        var key = keys[entry.keyID] ?? Bucket(tokens: burst, last: now)
        var project = projects[entry.projectID] ?? Bucket(tokens: projectBurst, last: now)
        key.refill(rate: rate, burst: burst, now: now)
        project.refill(rate: projectRate, burst: projectBurst, now: now)
        // A cost above a burst takes the whole burst (so that it can pass at all).
        let keyCost = min(cost, burst), projectCost = min(cost, projectBurst)
        let admitted = key.tokens >= keyCost && project.tokens >= projectCost
        if admitted {
            key.tokens -= keyCost
            project.tokens -= projectCost
            if recordsUsage {
                spent.keys[entry.keyID, default: 0] += keyCost
                spent.projects[entry.projectID, default: 0] += projectCost
            }
        }
        keys[entry.keyID] = key
        projects[entry.projectID] = project
        if admitted { return .admitted }
        let limit = key.tokens < keyCost ? rate : projectRate
        let notify = now - entry.lastNotice >= Self.noticeInterval
        if notify {
            entry.lastNotice = now
            streams[number] = entry
        }
        return .refused(rate: limit, notify: notify, outbox: entry.outbox)
    }

    /// Takes one session open from the key's open bucket at `now` (s): `sessionOpenShare` of its rate and
    /// burst, at least one per second and a burst of ``minimumOpenBurst``. Returns the open rate when refused.
    mutating func admitOpen(key: AuthenticatedKey, now: Double) -> Double? {
        let (rate, burst) = openLimits(rate: key.ratePerSecond, burst: key.burst)
        var bucket = opens[key.keyID] ?? Bucket(tokens: burst, last: now)
        bucket.refill(rate: rate, burst: burst, now: now)
        let admitted = bucket.tokens >= 1
        if admitted {
            bucket.tokens -= 1
            if recordsUsage { spent.opens[key.keyID, default: 0] += 1 }
        }
        opens[key.keyID] = bucket
        return admitted ? nil : rate
    }

    /// The session-open rate and burst of a key of `rate` and `burst`.
    private func openLimits(rate: Double, burst: Double) -> (rate: Double, burst: Double) {
        (max(1, rate * openShare), max(Self.minimumOpenBurst, burst * openShare))
    }

    /// What this node's streams spent since the last call (then forgotten): the report to the other nodes.
    mutating func drainUsage() -> RateUsage {
        defer { spent = RateUsage() }
        return spent
    }

    /// Takes what another node's streams spent from this node's buckets (refilled first at `now`), down to
    /// minus a burst: a budget spent elsewhere is refilled here before this node admits more. Keys this node
    /// has not seen authenticate are skipped (their first bucket here starts full, as the other node's did).
    mutating func debit(_ usage: RateUsage, now: Double) {
        for (id, units) in usage.keys {
            guard let limits = rates[id] else { continue }
            let (rate, burst) = limits
            var bucket = keys[id] ?? Bucket(tokens: burst, last: now)
            bucket.refill(rate: rate, burst: burst, now: now)
            if burst.isFinite { bucket.tokens = max(-burst, bucket.tokens - units) }
            keys[id] = bucket
        }
        for (id, units) in usage.projects {
            var bucket = projects[id] ?? Bucket(tokens: projectBurst, last: now)
            bucket.refill(rate: projectRate, burst: projectBurst, now: now)
            if projectBurst.isFinite { bucket.tokens = max(-projectBurst, bucket.tokens - units) }
            projects[id] = bucket
        }
        for (id, units) in usage.opens {
            guard let limits = rates[id] else { continue }
            let (rate, burst) = openLimits(rate: limits.rate, burst: limits.burst)
            var bucket = opens[id] ?? Bucket(tokens: burst, last: now)
            bucket.refill(rate: rate, burst: burst, now: now)
            if burst.isFinite { bucket.tokens = max(-burst, bucket.tokens - units) }
            opens[id] = bucket
        }
    }
}

/// The rate limits of one node, checked on each stream's own task before a frame reaches the
/// ``MatcherHost`` actor: a peer over its rate costs the decoding of its frames and a lock, never a place in
/// the matcher's queue ahead of other projects' work. The limits themselves are ``RateLimits``, a value
/// behind a `Mutex`, stepped at the node's clock.
///
/// Nodes sharing a PostgreSQL log share the budgets at a coarse grain: each node records what its streams
/// spend, reports it through the log every ``MatcherHost/usageInterval`` and takes what the others report
/// from its own buckets (down to minus a burst). So a key, or a project, gets its rate over the whole
/// cluster, not per node; only while the reports are on their way can it get more: at most a burst plus
/// one report interval (and the log's latency) at its rate from each further node it uses.
final class RateLimiter: Sendable {
    typealias Verdict = RateLimits.Verdict

    private let limits: Mutex<RateLimits>
    /// Time on the node's clock since the limiter was made.
    private let time: Stopwatch

    init(configuration: ServiceConfiguration, recordsUsage: Bool = false, clock: any Clock<Duration> = ContinuousClock()) {
        limits = Mutex(RateLimits(configuration: configuration, recordsUsage: recordsUsage))
        time = Stopwatch(clock)
    }

    private var now: Double { time.elapsed() }

    /// Registers a key's limits (when it authenticates).
    func limit(key: AuthenticatedKey) { limits.withLock { $0.limit(key: key) } }

    func register(stream number: UInt64, keyID: String, projectID: String, outbox: Outbox) {
        limits.withLock { $0.register(stream: number, keyID: keyID, projectID: projectID, outbox: outbox) }
    }

    func forget(stream number: UInt64) { limits.withLock { $0.forget(stream: number) } }

    /// The project whose budget stream `number` spends, if registered.
    func projectID(stream number: UInt64) -> String? { limits.withLock { $0.projectID(stream: number) } }

    func forgetAllStreams() { limits.withLock { $0.forgetAllStreams() } }

    /// See ``RateLimits/admit(cost:stream:now:)``.
    func admit(cost: Double?, stream number: UInt64) -> Verdict {
        let now = self.now
        return limits.withLock { $0.admit(cost: cost, stream: number, now: now) }
    }

    /// See ``RateLimits/admitOpen(key:now:)``.
    func admitOpen(key: AuthenticatedKey) -> Double? {
        let now = self.now
        return limits.withLock { $0.admitOpen(key: key, now: now) }
    }

    /// What this node's streams spent since the last call (then forgotten): the report to the other nodes.
    func drainUsage() -> RateUsage { limits.withLock { $0.drainUsage() } }

    /// See ``RateLimits/debit(_:now:)``.
    func debit(_ usage: RateUsage) {
        let now = self.now
        limits.withLock { $0.debit(usage, now: now) }
    }
}
