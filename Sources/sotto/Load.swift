import ArgumentParser
import Foundation
import SottoExchangeLoad
import SottoExchangeWire
import Synchronization

/// `sotto load`: a load generator for a running `sotto serve`.
struct Load: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "load",
        abstract: "Load a matcher service with simulated devices and report sessions, sightings/s and found latency.",
        discussion: """
        Every device opens a session, publishes a message and subscribes; devices in clusters of --cluster hear \
        each other, and --sightings-per-second sightings per second of a random neighbour's token are reported for --duration \
        seconds. Latency is from the first report of a pair of neighbours to each one's found.
        """)

    @Option(help: "The service: HOST:PORT, unix:PATH, sotto://HOST:PORT or sottos://HOST:PORT (TLS); repeat for the nodes of one service (devices take them in turn).")
    var server: [String]
    @Option(help: "API key of a project whose key allows the rate (sotto admin key create --requests-per-second).") var apiKey: String
    @Option(help: "CA certificate (PEM) for TLS.") var ca: String?
    @Option(parsing: .unconditional, help: "Simulated devices (one session each).") var sessions: Int = 1_000
    @Option(parsing: .unconditional, help: "Devices in earshot of each other.") var cluster: Int = 5
    @Option(parsing: .unconditional, help: "Sightings per second over all devices (default 1000).") var sightingsPerSecond: Double?
    /// The old spelling of --sightings-per-second (--rate is a sample rate in Hz everywhere else).
    @Option(name: .customLong("rate"), parsing: .unconditional, help: ArgumentHelp(visibility: .hidden)) var deprecatedRate: Double?
    /// Sightings per second over all devices.
    var rate: Double { sightingsPerSecond ?? deprecatedRate ?? 1_000 }
    @Option(parsing: .unconditional, help: "Seconds of sightings.") var duration: Double = 20
    @Option(parsing: .unconditional, help: "HTTP/2 connections shared by the sessions, per server.") var connections: Int = 8
    @Option(help: "The noisy-neighbour probe: an API key (of another project) whose sessions report 64 random beacon IDs per frame during the load.")
    var noisyKey: String?
    @Option(parsing: .unconditional, help: "Frames per second the noisy key's 4 sessions send in all.") var noisyRate: Double = 1_000
    @Option(help: "Process ids of the service's nodes, to report their memory per session (after the opens and under load) and CPU time per sighting (from /proc).") var serverPid: [Int32] = []

    func validate() throws {
        try NumericOption("--sessions", 1...200_000).check(sessions)
        try NumericOption("--cluster", 2...1_000).check(cluster)
        if deprecatedRate != nil {
            if sightingsPerSecond != nil { throw ValidationError("--rate is the old spelling of --sightings-per-second: give one") }
            Deprecated.note("--rate", use: "--sightings-per-second", in: "load", because: "--rate is a sample rate in Hz everywhere else")
        }
        try NumericOption(sightingsPerSecond == nil && deprecatedRate != nil ? "--rate" : "--sightings-per-second", above: 0, upTo: 1_000_000, unit: "per s").check(rate)
        try NumericOption("--duration", above: 0, upTo: 3_600, unit: "s").check(duration)
        try NumericOption("--connections", 1...1_024).check(connections)
        try NumericOption("--noisy-rate", above: 0, upTo: 100_000, unit: "per s").check(noisyRate)
    }

    func run() async throws {
        var addresses: [MatcherAddress] = []
        for text in server {
            do { addresses.append(try MatcherAddress(parsing: text)) } catch { throw ValidationError("--server \(text): \(error)") }
        }
        guard !addresses.isEmpty else { throw ValidationError("--server: give at least one address") }
        let tls = ca != nil || server.contains { $0.hasPrefix("sottos://") }
        try await MatcherProbe.run(addresses, tls: tls, trustRoots: ca)
        var configuration = ServiceLoad.Configuration(addresses: addresses, apiKey: apiKey)
        configuration.trustRoots = ca
        configuration.tls = tls
        configuration.sessions = sessions
        configuration.clusterSize = cluster
        configuration.sightingsPerSecond = rate
        configuration.duration = duration
        configuration.connections = connections
        configuration.noisyKey = noisyKey
        configuration.noisyFramesPerSecond = noisyRate
        let pids = serverPid
        let before = Self.residentMemory(pids)
        let during = Mutex<Int?>(nil), loaded = Mutex<Int?>(nil)
        let cpu = Mutex<(start: Double?, end: Double?)>((nil, nil))
        let report = try await ServiceLoad.run(configuration, progress: { printError($0) },
                                               onOpen: {
                                                   during.withLock { $0 = Self.residentMemory(pids) }
                                                   cpu.withLock { $0.start = Self.cpuSeconds(pids) }
                                               },
                                               onSightingsDone: {
                                                   loaded.withLock { $0 = Self.residentMemory(pids) }
                                                   cpu.withLock { $0.end = Self.cpuSeconds(pids) }
                                               })
        let after = during.withLock { $0 }, underLoad = loaded.withLock { $0 }
        Output.line("\(report)")
        if let before, let after {
            // Each node of a shared service holds every session (the replicated matcher): the sum over nodes.
            Output.line(String(format: "service memory (%d process%@): %.1f MB before, %.1f MB with the sessions: %.1f kB per session",
                         pids.count, pids.count == 1 ? "" : "es", Double(before) / 1e6, Double(after) / 1e6,
                         Double(after - before) / 1e3 / Double(max(1, report.sessionsOpen))))
            if let underLoad {
                Output.line(String(format: "service memory at the end of the sightings: %.1f MB: %.1f kB per session under load",
                                   Double(underLoad) / 1e6, Double(underLoad - before) / 1e3 / Double(max(1, report.sessionsOpen))))
            }
        }
        if case let (start?, end?) = cpu.withLock({ $0 }), report.sightingsSent > 0, report.sightingSeconds > 0 {
            Output.line(String(format: "service CPU during the sightings: %.2f s in %.1f s (%.0f %% of a core): %.0f µs per sighting",
                               end - start, report.sightingSeconds, (end - start) / report.sightingSeconds * 100,
                               (end - start) / Double(report.sightingsSent) * 1e6))
        }
    }

    /// User plus system CPU time summed over processes (s), from /proc; nil without processes or when one is gone.
    static func cpuSeconds(_ pids: [Int32]) -> Double? {
        guard !pids.isEmpty else { return nil }
        var ticks = 0
        for pid in pids {
            // After the command name (in parentheses): utime and stime are the 12th and 13th fields.
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
                  let close = stat.lastIndex(of: ")") else { return nil }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
            ticks += user + system
        }
        return Double(ticks) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Resident memory summed over processes (bytes), from /proc; nil without processes or when one is gone.
    static func residentMemory(_ pids: [Int32]) -> Int? {
        guard !pids.isEmpty else { return nil }
        var total = 0
        for pid in pids {
            guard let memory = residentMemory(pid) else { return nil }
            total += memory
        }
        return total
    }

    /// Resident memory of a process (bytes), from /proc.
    static func residentMemory(_ pid: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
              let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) }) else { return nil }
        return kilobytes * 1024
    }
}
