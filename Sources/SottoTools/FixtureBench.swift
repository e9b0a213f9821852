import Foundation
import SottoAudio
import SottoModem

/// Decodes every fixture of a manifest and compares what comes out with what it must yield.
public enum FixtureBench {
    /// What the benchmark found: a row per group in manifest order, the sum of them (group `all`), and
    /// every fixture that did not give its tokens.
    public struct Result: Sendable {
        public var groups: [FixtureGroupRecord]
        public var total: FixtureGroupRecord
        public var problems: [FixtureProblemRecord]
        /// True when every expected token was found and nothing else.
        public var passed: Bool { problems.isEmpty }
    }

    /// Decodes the fixtures of `directory`/manifest.json, or of `manifest` when given (channel 0 of each
    /// file, every profile); `onFile` is called before each file with its index and the count (for progress).
    /// An expected token of profile ``FixtureManifest/anyProfile`` matches that token in any profile, and its
    /// repetitions in the file are not counted as false tokens (a recording of a token sent several times).
    public static func run(directory: String, manifest given: FixtureManifest? = nil,
                           onFile: (_ index: Int, _ count: Int, _ file: String) -> Void = { _, _, _ in }) throws -> Result {
        let manifest = try given ?? FixtureManifest.load(directory: directory)
        struct Sums { var files = 0, expected = 0, found = 0, falseTokens = 0, audioSeconds = 0.0, cpuSeconds = 0.0 }
        var groups: [String: Sums] = [:]
        var order: [String] = []
        var problems: [FixtureProblemRecord] = []
        for (index, fixture) in manifest.fixtures.enumerated() {
            onFile(index, manifest.fixtures.count, fixture.file)
            let path = (directory as NSString).appendingPathComponent(fixture.file)
            var decoded: [FixtureManifest.Expected] = []
            let start = threadCPUTime()
            let summary: RecordingDecoder.Summary
            do {
                summary = try RecordingDecoder.decode(path: path, profiles: Profile.all, channel: .channel(0)) { frame in
                    decoded.append(.init(token: hexString(frame.token), profile: frame.profile))
                }
            } catch {
                problems.append(FixtureProblemRecord(file: fixture.file, problem: "unreadable", reason: "\(error)"))
                continue
            }
            let cpu = threadCPUTime() - start
            if groups[fixture.group] == nil { order.append(fixture.group) }
            var sums = groups[fixture.group, default: Sums()]
            sums.files += 1
            sums.expected += fixture.expected.count
            var remaining = decoded
            for want in fixture.expected {
                let anyProfile = want.profile == FixtureManifest.anyProfile
                if let index = remaining.firstIndex(where: { $0.token == want.token && (anyProfile || $0.profile == want.profile) }) {
                    remaining.remove(at: index)
                    sums.found += 1
                    // Its repetitions are the same token heard again, not false tokens.
                    if anyProfile { remaining.removeAll { $0.token == want.token } }
                } else {
                    problems.append(FixtureProblemRecord(file: fixture.file, problem: "missed", token: want.token,
                                                         profile: anyProfile ? nil : want.profile))
                }
            }
            for extra in remaining {
                problems.append(FixtureProblemRecord(file: fixture.file, problem: "unexpected", token: extra.token, profile: extra.profile))
            }
            sums.falseTokens += remaining.count
            sums.audioSeconds += summary.seconds
            sums.cpuSeconds += cpu
            groups[fixture.group] = sums
        }
        func record(_ name: String, _ g: Sums) -> FixtureGroupRecord {
            FixtureGroupRecord(group: name, files: g.files, expected: g.expected, found: g.found, falseTokens: g.falseTokens,
                               audioSeconds: g.audioSeconds, cpuSeconds: g.cpuSeconds)
        }
        var total = Sums()
        for g in groups.values {
            total.files += g.files; total.expected += g.expected; total.found += g.found
            total.falseTokens += g.falseTokens; total.audioSeconds += g.audioSeconds; total.cpuSeconds += g.cpuSeconds
        }
        return Result(groups: order.map { record($0, groups[$0]!) }, total: record("all", total), problems: problems)
    }
}
