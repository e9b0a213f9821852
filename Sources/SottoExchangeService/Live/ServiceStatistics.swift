import Foundation
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
    /// Per project id: sessions, publications and subscriptions held now (the matcher's, service-wide).
    public var census: [String: AppCensus]
    /// Per project id: this node's counters since it started (projects that did nothing are absent).
    public var counters: [String: ProjectCounters]
    /// The other nodes' counters as they last shared them (``ExchangeStore/sharedLiveCounters(since:)``), per node
    /// (a node's id is its process's, fresh at each start); empty for a service of one node.
    public var otherNodes: [String: [String: ProjectCounters]] = [:]

    /// - Parameters:
    ///   - census: per project, what it holds now.
    ///   - counters: per project, this node's counters.
    ///   - otherNodes: per node, the other nodes' counters.
    public init(census: [String: AppCensus] = [:], counters: [String: ProjectCounters] = [:], otherNodes: [String: [String: ProjectCounters]] = [:]) {
        self.census = census
        self.counters = counters
        self.otherNodes = otherNodes
    }
}

// MARK: Sharing between nodes

extension ProjectCounters {
    /// Most projects a node shares (its most active first); most bytes of a shared blob read back.
    static let maxSharedProjects = 10_000
    static let maxSharedBytes = 8 << 20

    /// A node's counters as it shares them through the database: JSON, the SNR histogram sparse (bin and count of
    /// its non-empty bins), at most ``maxSharedProjects`` projects.
    static func sharedBlob(_ counters: [String: ProjectCounters]) -> [UInt8] {
        let projects = counters.sorted { $0.value.sightings + $0.value.found + $0.value.lost > $1.value.sightings + $1.value.found + $1.value.lost }
            .prefix(maxSharedProjects)
        var shared: [String: Shared] = [:]
        for (project, c) in projects {
            shared[project] = Shared(s: c.sightings, f: c.found, l: c.lost, i: c.invalidTokens, r: c.rateLimited,
                                     h: c.snrHistogram.enumerated().filter { $0.element > 0 }.map { [$0.offset, $0.element] })
        }
        return Array((try? JSONEncoder().encode(shared)) ?? Data("{}".utf8))
    }

    /// Counters from ``sharedBlob(_:)``'s bytes, checked (counts not negative, bins within the histogram).
    /// - Throws: `StoreError.unavailable` naming what is wrong.
    static func counters(sharedBlob bytes: [UInt8]) throws(StoreError) -> [String: ProjectCounters] {
        guard bytes.count <= maxSharedBytes else { throw .unavailable("a node's shared live counters exceed \(maxSharedBytes) bytes") }
        let shared: [String: Shared]
        do { shared = try JSONDecoder().decode([String: Shared].self, from: Data(bytes)) } catch {
            throw .unavailable("a node's shared live counters cannot be read: \(error)")
        }
        var counters: [String: ProjectCounters] = [:]
        for (project, entry) in shared.prefix(maxSharedProjects) {
            guard [entry.s, entry.f, entry.l, entry.i, entry.r].allSatisfy({ $0 >= 0 }) else { throw .unavailable("negative shared live counters") }
            var c = ProjectCounters()
            (c.sightings, c.found, c.lost, c.invalidTokens, c.rateLimited) = (entry.s, entry.f, entry.l, entry.i, entry.r)
            if !entry.h.isEmpty {
                c.snrHistogram = [Int](repeating: 0, count: snrBins)
                for pair in entry.h {
                    guard pair.count == 2, (0..<snrBins).contains(pair[0]), pair[1] >= 0 else { throw .unavailable("a shared SNR bin out of range") }
                    c.snrHistogram[pair[0]] = pair[1]
                }
            }
            counters[project] = c
        }
        return counters
    }

    /// One project's counters as shared: sightings, found, lost, invalid tokens, rate-limited; [bin, count] pairs.
    private struct Shared: Codable {
        var s, f, l, i, r: Int
        var h: [[Int]]
    }
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
