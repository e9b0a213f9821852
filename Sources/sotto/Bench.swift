import ArgumentParser
import Foundation
import SottoModem
import SottoTools
import SottoLab

/// `sotto bench`: decode every fixture and compare with the manifest, or sweep the simulator.
struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract: "Benchmark the decoder: fixtures against their manifest, or robustness sweeps through the simulator.",
        subcommands: [BenchFixtures.self, BenchSweep.self],
        defaultSubcommand: BenchFixtures.self)
}

/// `sotto bench fixtures [DIR]`.
struct BenchFixtures: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fixtures",
        abstract: "Decode every fixture of a manifest and compare with its expected tokens (the default of bench).",
        discussion: """
            Prints success, false tokens and decode speed (seconds of audio per CPU second) per group; exits with \
            \(ExitStatus.checkFailed.rawValue) when an expected token is missed or an unexpected one decoded.

            Your own recordings need no manifest.json: --expect HEX[,HEX...] expects those tokens in every audio \
            file under the directory (subdirectories too, each its own group), or --expect-csv FILE gives each \
            file its tokens (rows file,token; a file on several rows holds several tokens). Either way a token \
            matches in any profile, and a token heard several times in a file (sent with --repeat) counts once.
            """)

    @Argument(help: "Fixture directory with a manifest.json, or of your own recordings with --expect or --expect-csv.") var directory: String = "Fixtures"
    @Option(help: "Tokens (hex, comma-separated) that every audio file under the directory holds, instead of a manifest.json.")
    var expect: String?
    @Option(help: "A CSV of file,token rows (paths relative to the directory) instead of a manifest.json.")
    var expectCsv: String?
    @OptionGroup var format: FormatOption
    @OptionGroup var progress: ProgressOptions

    func validate() throws {
        try format.refuseHex("bench")
        if expect != nil && expectCsv != nil { throw ValidationError("give either --expect or --expect-csv") }
        _ = try expectedTokens()
    }

    /// The tokens of --expect, normalized; nil without it.
    func expectedTokens() throws -> [String]? {
        guard let expect else { return nil }
        let tokens = try expect.split(separator: ",", omittingEmptySubsequences: false).map { item -> String in
            guard let token = FixtureManifest.normalizedToken(item.trimmingCharacters(in: .whitespaces)) else {
                throw ValidationError("--expect: tokens are 1-16 bytes of hex (optional 0x), comma-separated; got '\(item)'")
            }
            return token
        }
        return tokens
    }

    /// The manifest of --expect or --expect-csv; nil for the directory's manifest.json.
    func givenManifest() throws -> FixtureManifest? {
        do {
            if let tokens = try expectedTokens() { return try FixtureManifest.recordings(in: directory, expecting: tokens) }
            guard let expectCsv else { return nil }
            guard let data = FileManager.default.contents(atPath: expectCsv) else { throw ToolError("cannot read \(expectCsv)") }
            return try FixtureManifest.recordings(csv: String(decoding: data, as: UTF8.self), directory: directory, name: expectCsv)
        } catch let error as ToolError { throw CommandError(error.description) }
    }

    func run() throws {
        progress.apply()
        let result: FixtureBench.Result
        do {
            result = try FixtureBench.run(directory: directory, manifest: givenManifest()) { index, count, file in
                ProgressLine.shared.update("fixture \(index + 1) of \(count): \(file)")
            }
        } catch let error as ToolError { throw CommandError(error.description) }
        ProgressLine.shared.clear()
        if format.format == .json {
            for group in result.groups + [result.total] { Output.record(group) }
            for problem in result.problems { Output.record(problem) }
        } else {
            Output.line("| group | files | expected | found | success | false tokens | audio (s) | speed (x real time) |")
            Output.line("|---|---|---|---|---|---|---|---|")
            for group in result.groups + [result.total] { Output.line(Self.row(group)) }
            for problem in result.problems {
                printError("\(problem.file): \(problem.problem) \(problem.token.map { "\($0)\(problem.profile.map { " (\($0))" } ?? "")" } ?? problem.reason ?? "")")
            }
        }
        if !result.passed { throw ExitCode(ExitStatus.checkFailed.rawValue) }
    }

    static func row(_ g: FixtureGroupRecord) -> String {
        let success = g.successRate.map { "\(fixed(100 * $0, 1))%" } ?? "-"
        let speed = g.cpuSeconds > 0 ? fixed(g.audioSeconds / g.cpuSeconds, 0) : "-"
        return "| \(g.group) | \(g.files) | \(g.expected) | \(g.found) | \(success) | \(g.falseTokens) | \(fixed(g.audioSeconds, 1)) | \(speed) |"
    }
}

extension SweepKind: ExpressibleByArgument {}

/// `sotto bench sweep KIND`.
struct BenchSweep: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sweep",
        abstract: "Run a robustness sweep through the channel simulator and print its table.",
        discussion: """
            snr: Eb/N0 and SNR for 90% and 99% per profile and token length. offset: clock / Doppler offsets. \
            reverb: synthetic rooms. rooms: measured impulse responses with real noise, from --data. longroom: synthetic long rooms (seconds of tail, weak direct sound, late reflections). hall: a reverberant \
            hall (20 x 12 x 6 m, RT60 0.9 s, 5 m). rolloff: weak speakers and microphones (0-30 dB lost at 19 kHz) in \
            a living room. speech: speech \
            interference. false: an hour of noise and speech (false tokens). latency: how long after its last \
            sample a frame is reported, fed in 1024-sample periods as from a device. exchange: three devices in a \
            simulated room through the modem and the matcher (found latency, stop-to-lost, walk-away-to-lost, \
            collisions; --trials runs). crowd: N devices in a simulated room, each broadcasting its token on the \
            sender rules (--rules) and decoding everyone (ordered pairs heard and found within the 10 s lost timeout, \
            time to first hearing; --devices counts, --trials rooms). links: crowd's rooms (the same with the same \
            --seed), every ordered pair's link alone on the air: token, alias and robust token frames decoded, pairs \
            never decoded (--devices counts, --trials rooms). earshot: in-band SNR and estimated distance \
            against the true distance, in synthetic rooms and behind the measured responses of --data (8-byte frames). skew: \
            rotating beacons' IDs resolved by the matcher with clocks 0 to 120 s apart (--trials IDs per point). overlap: \
            two frames of one profile overlapping by 0-100 % at 0-20 dB apart in a synthetic room, the weaker one's share \
            decoded without and with interference cancellation (--trials pairs per point).

            Conventions: the burst's RMS is fixed over its active part; SNR is that power over the white-noise \
            power in the whole 0...fs/2 band; Eb/N0 = SNR + 10 log10(T_active x (fs / 2) / payload bits), charging \
            preamble, header, CRC and code to the payload.
            """)

    @Argument(help: "The sweep: \(SweepKind.allCases.map(\.rawValue).joined(separator: ", ")).") var kind: SweepKind
    @Option(name: [.customLong("profile"), .customLong("profiles")],
            help: "Profiles (comma-separated, or all; --profiles: the old spelling).") var profiles: String = "default"
    @Option(help: "Token lengths (bytes, comma-separated; 0: the alias frame).") var lengths: String = "8"
    @Option(parsing: .unconditional, help: "Trials per point (runs, for exchange).") var trials: Int = 200
    @Option(help: "Directory of measured impulse responses and noise (rir_*.wav, noise_*.wav), for rooms and false.") var data: String = "../shared/data"
    @Option(help: "Speech recording, for speech and false (e.g. made with espeak-ng).") var speech: String?
    @Option(parsing: .unconditional, help: "Audio to scan, for false (s).") var seconds: Double = 3600
    @Option(parsing: .unconditional, help: "Random seed.") var seed: UInt64 = 1
    @Option(parsing: .unconditional, help: "Source directivity factor Q in the synthetic rooms of reverb (1 = omnidirectional).") var directivity: Double = 4
    @Option(help: "Devices in the room, for crowd and links (comma-separated counts, 1 to 100).") var devices: String = "2,5,10,20"
    @Option(help: "Sender rules, for crowd (comma-separated: \(CrowdSweep.ruleNames.joined(separator: ", "))).") var rules: String = "fixed,crowd"
    @Option(parsing: .unconditional, help: "Guard after the frame in a coordinated slot, for crowd (s).") var slotGuard: Double = 0.08
    @Option(help: "Members taking turns from which a room gets room aliases, for crowd's coordinated rules.") var aliasRoomSize: Int = 4
    @Option(help: "Write every crowd (or links) room's whole result to this file (JSON Lines), for analysis.") var trace: String?
    @Option(help: "Devices with a weak speaker, for crowd: a roll-off loss at 19 kHz drawn within --weak-loss.") var weakDevices: Int = 0
    @Option(help: "The weak speakers' loss at 19 kHz, for crowd (dB: LOW,HIGH).") var weakLoss: String = "20,25"
    @Flag(help: "For crowd: the matcher's link adaptation switches each device's token profile (default or robust).") var linkAdaptation = false
    @Option(parsing: .unconditional, help: "For crowd: a pair counts as heard within this long after both started (s; the run's length).") var window: Double = 10
    @Flag(help: "For crowd and false: decoders cancel each frame they decode and look under it for frames it hid (overlap measures both ways).") var cancelInterference = false
    @Option(name: .customLong("listen"), help: "For the sweeps of one frame per trial: the profiles the decoder listens for (comma-separated, or all, as sotto decode does; default: the profile under test).")
    var listening: String?
    @OptionGroup var format: FormatOption
    @OptionGroup var progress: ProgressOptions

    func validate() throws {
        try format.refuseHex("bench")
        _ = try listeningProfiles()
        try NumericOption("--slot-guard", 0...2, unit: "s").check(slotGuard)
        try NumericOption("--alias-room-size", 2...1000).check(Double(aliasRoomSize))
        try NumericOption("--trials", 1...100_000).check(trials)
        try NumericOption("--weak-devices", 0...100).check(Double(weakDevices))
        try NumericOption("--window", 1...600, unit: "s").check(window)
        _ = try weakLossRange()
        try NumericOption("--seconds", above: 0, upTo: 7 * 86_400, unit: "s").check(seconds)
        try NumericOption.directivity.check(directivity)
        _ = try selectedProfiles()
        _ = try sizes()
        if try kind == .links && deviceCounts().contains(where: { $0 < 2 }) {
            throw ValidationError("--devices: a link survey needs rooms of two devices at least")
        }
        for name in rules.split(separator: ",") where CrowdSweep.rules(named: String(name)) == nil {
            throw ValidationError("--rules: unknown sender rules '\(name)': \(CrowdSweep.ruleNames.joined(separator: ", "))")
        }
        if (kind == .speech || kind == .false) && speech == nil {
            throw ValidationError("the \(kind.rawValue) sweep needs a speech recording: --speech FILE (scripts/make-fixtures makes one with espeak-ng)")
        }
    }

    /// --weak-loss as (low, high) dB.
    func weakLossRange() throws -> [Double] {
        let values = weakLoss.split(separator: ",").map { Double($0.trimmingCharacters(in: .whitespaces)) }
        guard values.count == 2, let low = values[0], let high = values[1], low.isFinite, high.isFinite, 0 <= low, low <= high, high <= 80 else {
            throw ValidationError("--weak-loss is LOW,HIGH in dB (0 <= LOW <= HIGH <= 80), e.g. 20,25")
        }
        return [low, high]
    }

    /// The rows the sweep prints, for the progress line (nil where they depend on data found at run time).
    func expectedRows() throws -> Int? {
        let grid = try selectedProfiles().count * sizes().count
        switch kind {
        case .snr, .offset, .reverb, .rooms, .speech, .latency, .hall, .rolloff: return grid
        case .crowd: return try grid * rules.split(separator: ",").count * deviceCounts().count
        case .links: return try grid * deviceCounts().count
        case .overlap: return grid * SweepRunner.overlapLevels.count
        case .false, .exchange, .earshot, .skew, .longroom: return nil
        }
    }

    func selectedProfiles() throws -> [Profile] {
        try Self.parseProfiles(profiles, option: "--profile")
    }

    /// --listen's profiles, or nil when not given.
    func listeningProfiles() throws -> [Profile]? {
        guard let listening else { return nil }
        guard [.snr, .offset, .reverb, .rooms, .hall, .rolloff, .speech].contains(kind) else {
            throw ValidationError("--listen is for the sweeps of one frame per trial (snr, offset, reverb, rooms, hall, rolloff, speech), not \(kind.rawValue)")
        }
        return try Self.parseProfiles(listening, option: "--listen")
    }

    static func parseProfiles(_ text: String, option: String) throws -> [Profile] {
        if text == "all" { return Profile.all }
        let names = text.split(separator: ",", omittingEmptySubsequences: false)
        return try names.map { name in
            guard let p = Profile.named(String(name)) else {
                throw ValidationError("unknown profile '\(name)' in \(option): \(Profile.all.map(\.name).joined(separator: ", ")) or all")
            }
            return p
        }
    }

    func sizes() throws -> [Int] {
        // Every item is checked, empty ones too: '' or '8,,12' is a mistake, not an empty table.
        try lengths.split(separator: ",", omittingEmptySubsequences: false).map { s -> Int in
            // 0: the alias frame, in the sweeps of one frame per trial.
            if s == "0", [.snr, .offset, .reverb, .rooms, .hall, .rolloff, .speech].contains(kind) { return 0 }
            guard let n = Int(s), FrameFormat.payloadBytes.contains(n) else { throw ValidationError("--lengths: token lengths must be 1 to 16 (0: the alias frame, for snr, offset, reverb, rooms, hall, rolloff and speech), got '\(s)'") }
            return n
        }
    }

    func deviceCounts() throws -> [Int] {
        let counts = try devices.split(separator: ",").map { s -> Int in
            guard let n = Int(s), (1...100).contains(n) else { throw ValidationError("--devices: device counts must be 1 to 100, got '\(s)'") }
            return n
        }
        guard !counts.isEmpty else { throw ValidationError("--devices: give at least one device count") }
        return counts
    }

    func run() throws {
        progress.apply()
        let sweepName = kind.rawValue
        let printing = SweepPrinting(TablePrinter(json: format.format == .json) { caption, columns, cells in
            SweepRowRecord(sweep: sweepName, caption: caption, columns: columns, cells: cells)
        })
        // Progress on a terminal: the point under way, the row of how many, and from the rows done an estimate
        // of the time left (rows of one sweep take about as long as each other).
        let progress = Box(SweepProgress(totalRows: try expectedRows(), started: Date()))
        var output = SweepOutput(table: { printing.table($0, $1) },
                                 row: { progress.value.rowsDone += 1; printing.row($0) },
                                 status: { ProgressLine.shared.update("\(sweepName): \($0)\(progress.value.suffix(now: Date()))") })
        output.partial = { printing.partial($0) }
        var runner = SweepRunner(trials: trials, seed: seed, dataDirectory: data, speechPath: speech, directivity: directivity, output: output)
        runner.crowdDevices = try deviceCounts()
        runner.crowdRules = rules.split(separator: ",").map(String.init)
        runner.crowdSlotGuard = slotGuard
        runner.crowdAliasRoomSize = aliasRoomSize
        runner.crowdTrace = trace
        runner.crowdWeakDevices = weakDevices
        runner.crowdWeakLoss = try weakLossRange()
        runner.crowdLinkAdaptation = linkAdaptation
        runner.crowdWindow = window
        runner.cancelsInterference = cancelInterference
        runner.listeningProfiles = try listeningProfiles()
        // Ctrl-C (or SIGTERM): the rows printed are what was measured, and the row under way is printed with the
        // cells measured so far ("-" for the rest); stopped as the exit-status table says (0), with the progress
        // line erased, instead of dying with 130 mid-line. The sweep's thread prints nothing more meanwhile.
        let started = Date()
        let interrupt = Interruption.onStop {
            printing.interrupt { partial in
                ProgressLine.shared.clear()
                let elapsed = fixed(Date().timeIntervalSince(started), 0)
                printError("interrupted after \(elapsed) s: the rows printed are what was measured; "
                           + (partial ? "the last one, partial, has \"-\" for the points not measured" : "the row under way was not finished"))
            }
            Foundation.exit(ExitStatus.success.rawValue)
        }
        defer { interrupt.cancel() }
        do { try runner.run(kind, profiles: selectedProfiles(), lengths: sizes(), seconds: seconds) }
        catch let error as ToolError { throw CommandError(error.description) }
        ProgressLine.shared.clear()
    }
}

/// The rows of a sweep done and expected, for its progress line.
struct SweepProgress {
    /// Rows the sweep prints, when known from its arguments.
    let totalRows: Int?
    let started: Date
    var rowsDone = 0

    /// " (row 3 of 8, 1 min 20 s, about 2 min 40 s left)"; the estimate once a row is done.
    func suffix(now: Date) -> String {
        let elapsed = now.timeIntervalSince(started)
        var parts: [String] = []
        if let totalRows { parts.append("row \(min(rowsDone + 1, totalRows)) of \(totalRows)") }
        parts.append(Self.duration(elapsed))
        if let totalRows, rowsDone > 0, rowsDone < totalRows {
            parts.append("about \(Self.duration(elapsed / Double(rowsDone) * Double(totalRows - rowsDone))) left")
        }
        return " (" + parts.joined(separator: ", ") + ")"
    }

    static func duration(_ seconds: Double) -> String {
        let whole = Int(seconds.rounded())
        if whole < 60 { return "\(whole) s" }
        if whole < 3_600 { return "\(whole / 60) min \(whole % 60) s" }
        return "\(whole / 3_600) h \(whole % 3_600 / 60) min"
    }
}

/// The sweep's table and its row under way, printed by the sweep's thread and, on Ctrl-C, by the signal
/// thread: one lock, so that an interrupted sweep's last lines are whole and nothing follows them.
final class SweepPrinting: @unchecked Sendable {
    private let lock = NSLock()
    private var printer: TablePrinter
    private var columns: [String] = []
    private var underWay: [String]?
    private var stopped = false

    init(_ printer: TablePrinter) { self.printer = printer }

    func table(_ caption: String, _ columns: [String]) {
        lock.withLock {
            guard !stopped else { return }
            self.columns = columns
            underWay = nil
            printer.table(caption, columns)
        }
    }

    func row(_ cells: [String]) {
        lock.withLock {
            guard !stopped else { return }
            underWay = nil
            printer.row(cells)
        }
    }

    /// The row under way so far (fewer cells than columns).
    func partial(_ cells: [String]) {
        lock.withLock { if !stopped { underWay = cells } }
    }

    /// Prints the row under way, its missing cells as "-", and stops all printing; `report(partial)` runs under
    /// the lock after it (whether there was a partial row to print).
    func interrupt(_ report: (Bool) -> Void) {
        lock.lock()  // never unlocked: the process exits next, and the sweep's thread must print nothing more
        stopped = true
        let cells = underWay.map { $0 + Array(repeating: "-", count: max(0, columns.count - $0.count)) }
        if let cells { printer.row(cells, partial: true) }
        report(cells != nil)
    }
}

/// A mutable value shared by closures.
final class Box<Value> {
    var value: Value
    init(_ value: Value) { self.value = value }
}
