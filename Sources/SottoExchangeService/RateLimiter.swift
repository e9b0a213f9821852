import Foundation
import SottoExchange
import SottoExchangeWire
import Synchronization

/// What a node's streams spent of the rate limits over a while: work units per key id and per project id,
/// session opens per key id. Nodes sharing a log report it to each other (``RateLimiter/drainUsage()``,
/// ``RateLimiter/debit(_:)``).
struct RateUsage: Sendable, Equatable {
    var keys: [String: Double] = [:]
    var projects: [String: Double] = [:]
    var opens: [String: Double] = [:]

    var isEmpty: Bool { keys.isEmpty && projects.isEmpty && opens.isEmpty }
}

/// The rate limits of one node, checked on each stream's own task before a frame reaches the
/// ``MatcherHost`` actor: a peer over its rate costs the decoding of its frames and a lock, never a place in
/// the matcher's queue ahead of other projects' work. Token buckets of work units per key and per project
/// (a frame costs 1, a report of n sightings n), and of session opens per key.
///
/// Nodes sharing a PostgreSQL log share the budgets at a coarse grain: each node records what its streams
/// spend, reports it through the log every ``MatcherHost/usageInterval`` and takes what the others report
/// from its own buckets (down to minus a burst). So a key, or a project, gets its rate over the whole
/// cluster, not per node; only while the reports are on their way can it get more: at most a burst plus
/// one report interval (and the log's latency) at its rate from each further node it uses.
final class RateLimiter: Sendable {
    /// A token bucket: work units available now, refilled at a rate up to a burst.
    struct Bucket {
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
    struct Entry {
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

    private struct State {
        var streams: [UInt64: Entry] = [:]
        var rates: [String: (rate: Double, burst: Double)] = [:]
        var keys: [String: Bucket] = [:]
        var projects: [String: Bucket] = [:]
        var opens: [String: Bucket] = [:]
        /// Spent on this node since the last ``RateLimiter/drainUsage()`` (only when `recordsUsage`).
        var spent = RateUsage()
    }

    private let state = Mutex(State())
    private let projectRate: Double, projectBurst: Double, openShare: Double
    /// True on a node sharing a log: what is spent is recorded, to be reported to the other nodes.
    private let recordsUsage: Bool
    private let started = ContinuousClock.now

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

    private var now: Double { (ContinuousClock.now - started).inSeconds }

    /// Registers a key's limits (when it authenticates).
    func limit(key: AuthenticatedKey) {
        state.withLock { $0.rates[key.keyID] = (key.ratePerSecond, key.burst) }
    }

    func register(stream number: UInt64, keyID: String, projectID: String, outbox: Outbox) {
        state.withLock { $0.streams[number] = Entry(keyID: keyID, projectID: projectID, outbox: outbox) }
    }

    func forget(stream number: UInt64) { _ = state.withLock { $0.streams.removeValue(forKey: number) } }

    func forgetAllStreams() { state.withLock { $0.streams = [:] } }

    /// Takes the frame's cost from its key's bucket and its project's (both or neither). Ending an
    /// operation is never refused (it only lightens the load, and a refused client would believe it ended
    /// while the service kept it); neither is a frame of a stream this limiter does not know.
    func admit(_ frame: ClientFrame, stream number: UInt64) -> Verdict {
        var cost = 1.0
        switch frame.kind {
        case .unpublish, .unsubscribe, .heartbeat: return .admitted
        case .observe(let body): cost = Double(max(1, body.sightings.count))
        default: break
        }
        let now = self.now, projectRate = self.projectRate, projectBurst = self.projectBurst, recordsUsage = self.recordsUsage
        return state.withLock { state in
            guard var entry = state.streams[number] else { return .admitted }
            let (rate, burst) = state.rates[entry.keyID] ?? (.infinity, .infinity)
            var key = state.keys[entry.keyID] ?? Bucket(tokens: burst, last: now)
            var project = state.projects[entry.projectID] ?? Bucket(tokens: projectBurst, last: now)
            key.refill(rate: rate, burst: burst, now: now)
            project.refill(rate: projectRate, burst: projectBurst, now: now)
            // A cost above a burst takes the whole burst (so that it can pass at all).
            let keyCost = min(cost, burst), projectCost = min(cost, projectBurst)
            let admitted = key.tokens >= keyCost && project.tokens >= projectCost
            if admitted {
                key.tokens -= keyCost
                project.tokens -= projectCost
                if recordsUsage {
                    state.spent.keys[entry.keyID, default: 0] += keyCost
                    state.spent.projects[entry.projectID, default: 0] += projectCost
                }
            }
            state.keys[entry.keyID] = key
            state.projects[entry.projectID] = project
            if admitted { return .admitted }
            let limit = key.tokens < keyCost ? rate : projectRate
            let notify = now - entry.lastNotice >= Self.noticeInterval
            if notify {
                entry.lastNotice = now
                state.streams[number] = entry
            }
            return .refused(rate: limit, notify: notify, outbox: entry.outbox)
        }
    }

    /// Takes one session open from the key's open bucket: `sessionOpenShare` of its rate and burst, at
    /// least one per second and a burst of ``minimumOpenBurst``. Returns the open rate when refused.
    func admitOpen(key: AuthenticatedKey) -> Double? {
        let (rate, burst) = openLimits(rate: key.ratePerSecond, burst: key.burst)
        let now = self.now, recordsUsage = self.recordsUsage
        return state.withLock { state in
            var bucket = state.opens[key.keyID] ?? Bucket(tokens: burst, last: now)
            bucket.refill(rate: rate, burst: burst, now: now)
            let admitted = bucket.tokens >= 1
            if admitted {
                bucket.tokens -= 1
                if recordsUsage { state.spent.opens[key.keyID, default: 0] += 1 }
            }
            state.opens[key.keyID] = bucket
            return admitted ? nil : rate
        }
    }

    /// The session-open rate and burst of a key of `rate` and `burst`.
    private func openLimits(rate: Double, burst: Double) -> (rate: Double, burst: Double) {
        (max(1, rate * openShare), max(Self.minimumOpenBurst, burst * openShare))
    }

    /// What this node's streams spent since the last call (then forgotten): the report to the other nodes.
    func drainUsage() -> RateUsage {
        state.withLock { state in
            defer { state.spent = RateUsage() }
            return state.spent
        }
    }

    /// Takes what another node's streams spent from this node's buckets (refilled first), down to minus a
    /// burst: a budget spent elsewhere is refilled here before this node admits more. Keys this node has not
    /// seen authenticate are skipped (their first bucket here starts full, as the other node's did).
    func debit(_ usage: RateUsage) {
        let now = self.now, projectRate = self.projectRate, projectBurst = self.projectBurst
        state.withLock { state in
            for (id, units) in usage.keys {
                guard let limits = state.rates[id] else { continue }
                let (rate, burst) = limits
                var bucket = state.keys[id] ?? Bucket(tokens: burst, last: now)
                bucket.refill(rate: rate, burst: burst, now: now)
                if burst.isFinite { bucket.tokens = max(-burst, bucket.tokens - units) }
                state.keys[id] = bucket
            }
            for (id, units) in usage.projects {
                var bucket = state.projects[id] ?? Bucket(tokens: projectBurst, last: now)
                bucket.refill(rate: projectRate, burst: projectBurst, now: now)
                if projectBurst.isFinite { bucket.tokens = max(-projectBurst, bucket.tokens - units) }
                state.projects[id] = bucket
            }
            for (id, units) in usage.opens {
                guard let limits = state.rates[id] else { continue }
                let (rate, burst) = openLimits(rate: limits.rate, burst: limits.burst)
                var bucket = state.opens[id] ?? Bucket(tokens: burst, last: now)
                bucket.refill(rate: rate, burst: burst, now: now)
                if burst.isFinite { bucket.tokens = max(-burst, bucket.tokens - units) }
                state.opens[id] = bucket
            }
        }
    }
}
