import CoreMetrics
import Foundation
import Prometheus
import Synchronization

/// The transport's counters (connections, refusals, shedding, streams without Hello, frames over the limit,
/// the metrics listener's time-outs) and the per-project figures, in the service's Prometheus registry.
public struct TransportMetrics: Sendable {
    /// Connections held now.
    public let connections: CoreMetrics.Gauge
    /// Connections closed at once for a connection cap.
    public let connectionsRefused: CoreMetrics.Counter
    /// Idle connections closed to make room (a cap reached, or descriptors exhausted).
    public let connectionsShed: CoreMetrics.Counter
    /// Connections closed for not sending the HTTP/2 preface in time.
    public let prefaceTimeouts: CoreMetrics.Counter
    /// Times `accept` failed for want of descriptors.
    public let descriptorExhaustion: CoreMetrics.Counter
    /// Streams that have not said Hello yet.
    public let streamsWithoutHello: CoreMetrics.Gauge
    /// Streams refused because too many had not said Hello, and streams ended for not saying it in time.
    public let helloRefused: CoreMetrics.Counter
    public let helloTimeouts: CoreMetrics.Counter
    /// Streams ended for a message over the frame limit.
    public let framesTooLarge: CoreMetrics.Counter
    /// Metrics-listener connections closed for an incomplete request, or refused for its connection cap.
    public let httpTimeouts: CoreMetrics.Counter
    public let httpRefused: CoreMetrics.Counter
    /// Time from a sighting frame's arrival to the first Found written after it on the same stream (s).
    public let foundLatency: CoreMetrics.Timer
    /// Web transport: WebSocket connections held, and sessions refused for their key's origins.
    public let webConnections: CoreMetrics.Gauge
    public let originRefused: CoreMetrics.Counter
    /// Sessions opened over gRPC and over the web transport (label `transport`).
    private let grpcSessions: CoreMetrics.Counter
    private let webSessions: CoreMetrics.Counter
    private let factory: PrometheusMetricsFactory
    private let perProject = ProjectTable()

    /// Counters of one project, labelled `project="ID"`.
    public struct ProjectCounters: Sendable {
        /// Sessions opened, sightings reported, Found sent, requests refused.
        public let sessions: CoreMetrics.Counter
        public let sightings: CoreMetrics.Counter
        public let found: CoreMetrics.Counter
        public let rejected: CoreMetrics.Counter
    }

    /// - Parameter registry: the service's registry.
    public init(registry: PrometheusCollectorRegistry) {
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.defaultDurationHistogramBuckets = [0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]
            .map { Duration.nanoseconds(Int64($0 * 1e9)) }
        self.factory = factory
        connections = CoreMetrics.Gauge(label: "sotto_connections", dimensions: [], factory: factory)
        connectionsRefused = CoreMetrics.Counter(label: "sotto_connections_refused_total", dimensions: [], factory: factory)
        connectionsShed = CoreMetrics.Counter(label: "sotto_connections_shed_total", dimensions: [], factory: factory)
        prefaceTimeouts = CoreMetrics.Counter(label: "sotto_connections_preface_timeouts_total", dimensions: [], factory: factory)
        descriptorExhaustion = CoreMetrics.Counter(label: "sotto_descriptor_exhaustion_total", dimensions: [], factory: factory)
        streamsWithoutHello = CoreMetrics.Gauge(label: "sotto_streams_without_hello", dimensions: [], factory: factory)
        helloRefused = CoreMetrics.Counter(label: "sotto_streams_without_hello_refused_total", dimensions: [], factory: factory)
        helloTimeouts = CoreMetrics.Counter(label: "sotto_hello_timeouts_total", dimensions: [], factory: factory)
        framesTooLarge = CoreMetrics.Counter(label: "sotto_frames_too_large_total", dimensions: [], factory: factory)
        httpTimeouts = CoreMetrics.Counter(label: "sotto_http_timeouts_total", dimensions: [], factory: factory)
        httpRefused = CoreMetrics.Counter(label: "sotto_http_refused_total", dimensions: [], factory: factory)
        foundLatency = CoreMetrics.Timer(label: "sotto_found_latency_seconds", dimensions: [], factory: factory)
        webConnections = CoreMetrics.Gauge(label: "sotto_web_connections", dimensions: [], factory: factory)
        originRefused = CoreMetrics.Counter(label: "sotto_web_origin_refused_total", dimensions: [], factory: factory)
        grpcSessions = CoreMetrics.Counter(label: "sotto_transport_sessions_total", dimensions: [("transport", "grpc")], factory: factory)
        webSessions = CoreMetrics.Counter(label: "sotto_transport_sessions_total", dimensions: [("transport", "web")], factory: factory)
    }

    /// The counter of sessions opened over one transport.
    /// - Parameter transport: `grpc` or `web`.
    func sessions(_ transport: String) -> CoreMetrics.Counter { transport == "web" ? webSessions : grpcSessions }

    /// The counters of a project (made on first use).
    /// - Parameter id: the project's id.
    public func project(_ id: String) -> ProjectCounters {
        perProject.table.withLock { table in
            if let counters = table[id] { return counters }
            let labels = [("project", id)]
            let counters = ProjectCounters(
                sessions: CoreMetrics.Counter(label: "sotto_project_sessions_total", dimensions: labels, factory: factory),
                sightings: CoreMetrics.Counter(label: "sotto_project_sightings_total", dimensions: labels, factory: factory),
                found: CoreMetrics.Counter(label: "sotto_project_found_total", dimensions: labels, factory: factory),
                rejected: CoreMetrics.Counter(label: "sotto_project_rejected_total", dimensions: labels, factory: factory))
            table[id] = counters
            return counters
        }
    }

    /// The counters of the projects seen so far, by project id.
    private final class ProjectTable: Sendable {
        let table = Mutex<[String: ProjectCounters]>([:])
    }

    /// `# HELP` text of every metric the service exports, by name.
    static let help: [String: String] = [
        "sotto_sessions": "Sessions held (attached or in their grace period).",
        "sotto_sessions_resumed_total": "Sessions resumed on a new stream.",
        "sotto_reports_total": "Observe frames received.",
        "sotto_sightings_total": "Sightings in the Observe frames received.",
        "sotto_found_total": "Found events sent.",
        "sotto_lost_total": "Lost events sent.",
        "sotto_invalid_tokens_total": "Sightings of tokens that resolve to nothing.",
        "sotto_rate_limited_total": "Requests refused by a key's rate limit.",
        "sotto_rejected_total": "Requests refused for breaking a limit or the protocol, and failed authentications.",
        "sotto_authentication_failures_total": "Hellos with an unknown, revoked or malformed API key.",
        "sotto_cut_off_total": "Streams ended by the service (slow readers, silent clients).",
        "sotto_log_appends_total": "Shared log: appends (one PostgreSQL transaction each).",
        "sotto_log_commands_total": "Shared log: commands appended.",
        "sotto_log_entries_applied_total": "Shared log: entries applied.",
        "sotto_clock_skew_seconds": "Shared log: this node's wall clock minus the database's at its last append (s).",
        "sotto_connections": "gRPC connections held.",
        "sotto_connections_refused_total": "Connections closed at once for the global or per-address connection cap.",
        "sotto_connections_shed_total": "Idle connections closed to make room (a cap reached, or descriptors exhausted).",
        "sotto_connections_preface_timeouts_total": "Connections closed for not sending the HTTP/2 preface in time.",
        "sotto_descriptor_exhaustion_total": "Times accept failed for want of file descriptors.",
        "sotto_streams_without_hello": "Streams that have not said Hello yet.",
        "sotto_streams_without_hello_refused_total": "Streams refused because too many had not said Hello.",
        "sotto_hello_timeouts_total": "Streams ended for not saying Hello in time.",
        "sotto_frames_too_large_total": "Streams ended for a message over the frame limit.",
        "sotto_http_timeouts_total": "Metrics-listener connections closed for an incomplete request.",
        "sotto_http_refused_total": "Metrics-listener connections refused for its connection cap.",
        "sotto_found_latency_seconds": "Time from a sighting frame's arrival to the first Found written after it on the same stream (s).",
        "sotto_web_connections": "WebSocket connections of the web transport held.",
        "sotto_web_origin_refused_total": "Web sessions refused because their key is not bound to the page's origin.",
        "sotto_transport_sessions_total": "Sessions opened, per transport (grpc, web).",
        "sotto_project_sessions_total": "Sessions opened, per project.",
        "sotto_project_sightings_total": "Sightings reported, per project.",
        "sotto_project_found_total": "Found events sent, per project.",
        "sotto_project_rejected_total": "Requests refused, per project.",
    ]

    /// `exposition` with a `# HELP` line before each `# TYPE` line (the text from ``help``, or the metric's
    /// name for one not in it).
    static func addingHelp(to exposition: String) -> String {
        var out = ""
        out.reserveCapacity(exposition.utf8.count + 4_096)
        for line in exposition.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("# TYPE ") {
                let name = line.dropFirst("# TYPE ".count).split(separator: " ").first.map(String.init) ?? ""
                out += "# HELP \(name) \(help[name] ?? name.replacingOccurrences(of: "_", with: " "))\n"
            }
            out += line
            out += "\n"
        }
        if out.hasSuffix("\n\n") { out.removeLast() }
        return out
    }
}
