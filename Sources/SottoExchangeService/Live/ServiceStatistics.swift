import SottoExchangeCore
import Synchronization

/// What one project did since the service started, counted by the service as it happens (not from its metrics).
public struct ProjectCounters: Sendable, Hashable {
    /// In-band SNR histogram bins: 1 dB wide, the first from ``snrFloor`` dB (lower values counted in it), the last
    /// at ``snrFloor`` + ``snrBins`` - 1 dB (higher values counted in it).
    public static let snrFloor = -20
    /// Number of SNR bins.
    public static let snrBins = 121

    /// Sightings reported by the project's sessions (each frame a session decoded).
    public var sightings = 0
    /// Found and lost notices delivered to the project's subscriptions.
    public var found = 0
    /// See ``found``.
    public var lost = 0
    /// Tokens the project's sessions heard that resolve to nothing.
    public var invalidTokens = 0
    /// Frames of the project's sessions refused over its keys' or its own rate.
    public var rateLimited = 0
    /// Sightings per 1 dB of in-band SNR (bins: ``snrFloor``); empty before the first sighting.
    public var snrHistogram: [Int] = []

    /// Nothing counted yet.
    public init() {}

    mutating func countSNR(_ snr: Double) {
        guard snr.isFinite else { return }
        if snrHistogram.isEmpty { snrHistogram = [Int](repeating: 0, count: Self.snrBins) }
        let bin = min(max(Int((snr - Double(Self.snrFloor)).rounded(.down)), 0), Self.snrBins - 1)
        snrHistogram[bin] += 1
    }

    /// The median in-band SNR (dB, the middle of its 1 dB bin) of the sightings counted in `histogram`, nil for none.
    /// - Parameter histogram: sightings per bin (``snrHistogram``, or the difference of two).
    public static func medianSNR(_ histogram: [Int]) -> Double? {
        let total = histogram.reduce(0, +)
        guard total > 0 else { return nil }
        var seen = 0
        for (bin, count) in histogram.enumerated() {
            seen += count
            if 2 * seen >= total { return Double(snrFloor + bin) + 0.5 }
        }
        return nil
    }
}

/// The service's state as its live views read it: per project, what it holds now (`AppCensus`, of the matcher) and what it
/// did so far (``ProjectCounters``).
public struct ServiceStatistics: Sendable {
    /// Per project id: sessions, publications and subscriptions held now.
    public var census: [String: AppCensus]
    /// Per project id: counters since the service started (projects that did nothing are absent).
    public var counters: [String: ProjectCounters]
}

/// The host's per-project counters: written on the streams' tasks and the host's actor, read by the live views.
final class LiveCounters: Sendable {
    /// At most this many projects are counted (beyond, further projects are not).
    static let maxProjects = 10_000
    private let projects = Mutex<[String: ProjectCounters]>([:])

    func count(_ project: String, _ body: (inout ProjectCounters) -> Void) {
        projects.withLock { projects in
            guard projects[project] != nil || projects.count < Self.maxProjects else { return }
            body(&projects[project, default: ProjectCounters()])
        }
    }

    var all: [String: ProjectCounters] { projects.withLock { $0 } }
}
