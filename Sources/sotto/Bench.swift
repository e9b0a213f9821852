import ArgumentParser
import Foundation
import SottoAudio
import SottoModem

/// `sotto bench`: decode every fixture and compare with the manifest, or sweep the simulator.
struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Benchmark the decoder: fixtures against their manifest, or robustness sweeps through the simulator.",
        discussion: """
            Without --sweep: decodes every fixture in DIR (default Fixtures), prints success, false tokens and \
            decode speed (seconds of audio per CPU second) per group, and exits non-zero when an expected token \
            is missed or an unexpected one decoded.
            With --sweep: snr (Eb/N0 and SNR for 90% and 99% per profile and token length), offset (clock / \
            Doppler offsets), reverb (synthetic rooms), rooms (measured impulse responses with real noise, from \
            --data), speech (speech interference), false (an hour of noise and speech: false tokens), latency \
            (how long after its last sample a frame is reported, fed in 1024-sample periods as from a device), \
            exchange (three devices in a simulated room through the modem and the matcher: found latency, \
            stop-to-lost, walk-away-to-lost, collisions; --trials runs).
            """)

    enum Sweep: String, ExpressibleByArgument, CaseIterable { case snr, offset, reverb, rooms, speech, `false`, latency, exchange }

    @Argument(help: "Fixture directory with a manifest.json.") var directory: String = "Fixtures"
    @Option(help: "Run a robustness sweep instead: \(Sweep.allCases.map(\.rawValue).joined(separator: ", ")).") var sweep: Sweep?
    @Option(help: "Profiles for sweeps (comma-separated, or all).") var profiles: String = "default"
    @Option(help: "Token lengths for sweeps (bytes, comma-separated).") var lengths: String = "8"
    @Option(help: "Trials per point in sweeps.") var trials: Int = 200
    @Option(help: "Directory of measured impulse responses and noise (rir_*.wav, noise_*.wav) for --sweep rooms.") var data: String = "../shared/data"
    @Option(help: "Speech recording for --sweep speech / false (e.g. made with espeak-ng).") var speech: String?
    @Option(help: "Audio to scan for --sweep false (s).") var seconds: Double = 3600
    @Option(help: "Random seed for sweeps.") var seed: UInt64 = 1
    @Option(help: "Source directivity factor Q in --sweep reverb rooms (1 = omnidirectional).") var directivity: Double = 4

    func validate() throws {
        try NumericOption("--trials", 1...100_000).check(trials)
        try NumericOption("--seconds", above: 0, upTo: 7 * 86_400, unit: "s").check(seconds)
        try NumericOption.directivity.check(directivity)
    }

    func run() throws {
        if let sweep {
            let selected: [Profile]
            if profiles == "all" { selected = Profile.all } else {
                selected = try profiles.split(separator: ",").map { name in
                    guard let p = Profile.named(String(name)) else { throw ValidationError("unknown profile '\(name)'") }
                    return p
                }
            }
            let sizes = try lengths.split(separator: ",").map { s -> Int in
                guard let n = Int(s), FrameFormat.payloadBytes.contains(n) else { throw ValidationError("token lengths must be 1 to 16") }
                return n
            }
            var runner = SweepRunner(trials: trials, seed: seed, dataDirectory: data, speechPath: speech, directivity: directivity)
            try runner.run(sweep, profiles: selected, lengths: sizes, seconds: seconds)
            return
        }
        let ok = try FixtureBench.run(directory: directory)
        if !ok { throw ExitCode(1) }
    }
}

/// Decodes the fixtures of a manifest and prints the per-group table.
enum FixtureBench {
    struct GroupResult {
        var files = 0, expected = 0, found = 0, falseTokens = 0
        var audioSeconds = 0.0, cpuSeconds = 0.0
    }

    static func run(directory: String) throws -> Bool {
        let manifest = try FixtureManifest.load(directory: directory)
        var groups: [String: GroupResult] = [:]
        var order: [String] = []
        var problems: [String] = []
        for fixture in manifest.fixtures {
            let path = (directory as NSString).appendingPathComponent(fixture.file)
            var decoded: [FixtureManifest.Expected] = []
            let start = threadCPUTime()
            let summary: FileDecoder.Summary
            do {
                summary = try FileDecoder.decode(path: path, profiles: Profile.all, channel: .channel(0)) { frame in
                    decoded.append(.init(token: frame.token.hex, profile: frame.profile))
                }
            } catch {
                problems.append("\(fixture.file): \(error)")
                continue
            }
            let cpu = threadCPUTime() - start
            if groups[fixture.group] == nil { order.append(fixture.group) }
            var result = groups[fixture.group, default: GroupResult()]
            result.files += 1
            result.expected += fixture.expected.count
            var remaining = decoded
            for want in fixture.expected {
                if let index = remaining.firstIndex(of: want) { remaining.remove(at: index); result.found += 1 }
                else { problems.append("\(fixture.file): missed \(want.token) (\(want.profile))") }
            }
            for extra in remaining { problems.append("\(fixture.file): unexpected \(extra.token) (\(extra.profile))") }
            result.falseTokens += remaining.count
            result.audioSeconds += summary.seconds
            result.cpuSeconds += cpu
            groups[fixture.group] = result
        }
        print("| group | files | expected | found | success | false tokens | audio (s) | speed (x real time) |")
        print("|---|---|---|---|---|---|---|---|")
        var total = GroupResult()
        for name in order {
            let g = groups[name]!
            total.files += g.files; total.expected += g.expected; total.found += g.found
            total.falseTokens += g.falseTokens; total.audioSeconds += g.audioSeconds; total.cpuSeconds += g.cpuSeconds
            print(row(name, g))
        }
        print(row("all", total))
        for problem in problems { printError(problem) }
        return problems.isEmpty
    }

    static func row(_ name: String, _ g: GroupResult) -> String {
        let success = g.expected == 0 ? "-" : "\(fixed(100 * Double(g.found) / Double(g.expected), 1))%"
        let speed = g.cpuSeconds > 0 ? fixed(g.audioSeconds / g.cpuSeconds, 0) : "-"
        return "| \(name) | \(g.files) | \(g.expected) | \(g.found) | \(success) | \(g.falseTokens) | \(fixed(g.audioSeconds, 1)) | \(speed) |"
    }
}
