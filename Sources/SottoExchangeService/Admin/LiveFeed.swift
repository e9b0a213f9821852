import Foundation
import SottoExchangeCore

/// One second of a project's live view: what it holds at `time` and what it did per second since the sample before.
public struct LivePoint: Sendable, Hashable {
    /// When it was sampled (s since 1970).
    public var time: Double
    /// Sessions held (attached or within their grace period).
    public var sessions = 0
    /// Live publications.
    public var publications = 0
    /// Live subscriptions.
    public var subscriptions = 0
    /// Sightings reported per second.
    public var sightingsPerSecond = 0.0
    /// Found notices delivered per second.
    public var foundPerSecond = 0.0
    /// Lost notices delivered per second.
    public var lostPerSecond = 0.0
    /// Tokens heard that resolve to nothing, per second.
    public var invalidTokensPerSecond = 0.0
    /// Frames refused over a rate limit, per second.
    public var rateLimitedPerSecond = 0.0
    /// The median in-band SNR (dB) of the sightings since the sample before; nil without any.
    public var medianSNR: Double?

    var json: [String: Any] {
        ["time": time, "sessions": sessions, "publications": publications, "subscriptions": subscriptions,
         "sightingsPerSecond": sightingsPerSecond, "foundPerSecond": foundPerSecond, "lostPerSecond": lostPerSecond,
         "invalidTokensPerSecond": invalidTokensPerSecond, "rateLimitedPerSecond": rateLimitedPerSecond,
         "medianSNR": medianSNR ?? NSNull()]
    }
}

/// A project's live view: its last point, what it publishes and subscribes to by namespace/type, its history.
public struct LiveView: Sendable {
    /// The project's id.
    public var project: String
    /// Seconds between points.
    public var interval: Double
    /// The last point (zeros before the first sample).
    public var current: LivePoint
    /// Live publications by `namespace/type`.
    public var publicationsByType: [String: Int]
    /// Live subscriptions by what their filters include (`AppCensus.subscriptions`).
    public var subscriptionsByType: [String: Int]
    /// The last points, oldest first.
    public var history: [LivePoint]

    var json: [String: Any] {
        ["project": project, "interval": interval, "current": current.json, "publicationsByType": publicationsByType,
         "subscriptionsByType": subscriptionsByType, "history": history.map(\.json)]
    }
}

/// The operator's live views (issue 34): samples the service's own state (``ServiceStatistics``, from
/// ``MatcherServer/liveStatistics()``: this node's counters and, on several nodes, the others' as they shared them)
/// every ``interval`` seconds, summing what each node counted since the previous sample, keeps each project's last ``historyLength`` points
/// (the console's sparklines) and hands each new point to the views watching that project (server-sent events).
public actor LiveFeed {
    /// Seconds between samples.
    public let interval: Double
    /// Points kept per project (at one a second: the last five minutes).
    public let historyLength: Int
    /// Projects whose history is kept (those seen most recently stay).
    public static let maxProjects = 1_000
    /// Views watching at once (each an open server-sent events stream); beyond, a new one is refused.
    public static let maxWatchers = 100

    private let source: @Sendable () async -> ServiceStatistics
    private let clock: @Sendable () -> Double
    /// The last sample: its time and every node's counters (this node's under "").
    private var previous: (time: Double, nodes: [String: [String: ProjectCounters]])?
    private var histories: [String: [LivePoint]] = [:]
    private var latestCensus: [String: AppCensus] = [:]
    private var watchers: [UInt64: (project: String, continuation: AsyncStream<LivePoint>.Continuation)] = [:]
    private var nextWatcher: UInt64 = 0

    /// - Parameters:
    ///   - interval: seconds between samples.
    ///   - historyLength: points kept per project.
    ///   - clock: the points' time, in seconds since 1970.
    ///   - source: reads the service's state (``MatcherHost/statistics()``).
    public init(interval: Double = 1, historyLength: Int = 300, clock: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 },
                source: @escaping @Sendable () async -> ServiceStatistics) {
        self.interval = interval
        self.historyLength = historyLength
        self.clock = clock
        self.source = source
    }

    /// Samples every ``interval`` until cancelled; then ends the watchers' streams.
    public func run() async {
        while !Task.isCancelled {
            await sample()
            try? await Task.sleep(for: .seconds(interval))
        }
        for watcher in watchers.values { watcher.continuation.finish() }
        watchers = [:]
    }

    /// Takes one sample now: a point for every project holding sessions or having counted anything, appended to
    /// its history and given to its watchers.
    public func sample() async {
        let statistics = await source()
        let time = clock()
        let elapsed = previous.map { max(time - $0.time, 1e-3) }
        // Every node's counters, this node's under "" (other nodes' ids are never empty).
        var nodes = statistics.otherNodes
        nodes[""] = statistics.counters
        var projects = Set(statistics.census.keys)
        for counters in nodes.values { projects.formUnion(counters.keys) }
        var points: [String: LivePoint] = [:]
        for project in projects {
            var point = LivePoint(time: time)
            if let census = statistics.census[project] {
                point.sessions = census.sessions
                point.publications = census.publications.values.reduce(0, +)
                point.subscriptions = census.subscriptionCount
            }
            if let elapsed, let previous {
                // What each node counted since the last sample: a node seen for the first time gives its baseline (its
                // counts are since its own start); one that started again under the same id counts nothing negative.
                var delta = ProjectCounters()
                for (node, counters) in nodes {
                    guard let before = previous.nodes[node] else { continue }
                    let now = counters[project] ?? ProjectCounters(), old = before[project] ?? ProjectCounters()
                    delta.sightings += max(0, now.sightings - old.sightings)
                    delta.found += max(0, now.found - old.found)
                    delta.lost += max(0, now.lost - old.lost)
                    delta.invalidTokens += max(0, now.invalidTokens - old.invalidTokens)
                    delta.rateLimited += max(0, now.rateLimited - old.rateLimited)
                    guard !now.snrHistogram.isEmpty else { continue }
                    if delta.snrHistogram.isEmpty { delta.snrHistogram = [Int](repeating: 0, count: now.snrHistogram.count) }
                    for bin in now.snrHistogram.indices where bin < delta.snrHistogram.count {
                        delta.snrHistogram[bin] += max(0, now.snrHistogram[bin] - (bin < old.snrHistogram.count ? old.snrHistogram[bin] : 0))
                    }
                }
                point.sightingsPerSecond = Double(delta.sightings) / elapsed
                point.foundPerSecond = Double(delta.found) / elapsed
                point.lostPerSecond = Double(delta.lost) / elapsed
                point.invalidTokensPerSecond = Double(delta.invalidTokens) / elapsed
                point.rateLimitedPerSecond = Double(delta.rateLimited) / elapsed
                point.medianSNR = ProjectCounters.medianSNR(delta.snrHistogram)
            }
            points[project] = point
        }
        previous = (time, nodes)
        latestCensus = statistics.census
        for (project, point) in points {
            histories[project, default: []].append(point)
            if histories[project]!.count > historyLength { histories[project]!.removeFirst(histories[project]!.count - historyLength) }
        }
        // Projects gone quiet keep their history (zeros are appended while they hold nothing); the oldest go first.
        for (project, history) in histories where points[project] == nil {
            histories[project] = Array((history + [LivePoint(time: time)]).suffix(historyLength))
        }
        if histories.count > Self.maxProjects {
            func lastActive(_ history: [LivePoint]) -> Double { history.last(where: { $0.sessions > 0 })?.time ?? 0 }
            let stale = histories.sorted { lastActive($0.value) < lastActive($1.value) }
            for (project, _) in stale.prefix(histories.count - Self.maxProjects) { histories[project] = nil }
        }
        for watcher in watchers.values {
            watcher.continuation.yield(points[watcher.project] ?? LivePoint(time: time))
        }
    }

    /// A project's view: its last point, its publications and subscriptions by namespace/type, and its history
    /// (oldest first).
    /// - Parameter project: the project's id.
    public func view(project: String) -> LiveView {
        let history = histories[project] ?? []
        let census = latestCensus[project] ?? AppCensus()
        return LiveView(project: project, interval: interval, current: history.last ?? LivePoint(time: clock()),
                        publicationsByType: census.publications, subscriptionsByType: census.subscriptions, history: history)
    }

    /// Each new point of `project` until ``stopWatching(_:)`` (or nil when ``maxWatchers`` watch already).
    /// - Parameter project: the project's id.
    public func watch(project: String) -> (id: UInt64, points: AsyncStream<LivePoint>)? {
        guard watchers.count < Self.maxWatchers else { return nil }
        nextWatcher += 1
        let id = nextWatcher
        let (stream, continuation) = AsyncStream.makeStream(of: LivePoint.self, bufferingPolicy: .bufferingNewest(8))
        watchers[id] = (project, continuation)
        return (id, stream)
    }

    /// Ends a watcher's stream and forgets it.
    /// - Parameter id: the id ``watch(project:)`` gave.
    public func stopWatching(_ id: UInt64) {
        watchers.removeValue(forKey: id)?.continuation.finish()
    }

    /// Views watching now.
    public var watcherCount: Int { watchers.count }
}
