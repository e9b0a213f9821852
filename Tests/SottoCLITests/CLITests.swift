import Foundation
import SottoAudio
import SottoExchange
import SottoExchangeCore
import SottoTools
import SottoTestSupport
import Testing

/// Runs the built `sotto` executable (next to the test bundle) and captures its output.
struct Sotto {
    static let executable: URL = {
        grantConsentForTests()
        var directory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        // swift-testing may run from inside the .xctest bundle directory.
        while !FileManager.default.isExecutableFile(atPath: directory.appendingPathComponent("sotto").path),
              directory.path != "/" {
            directory.deleteLastPathComponent()
        }
        return directory.appendingPathComponent("sotto")
    }()

    /// Every `sotto` the tests run plays and listens with consent granted in a private configuration
    /// directory (XDG_CONFIG_HOME, set once for this process and inherited by each child): the user's own
    /// consent is never read or changed. The consent tests give each command an XDG_CONFIG_HOME of their own.
    private static func grantConsentForTests() {
        let directory = URL(fileURLWithPath: processScratchDirectory("sotto-tests-config"))
        try? FileManager.default.createDirectory(at: directory.appendingPathComponent("sotto"), withIntermediateDirectories: true)
        try? Data("granted\n".utf8).write(to: directory.appendingPathComponent("sotto/consent"))
        setenv("XDG_CONFIG_HOME", directory.path, 1)
    }

    struct Result {
        var status: Int32
        var stdout: String
        var stderr: String
        /// Standard output as bytes (audio written to `-`).
        var stdoutData = Data()
    }

    /// Runs `sotto` with `arguments`; with a `timeout` (s), a run still going then is terminated (SIGTERM),
    /// so that a hang fails its test instead of the whole run.
    /// With a `launcher`, runs it with `prefix` + `arguments` instead (e.g. `ip netns exec NS sotto ...`).
    /// With `input`, it is written to the command's standard input, which is then closed.
    static func run(_ arguments: [String], environment: [String: String] = [:], timeout: Double? = nil,
                    launcher: String? = nil, prefix: [String] = [], input: Data? = nil) throws -> Result {
        let process = Process()
        process.executableURL = launcher.map { URL(fileURLWithPath: $0) } ?? executable
        process.arguments = prefix + arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        let stdin = Pipe()
        if input != nil { process.standardInput = stdin }
        try process.run()
        if let input {
            // A command that exits before reading all of it must not kill the test run with SIGPIPE.
            signal(SIGPIPE, SIG_IGN)
            // From another thread: the command may fill its output pipe before it has read all of its input.
            Thread.detachNewThread {
                try? stdin.fileHandleForWriting.write(contentsOf: input)
                try? stdin.fileHandleForWriting.close()
            }
        }
        if let timeout {
            DispatchQueue.global().asyncAfter(deadline: .now() + timeout) { if process.isRunning { process.terminate() } }
        }
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        let errData = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Result(status: process.terminationStatus,
                      stdout: String(decoding: outData, as: UTF8.self),
                      stderr: String(decoding: errData, as: UTF8.self), stdoutData: outData)
    }
}

/// A fresh directory inside this test process's scratch directory (removed when the process exits).
func temporaryDirectory() throws -> URL {
    let url = URL(fileURLWithPath: processScratchDirectory("sotto-cli")).appendingPathComponent(UUID().uuidString)
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

@Suite(.serialized) struct CLITests {
    @Test func sendThenDecodeRoundTrips() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("t.wav").path
        let send = try Sotto.run(["send", "0x0123456789ABCDEF", "--out", wav])
        #expect(send.status == 0, "\(send.stderr)")
        let hex = try Sotto.run(["decode", "--format", "hex", wav])
        #expect(hex.status == 0)
        #expect(hex.stdout == "0123456789abcdef\n")
        let json = try Sotto.run(["decode", "--format", "json", wav])
        let object = try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any]
        #expect(object?["token"] as? String == "0123456789abcdef")
        #expect(object?["profile"] as? String == "default")
        #expect((object?["start"] as? Double).map { abs($0 - 0.1) < 0.002 } == true)
        for key in ["end", "snr", "level", "clockOffsetPPM", "correctedBits"] { #expect(object?[key] != nil, "missing \(key)") }
        #expect((object?["level"] as? Double).map { abs($0 + 6) < 0.5 } == true)
    }

    @Test func textTokensEveryProfileAndRate() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        for (profile, rate) in [("fast", "44100"), ("robust", "96000"), ("audible", "16000")] {
            let wav = dir.appendingPathComponent("\(profile).wav").path
            #expect(try Sotto.run(["send", "--text", "hi \(profile)", "--profile", profile, "--rate", rate, "--out", wav]).status == 0)
            let text = try Sotto.run(["decode", wav])
            #expect(text.stdout.contains("\"hi \(profile)\"") && text.stdout.contains("profile \(profile)"), "\(text.stdout)")
        }
    }

    /// `sotto tune` measures the decoder's transforms and writes FFTW wisdom; a decoder reads the file named by
    /// SOTTO_FFTW_WISDOM (its entries all come back in the wisdom of a process that read it) and decodes as
    /// before, and one that FFTW cannot parse is ignored. Rates no profile can use and unwritable outputs are
    /// errors.
    @Test func tuneWritesWisdomThatDecodersRead() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wisdom = dir.appendingPathComponent("wisdomf").path
        let tune = try Sotto.run(["tune", "--rate", "48000", "--output", wisdom], timeout: 120)
        #expect(tune.status == 0, "\(tune.stderr)")
        #expect(tune.stdout.contains("wisdom written to \(wisdom)"), "\(tune.stdout)")
        let text = try String(contentsOfFile: wisdom, encoding: .utf8)
        #expect(text.hasPrefix("(fftw-3") && text.contains("fftwf_wisdom"), "\(text.prefix(200))")
        let entries = Set(text.split(separator: "\n").map(String.init))

        let environment = ["SOTTO_FFTW_WISDOM": wisdom]
        let read = try Sotto.run(["tune", "--rate", "44100", "--output", "-"], environment: environment, timeout: 120)
        #expect(read.status == 0, "\(read.stderr)")
        #expect(entries.isSubset(of: Set(read.stdout.split(separator: "\n").map(String.init))))
        if !FileManager.default.fileExists(atPath: "/etc/fftw/wisdomf") {
            // Without the file, the 48 kHz transforms' entries are not all there: the test above can fail.
            let alone = try Sotto.run(["tune", "--rate", "44100", "--output", "-"], timeout: 120)
            #expect(!entries.isSubset(of: Set(alone.stdout.split(separator: "\n").map(String.init))))
        }

        let wav = dir.appendingPathComponent("t.wav").path
        #expect(try Sotto.run(["send", "0x0123456789abcdef", "--out", wav]).status == 0)
        let tuned = try Sotto.run(["decode", "--format", "hex", wav], environment: environment)
        #expect(tuned.status == 0 && tuned.stdout == "0123456789abcdef\n", "\(tuned.stdout) \(tuned.stderr)")
        let garbage = dir.appendingPathComponent("garbage").path
        try Data("(fftw-3.3.10 fftwf_wisdom #x1 (nonsense".utf8).write(to: URL(fileURLWithPath: garbage))
        let ignored = try Sotto.run(["decode", "--format", "hex", wav], environment: ["SOTTO_FFTW_WISDOM": garbage])
        #expect(ignored.status == 0 && ignored.stdout == "0123456789abcdef\n", "\(ignored.stdout) \(ignored.stderr)")

        let tooLow = try Sotto.run(["tune", "--rate", "8000", "--output", wisdom])
        #expect(tooLow.status == 2 && tooLow.stderr.contains("too low"), "\(tooLow.stderr)")
        let unwritable = try Sotto.run(["tune", "--output", "/proc/sotto-no-such-directory/wisdomf"])
        #expect(unwritable.status == 2 && unwritable.stderr.contains("cannot write the wisdom"), "\(unwritable.stderr)")
    }

    @Test func profilesTableListsEveryProfile() throws {
        let result = try Sotto.run(["profiles"])
        #expect(result.status == 0)
        for name in ["default", "fast", "robust", "audible"] { #expect(result.stdout.contains("| \(name) |")) }
    }

    @Test func badInputGetsAClearErrorAndNonZeroExit() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("x.wav").path
        let cases: [([String], String)] = [
            (["send", "0x" + String(repeating: "ab", count: 17), "--out", wav], "1 to 16 bytes"),
            (["send", "0xabc", "--out", wav], "hex"),
            (["send", "zz", "--out", wav], "hex"),
            (["send", "--text", "", "--out", wav], "1 to 16 bytes"),
            (["send", "0x01", "--rate", "22050", "--out", wav], "too low"),
            (["send", "0x01", "--volume", "6", "--out", wav], "dBFS"),
            (["send", "0x01", "--profile", "loud", "--out", wav], "profile"),
            (["decode", dir.appendingPathComponent("missing.wav").path], "missing.wav"),
        ]
        for (arguments, message) in cases {
            let result = try Sotto.run(arguments)
            #expect(result.status != 0, "\(arguments) should fail")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
    }

    @Test func corruptFilesAreReportedNotCrashedOn() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let good = dir.appendingPathComponent("good.wav").path
        #expect(try Sotto.run(["send", "0x0102030405060708", "--out", good]).status == 0)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: good))
        let files: [(String, Data)] = [
            ("empty.wav", Data()),
            ("text.wav", Data("this is not audio at all\n".utf8)),
            ("header-only.wav", bytes.prefix(44)),
            ("garbage.wav", Data((0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 7919) })),
        ]
        for (name, data) in files {
            let path = dir.appendingPathComponent(name).path
            try data.write(to: URL(fileURLWithPath: path))
            let result = try Sotto.run(["decode", path])
            #expect(result.status != 0, "\(name) should be rejected")
            #expect(result.stderr.contains(name), "\(name): \(result.stderr)")
        }
        // A truncated file decodes what it holds (nothing here: cut inside the frame) without crashing.
        let truncated = dir.appendingPathComponent("truncated.wav").path
        try bytes.prefix(bytes.count / 2).write(to: URL(fileURLWithPath: truncated))
        let result = try Sotto.run(["decode", "--format", "hex", truncated])
        #expect(result.stdout.isEmpty)
        // One bad file among good ones: the good one is still decoded, the exit status says something failed.
        let mixed = try Sotto.run(["decode", "--format", "hex", good, dir.appendingPathComponent("text.wav").path])
        #expect(mixed.status != 0)
        #expect(mixed.stdout == "0102030405060708\n")
    }

    @Test func simulateThenDecode() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let sent = dir.appendingPathComponent("sent.wav").path, heard = dir.appendingPathComponent("heard.wav").path
        #expect(try Sotto.run(["send", "0xfeedface", "--out", sent]).status == 0)
        let simulate = try Sotto.run(["simulate", sent, heard, "--rt60", "0.4", "--distance", "1", "--snr", "10", "--ppm", "300", "--rate", "44100", "--seed", "3"])
        #expect(simulate.status == 0, "\(simulate.stderr)")
        #expect(try Sotto.run(["decode", "--format", "hex", heard]).stdout == "feedface\n")
        #expect(try Sotto.run(["simulate", sent, heard, "--rt60", "-1"]).status != 0)
    }

    /// A measured response is normalised to its peak, so a reverberant one sums the burst above full scale:
    /// the 16-bit file must not clip it silently. Scaled to -1 dBFS with a note; an explicit --clip clips.
    @Test func simulateDoesNotClipARoomThatAddsUp() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let sent = dir.appendingPathComponent("sent.wav").path, heard = dir.appendingPathComponent("heard.wav").path
        let rir = dir.appendingPathComponent("rir.wav").path
        #expect(try Sotto.run(["send", "0x0123456789abcdef", "--out", sent]).status == 0)
        // Four equal arrivals 1 ms apart: the tones add up to about four times the -6 dBFS burst.
        var response = [Float](repeating: 0, count: 480)
        for k in 0..<4 { response[48 * k] = 0.9 }
        try AudioFile.write(response, sampleRate: 48_000, to: rir)
        let simulate = try Sotto.run(["simulate", sent, heard, "--rir", rir])
        #expect(simulate.status == 0, "\(simulate.stderr)")
        #expect(simulate.stderr.contains("scaled by -"), "\(simulate.stderr)")
        let (samples, _) = try AudioFile.read(path: heard)
        let peak = samples.map { abs($0) }.max() ?? 0
        #expect(peak > 0.85 && peak < 0.9, "peak \(peak)")
        #expect(try Sotto.run(["decode", "--format", "hex", heard]).stdout == "0123456789abcdef\n")
        // Asked to clip: clipped at that level, not scaled.
        #expect(try Sotto.run(["simulate", sent, heard, "--rir", rir, "--clip", "0.5"]).status == 0)
        let clipped = try AudioFile.read(path: heard).0.map { abs($0) }.max() ?? 0
        #expect(abs(clipped - 0.5) < 0.001, "peak \(clipped)")
    }

    @Test func benchComparesWithTheManifest() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        #expect(try Sotto.run(["send", "0x00112233", "--out", dir.appendingPathComponent("a.wav").path]).status == 0)
        func manifest(_ token: String) throws {
            let json = """
            {"version": 1, "generator": "test", "fixtures": [{"file": "a.wav", "group": "g", "description": "d",
             "expected": [{"token": "\(token)", "profile": "default"}]}]}
            """
            try Data(json.utf8).write(to: dir.appendingPathComponent("manifest.json"))
        }
        try manifest("00112233")
        let pass = try Sotto.run(["bench", dir.path])
        #expect(pass.status == 0, "\(pass.stderr)")
        #expect(pass.stdout.contains("| g | 1 | 1 | 1 | 100.0% | 0 |"))
        try manifest("99999999")
        let fail = try Sotto.run(["bench", dir.path])
        #expect(fail.status != 0)
        #expect(fail.stderr.contains("missed 99999999") && fail.stderr.contains("unexpected 00112233"))
    }
}

@Suite struct FixtureTests {
    /// Every committed fixture decodes to exactly its manifest's tokens (the `sotto bench` contract).
    @Test func committedFixturesPassTheBench() throws {
        let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fixtures")
        let result = try Sotto.run(["bench", fixtures.path])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("| all |") && result.stdout.contains("100.0% | 0 |"))
    }
}

@Suite struct ExchangeCLITests {
    @Test func publishToAFileThenSubscribeToTheRecording() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("pub.wav").path
        let publish = try Sotto.run(["publish", "--text", "hello", "--ttl", "12", "--interval", "2", "--jitter", "0.5", "--seed", "1", "--out", wav])
        #expect(publish.status == 0, "\(publish.stderr)")
        #expect(publish.stderr.contains("wrote 6 frames"))
        let subscribe = try Sotto.run(["subscribe", "--input", wav, "--lost-timeout", "3", "--format", "json"])
        #expect(subscribe.status == 0, "\(subscribe.stderr)")
        let events = subscribe.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        #expect(events.map { $0["event"] as? String } == ["found", "lost"])
        #expect(events.first?["text"] as? String == "hello" && events.first?["type"] as? String == "__audio_bytes")
        // Found with the first frame (within its airtime of the file's start), lost at the end of the recording.
        #expect(((events.first?["time"] as? Double) ?? 99) < 1.2)
        #expect(((events.last?["time"] as? Double) ?? 0) == 12)
        // The same recording gives the same timeline every time (sample clock, seeded jitter).
        #expect(try Sotto.run(["subscribe", "--input", wav, "--lost-timeout", "3", "--format", "json"]).stdout == subscribe.stdout)
    }

    @Test func lostAfterTheTimeoutWhenThePublisherFallsSilent() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let a = dir.appendingPathComponent("a.wav").path
        #expect(try Sotto.run(["publish", "--hex", "0102", "--ttl", "5", "--interval", "1", "--jitter", "0", "--out", a]).status == 0)
        // Five seconds of frames followed by ten of silence: lost 3 s after the last sighting.
        let silence = dir.appendingPathComponent("b.wav").path
        let (samples, _) = try AudioFile.read(path: a)
        try AudioFile.write(samples + [Float](repeating: 0, count: 480_000), sampleRate: 48_000, to: silence)
        // Signal events are left out: they follow the reported SNR, which changes here (the first frame, at
        // the file's start, has no audio before it to measure the noise against; the others have digital
        // silence and report the 120 dB ceiling).
        let out = try Sotto.run(["subscribe", "--input", silence, "--lost-timeout", "3"]).stdout.split(separator: "\n")
            .filter { !$0.contains("  signal  ") }
        #expect(out.count == 2 && out[0].contains("found") && out[1].contains("lost"))
        let lostAt = Double(out[1].split(separator: " ")[0]) ?? 0
        // Frames at 0, 1, 2, 3, 4 s (airtime 0.33 s): last sighting at 4.33 s, lost 3 s later.
        #expect(lostAt > 7.2 && lostAt < 7.5, "\(out)")
    }

    @Test func exchangeLimitsAreExplained() throws {
        let tooLong = try Sotto.run(["publish", "--text", "eleven byte", "--out", "/tmp/x.wav"])
        #expect(tooLong.status != 0 && tooLong.stderr.contains("audio bytes must be 1 to 10 bytes"))
        let ttl = try Sotto.run(["publish", "--text", "a", "--ttl", "0", "--out", "/tmp/x.wav"])
        #expect(ttl.status != 0 && ttl.stderr.contains("--ttl must be a finite number 1 to 86400 s"))
        let namespace = try Sotto.run(["subscribe", "--namespace", "n", "--input", "/tmp/x.wav"])
        #expect(namespace.status != 0 && namespace.stderr.contains("need a matcher"))
    }

    /// `bench sweep links` surveys a room's pairs, so a room of one device is refused, not printed empty.
    @Test func aLinkSurveyNeedsTwoDevices() throws {
        let result = try Sotto.run(["bench", "sweep", "links", "--devices", "2,1", "--trials", "1"])
        #expect(result.status == 64 && result.stderr.contains("two devices at least"), "\(result.status) \(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    @Test func simulatedRoomEndToEnd() throws {
        let result = try Sotto.run(["bench", "sweep", "exchange", "--trials", "1", "--seed", "3"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("| false found/lost events | 0 |"), "\(result.stdout)")
        // Every device finds the other two; two subscribers lose C's message at once when it unpublishes;
        // A and C lose B's, and B loses A's, when B walks away.
        #expect(result.stdout.contains(" | 6 |\n| unpublish -> lost | 0.00 | 0.00 | 2 |"), "\(result.stdout)")
        #expect(result.stdout.range(of: #"\| walked out of range -> lost \| [0-9.]+ \| [0-9.]+ \| 3 \|"#, options: .regularExpression) != nil, "\(result.stdout)")
    }
}

@Suite struct BeaconCLITests {
    /// `sotto admin beacon register --rotating` writes the key file once (mode 600) and stores the key; the
    /// beacon plays, in each period of Unix time, the HMAC-SHA256 ID of that period under the key.
    @Test func rotatingBeaconPlaysTheIDsOfUnixTimeSlots() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = "sqlite:" + dir.appendingPathComponent("exchange.sqlite").path
        let keyFile = dir.appendingPathComponent("beacon.key").path
        let wav = dir.appendingPathComponent("beacon.wav").path
        #expect(try Sotto.run(["admin", "project", "create", "museum", "--store", store]).status == 0)
        let register = try Sotto.run(["admin", "beacon", "register", "museum", "0x0102030405060708", "--rotating", "5", "--key-out", keyFile,
                                      "--store", store])
        #expect(register.status == 0, "\(register.stderr)")
        let mode = try #require(try FileManager.default.attributesOfItem(atPath: keyFile)[.posixPermissions] as? Int)
        #expect(mode == 0o600)
        let provisioning = try BeaconKeyFile.read(keyFile)
        #expect(provisioning.id == [1, 2, 3, 4, 5, 6, 7, 8] && provisioning.rotation.period == 5 && provisioning.rotation.key.bytes.count == 32)
        // Never overwritten: a second registration to the same file fails and changes nothing.
        let again = try Sotto.run(["admin", "beacon", "register", "museum", "0x0102030405060708", "--rotating", "5", "--key-out", keyFile,
                                   "--store", store])
        #expect(again.status == 2 && again.stderr.contains("never overwritten"), "\(again.stderr)")
        #expect(try BeaconKeyFile.read(keyFile) == provisioning)
        #expect(try Sotto.run(["admin", "beacon", "list", "--store", store]).stdout.contains("0102030405060708"))

        // The beacon's clock starts at Unix time 1 000 003 s, 3 s into slot 200 000 (Unix time / 5 s): frames at
        // +0 | 2, 4, 6 | 8, 10 s fall in slots 200 000 | 200 001 | 200 002.
        let beacon = try Sotto.run(["beacon", "--key-file", keyFile, "--clock", "1000003", "--duration", "12", "--interval", "2", "--jitter", "0",
                                    "--out", wav])
        #expect(beacon.status == 0, "\(beacon.stderr)")
        let heard = try Sotto.run(["decode", "--format", "json", wav]).stdout.split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let rotation = provisioning.rotation
        let expected = [0.0, 2, 4, 6, 8, 10].map { t in
            ([0x30] + rotation.id(atUnixTime: 1_000_003 + t, length: 8)).map { String(format: "%02x", $0) }.joined()
        }
        #expect(heard.compactMap { $0["token"] as? String } == expected)
        #expect(Set(expected).count == 3 && expected[0] != expected[1] && expected[1] == expected[3] && expected[3] != expected[4])
    }

    /// No default key, no key on the command line, no rotation without a key; bad key files are clear errors.
    @Test func keysAreNeverTypedOrDefaultedAndBadKeyFilesAreRefused() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("b.wav").path
        for arguments in [["beacon", "0x0102030405060708", "--rotate-every", "5", "--out", wav],
                          ["beacon", "0x0102030405060708", "--rotate-every", "5", "--rotation-key", "77", "--out", wav],
                          ["beacon", "--out", wav],
                          ["admin", "beacon", "register", "museum", "0x0102030405060708", "--rotating", "5", "--store", "sqlite:" + dir.path + "/s"],
                          ["admin", "beacon", "register", "museum", "0x0102030405060708", "--rotate-every", "5", "--rotation-key", "7",
                           "--store", "sqlite:" + dir.path + "/s"]] {
            let result = try Sotto.run(arguments)
            #expect(result.status == 64, "\(arguments): \(result.status) \(result.stderr)")
        }

        let good = try BeaconProvisioning(id: [1, 2, 3, 4, 5, 6, 7, 8], rotation: BeaconRotation(key: .generate(), period: 5)).text
        let keyLine = good.split(separator: "\n").first { $0.hasPrefix("key ") }!
        let files: [(String, String, Int, String)] = [
            ("open", good, 0o644, "too open"),
            ("group", good, 0o640, "too open"),
            ("truncated", String(good.prefix(good.count - 36)), 0o600, "truncated"),  // cut after 22 bytes of the key
            ("nokey", good.replacingOccurrences(of: String(keyLine), with: ""), 0o600, "no key line"),
            ("short", good.replacingOccurrences(of: String(keyLine), with: "key " + String(repeating: "5a", count: 8)), 0o600, "16 to 32 bytes, got 8"),
            ("garbage", "\u{0}\u{1}binary", 0o600, "not a sotto beacon key file"),
            ("empty", "", 0o600, "not a sotto beacon key file"),
        ]
        for (name, text, mode, reason) in files {
            let path = dir.appendingPathComponent(name).path
            try Data(text.utf8).write(to: URL(fileURLWithPath: path))
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path)
            let result = try Sotto.run(["beacon", "--key-file", path, "--duration", "2", "--out", wav])
            #expect(result.status == 2, "\(name): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains(reason), "\(name): \(result.stderr)")
        }
        let missing = try Sotto.run(["beacon", "--key-file", dir.appendingPathComponent("absent").path, "--duration", "2", "--out", wav])
        #expect(missing.status == 2 && missing.stderr.contains("No such file"), "\(missing.stderr)")
        // The file's ID and period are checked against those given.
        let path = dir.appendingPathComponent("good").path
        try BeaconKeyFile.write(try BeaconProvisioning(text: good), to: path)
        let otherID = try Sotto.run(["beacon", "0x0102030405060709", "--key-file", path, "--duration", "2", "--out", wav])
        #expect(otherID.status == 2 && otherID.stderr.contains("is the key of beacon 0102030405060708"), "\(otherID.stderr)")
        let otherPeriod = try Sotto.run(["beacon", "--key-file", path, "--rotate-every", "6", "--duration", "2", "--out", wav])
        #expect(otherPeriod.status == 2 && otherPeriod.stderr.contains("rotates every 5.0 s"), "\(otherPeriod.stderr)")
    }
}
