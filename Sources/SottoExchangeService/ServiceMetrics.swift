import CoreMetrics
import Metrics
import Prometheus

/// The service's counters, through swift-metrics. Each service gets its own Prometheus registry, so several
/// services in one process (tests) do not mix their figures and no global bootstrap is needed.
public struct ServiceMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    /// Sessions held (attached or in their grace period).
    public let sessions: CoreMetrics.Gauge
    public let sessionsResumed: CoreMetrics.Counter
    /// Observe frames, and the sightings in them.
    public let reports: CoreMetrics.Counter
    public let sightings: CoreMetrics.Counter
    public let found: CoreMetrics.Counter
    public let lost: CoreMetrics.Counter
    /// Sightings of tokens that resolve to nothing.
    public let invalidTokens: CoreMetrics.Counter
    /// Requests refused by a key's rate limit.
    public let rateLimited: CoreMetrics.Counter
    /// Requests refused for breaking a limit or the protocol, and failed authentications.
    public let rejected: CoreMetrics.Counter
    public let authenticationFailures: CoreMetrics.Counter
    /// Streams ended by the service (slow readers, silent clients).
    public let cutOff: CoreMetrics.Counter
    /// Shared log: appends (one PostgreSQL transaction each), the commands they carried, entries applied.
    public let logAppends: CoreMetrics.Counter
    public let logCommands: CoreMetrics.Counter
    public let logEntriesApplied: CoreMetrics.Counter
    /// Shared log: this node's wall clock minus the database's when it last appended (s).
    public let clockSkew: CoreMetrics.Gauge
    /// Connections, streams without Hello, frames over the limit, per-project counters, found latency.
    public let transport: TransportMetrics

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        let factory = PrometheusMetricsFactory(registry: registry)
        sessions = CoreMetrics.Gauge(label: "sotto_sessions", dimensions: [], factory: factory)
        sessionsResumed = CoreMetrics.Counter(label: "sotto_sessions_resumed_total", dimensions: [], factory: factory)
        reports = CoreMetrics.Counter(label: "sotto_reports_total", dimensions: [], factory: factory)
        sightings = CoreMetrics.Counter(label: "sotto_sightings_total", dimensions: [], factory: factory)
        found = CoreMetrics.Counter(label: "sotto_found_total", dimensions: [], factory: factory)
        lost = CoreMetrics.Counter(label: "sotto_lost_total", dimensions: [], factory: factory)
        invalidTokens = CoreMetrics.Counter(label: "sotto_invalid_tokens_total", dimensions: [], factory: factory)
        rateLimited = CoreMetrics.Counter(label: "sotto_rate_limited_total", dimensions: [], factory: factory)
        rejected = CoreMetrics.Counter(label: "sotto_rejected_total", dimensions: [], factory: factory)
        authenticationFailures = CoreMetrics.Counter(label: "sotto_authentication_failures_total", dimensions: [], factory: factory)
        cutOff = CoreMetrics.Counter(label: "sotto_cut_off_total", dimensions: [], factory: factory)
        logAppends = CoreMetrics.Counter(label: "sotto_log_appends_total", dimensions: [], factory: factory)
        logCommands = CoreMetrics.Counter(label: "sotto_log_commands_total", dimensions: [], factory: factory)
        logEntriesApplied = CoreMetrics.Counter(label: "sotto_log_entries_applied_total", dimensions: [], factory: factory)
        clockSkew = CoreMetrics.Gauge(label: "sotto_clock_skew_seconds", dimensions: [], factory: factory)
        transport = TransportMetrics(registry: registry)
    }

    /// The Prometheus text exposition of every counter, each with its `# HELP` line.
    public func exposition() -> String {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return TransportMetrics.addingHelp(to: String(decoding: buffer, as: UTF8.self))
    }
}
