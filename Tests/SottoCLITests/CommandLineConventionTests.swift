import Foundation
import SottoAudio
import SottoTools
import Testing

/// Issue 13: the command line as users of sox and minimodem expect it.
@Suite(.serialized) struct CommandLineConventionTests {
    static let usageError: Int32 = 64
    static let failure: Int32 = 2
    static let checkFailed: Int32 = 1

    func lines(_ text: String) -> [String] { text.split(separator: "\n").map(String.init) }

    @Test func negativeNumbersAreOptionValues() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("quiet.wav").path, heard = dir.appendingPathComponent("heard.wav").path
        let send = try Sotto.run(["send", "01", "--volume", "-20", "--out", wav])
        #expect(send.status == 0, "\(send.stderr)")
        let decoded = try Sotto.run(["decode", "--format", "json", wav])
        let level = (try JSONSerialization.jsonObject(with: Data(decoded.stdout.utf8)) as? [String: Any])?["level"] as? Double
        #expect(level.map { abs($0 + 20) < 0.5 } == true, "\(decoded.stdout)")
        let simulate = try Sotto.run(["simulate", wav, heard, "--snr", "-5", "--ppm", "-300"])
        #expect(simulate.status == 0, "\(simulate.stderr)")
        // A value that is not a number is still refused with the option's name.
        let bad = try Sotto.run(["send", "01", "--volume", "--out", wav])
        #expect(bad.status == Self.usageError && bad.stderr.contains("--volume"), "\(bad.stderr)")
    }

    @Test func versionAndReadableDefaults() throws {
        let version = try Sotto.run(["--version"])
        #expect(version.status == 0 && version.stdout == SottoVersion.current + "\n")
        for command in ["decode", "listen", "send"] {
            let help = try Sotto.run([command, "--help"])
            #expect(!help.stdout.contains("ProfileSelection") && !help.stdout.contains("Profile("), "\(help.stdout)")
        }
        #expect(try Sotto.run(["decode", "--help"]).stdout.contains("default: all)"))
        #expect(try Sotto.run(["--help"]).stdout.contains("64  usage error"))
    }

    /// Bad hex, a 17-byte token, a rate too low for the profile: the subcommand's usage, exit 64.
    @Test func usageErrorsShowTheSubcommandsUsage() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("x.wav").path
        for (arguments, message) in [(["send", "0xabc", "--out", wav], "hex"),
                                     (["send", "0x" + String(repeating: "ab", count: 17), "--out", wav], "1 to 16 bytes"),
                                     (["send", "01", "--rate", "8000", "--out", wav], "too low"),
                                     (["publish", "--hex", "zz", "--out", wav], "hex")] {
            let result = try Sotto.run(arguments)
            #expect(result.status == Self.usageError, "\(arguments): \(result.status)")
            #expect(result.stderr.contains(message) && result.stderr.contains("Usage: sotto \(arguments[0])"), "\(arguments): \(result.stderr)")
        }
    }

    /// One table of exit statuses for every command.
    @Test func exitStatusesAreTheSameForEveryCommand() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let missing = dir.appendingPathComponent("missing.wav").path, out = dir.appendingPathComponent("o.wav").path
        for arguments in [["decode", missing], ["simulate", missing, out], ["subscribe", "--input", missing], ["bench", dir.path]] {
            let result = try Sotto.run(arguments)
            #expect(result.status == Self.failure, "\(arguments): \(result.status) \(result.stderr)")
        }
        for arguments in [["decode", "--no-such-option", missing], ["send", "01", "--out", out, "--loop"], ["profiles", "--format", "hex"]] {
            #expect(try Sotto.run(arguments).status == Self.usageError, "\(arguments)")
        }
        let wav = dir.appendingPathComponent("a.wav").path
        #expect(try Sotto.run(["send", "0x00112233", "--out", wav]).status == 0)
        let json = #"{"version": 1, "generator": "test", "fixtures": [{"file": "a.wav", "group": "g", "description": "d", "expected": [{"token": "99", "profile": "default"}]}]}"#
        try Data(json.utf8).write(to: dir.appendingPathComponent("manifest.json"))
        #expect(try Sotto.run(["bench", "fixtures", dir.path]).status == Self.checkFailed)
    }

    @Test func optionsThatDoNotApplyAreRefused() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("x.wav").path
        let cases: [([String], String)] = [
            (["send", "01", "--loop", "--out", wav], "--loop"),
            (["send", "01", "--self-check", "default", "--out", wav], "--self-check"),
            (["send", "01", "--device", "default", "--out", wav], "--device"),
            (["send", "01", "--out", dir.appendingPathComponent("x.xyz").path], ".flac"),
            (["send", "01", "--repeat", "3", "--interval", "0.1", "--out", wav], "shorter than the frame"),
            (["simulate", wav, wav, "--distance", "3"], "--rt60"),
            (["simulate", wav, wav, "--sir", "-3"], "--interference"),
            (["listen", "--record", "-"], "standard output"),
            (["subscribe", "--rate", "48000"], "--input"),
        ]
        for (arguments, reason) in cases {
            let result = try Sotto.run(arguments)
            #expect(result.status == Self.usageError && result.stderr.contains(reason), "\(arguments): \(result.status) \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: wav))
    }

    @Test func repeatWritesTheRepetitions() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("rep.wav").path
        let send = try Sotto.run(["send", "0x0102", "--repeat", "3", "--interval", "1", "--jitter", "0.2", "--out", wav])
        #expect(send.status == 0 && send.stderr.contains("3 frames"), "\(send.stderr)")
        let decoded = try Sotto.run(["decode", "--format", "json", wav])
        let starts = lines(decoded.stdout).compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["start"] as? Double }
        #expect(starts.count == 3, "\(decoded.stdout)")
        // One frame a second after the padding, each delayed by at most the jitter.
        for (k, start) in starts.enumerated() { #expect(start >= 0.1 + Double(k) - 0.01 && start <= 0.1 + Double(k) + 0.21, "\(starts)") }
    }

    /// One --jitter default for every transmitting command (issue 33: send had 0, publish and beacon 0.25, the
    /// daemon 1): 0.25 s, capped at --interval when that is shorter.
    @Test func oneJitterDefaultForEveryTransmitter() throws {
        for command in ["send", "publish", "beacon", "daemon"] {
            let help = try Sotto.run([command, "--help"])
            let words = help.stdout.split(whereSeparator: { $0 == " " || $0 == "\n" }).joined(separator: " ")
            #expect(words.contains("default: 0.25 s, or --interval when shorter"), "\(command): \(help.stdout)")
        }
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        func send(_ extra: [String]) throws -> Data {
            let wav = dir.appendingPathComponent("t.wav").path
            let result = try Sotto.run(["send", "0x0102", "--repeat", "3", "--interval", "1", "--out", wav] + extra)
            #expect(result.status == 0, "\(extra): \(result.stderr)")
            return try Data(contentsOf: URL(fileURLWithPath: wav))
        }
        let byDefault = try send([])
        #expect(byDefault == (try send(["--jitter", "0.25"])))
        #expect(byDefault != (try send(["--jitter", "0"])))
        // Frames 0.2 s apart: the default jitter is the interval, not a usage error (--jitter 0.25 is one).
        let publish = dir.appendingPathComponent("p.wav").path
        let shortInterval = ["publish", "--hex", "01", "--ttl", "1", "--interval", "0.2", "--profile", "fast", "--out", publish]
        let capped = try Sotto.run(shortInterval)
        #expect(capped.status == 0, "\(capped.stderr)")
        let explicit = try Sotto.run(shortInterval + ["--jitter", "0.25"])
        #expect(explicit.status == Self.usageError && explicit.stderr.contains("--jitter"), "\(explicit.stderr)")
    }

    /// The format follows the extension, for every format written.
    @Test func formatFollowsTheExtension() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        // Vorbis and MP3 are lossy, but at their highest quality they keep the 18-20 kHz band.
        let magic: [(String, String?)] = [("wav", "RIFF"), ("flac", "fLaC"), ("aiff", "FORM"), ("ogg", "OggS"), ("mp3", nil), ("au", ".snd"), ("raw", nil)]
        for (ext, header) in magic {
            let path = dir.appendingPathComponent("t.\(ext)").path
            let send = try Sotto.run(["send", "0x0a0b0c0d", "--out", path])
            #expect(send.status == 0, "\(ext): \(send.stderr)")
            let data = try Data(contentsOf: URL(fileURLWithPath: path))
            if let header { #expect(String(decoding: data.prefix(4), as: UTF8.self) == header, "\(ext)") }
            let raw = ext == "raw" ? ["--rate", "48000", "--encoding", "s16"] : []
            let decode = try Sotto.run(["decode", "--format", "hex", path] + raw)
            #expect(decode.stdout == "0a0b0c0d\n", "\(ext): \(decode.stderr)")
        }
    }

    /// `-` for standard input and output, as sox: a token piped from send into decode, text from stdin,
    /// raw PCM on stdin, subscribe from stdin.
    @Test func standardStreams() throws {
        let wav = try Sotto.run(["send", "0x0123456789abcdef", "--out", "-"])
        #expect(wav.status == 0 && wav.stdout.hasPrefix("RIFF"))
        let piped = try Sotto.run(["send", "0x0123456789abcdef", "--out", "-"]).stdoutData
        #expect(try Sotto.run(["decode", "--format", "hex", "-"], input: piped).stdout == "0123456789abcdef\n")
        let text = try Sotto.run(["send", "--text", "-", "--out", "-"], input: Data("from stdin\n".utf8)).stdoutData
        #expect(try Sotto.run(["decode", "-"], input: text).stdout.contains("\"from stdin\""))
        let hex = try Sotto.run(["send", "-", "--out", "-"], input: Data(" 0xbeef\n".utf8)).stdoutData
        #expect(try Sotto.run(["decode", "--format", "hex", "-"], input: hex).stdout == "beef\n")
        let published = try Sotto.run(["publish", "--text", "hi", "--ttl", "4", "--seed", "1", "--out", "-"]).stdoutData
        let subscribe = try Sotto.run(["subscribe", "--input", "-", "--lost-timeout", "2"], input: published)
        #expect(subscribe.status == 0 && lines(subscribe.stdout).count == 2 && subscribe.stdout.contains("found"), "\(subscribe.stderr)")
    }

    /// Raw PCM on a pipe that stays open: the frame's line arrives while the input is still open, so a
    /// reader of `arecord -t raw | sotto decode -` sees each token when it is decoded, not at the end.
    @Test func rawPCMFromAnOpenPipeIsDecodedAsItComes() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let raw = dir.appendingPathComponent("t.raw").path
        #expect(try Sotto.run(["send", "0x0a0b0c", "--padding", "1", "--out", raw]).status == 0)
        let process = Process()
        process.executableURL = Sotto.executable
        process.arguments = ["decode", "-", "--rate", "48000", "--encoding", "s16", "--channels", "1", "--format", "hex"]
        let input = Pipe(), output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Bounded: a command that never answers is terminated, and the read below ends empty.
        DispatchQueue.global().asyncAfter(deadline: .now() + 120) { if process.isRunning { process.terminate() } }
        try input.fileHandleForWriting.write(contentsOf: Data(contentsOf: URL(fileURLWithPath: raw)))
        // Decoding needs a block of audio after the frame: a few more seconds of silence, the pipe left open.
        try input.fileHandleForWriting.write(contentsOf: Data(count: 2 * 48_000 * 3))
        var received = Data()
        while !received.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            received += chunk
        }
        #expect(process.isRunning, "the line came only at exit")
        #expect(String(decoding: received, as: UTF8.self) == "0a0b0c\n")
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
    }

    /// Not on a terminal, no progress at all (the decode of a long recording, a sweep).
    @Test func noProgressWhenStderrIsNotATerminal() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let long = dir.appendingPathComponent("long.flac").path
        #expect(try Sotto.run(["publish", "--text", "hi", "--ttl", "70", "--interval", "30", "--out", long]).status == 0)
        let decode = try Sotto.run(["decode", long])
        #expect(decode.status == 0 && lines(decode.stdout).count == 3)
        #expect(!decode.stderr.contains("\r") && !decode.stderr.contains("%"), "\(decode.stderr)")
        // On a terminal (util-linux script gives it one), the percentage is shown and cleared before each line.
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/script") else { return }
        let terminal = try Sotto.run(["-qec", "'\(Sotto.executable.path)' decode '\(long)'", "/dev/null"], timeout: 120,
                                     launcher: "/usr/bin/script")
        #expect(terminal.status == 0 && terminal.stdout.contains("long.flac: ") && terminal.stdout.contains("\u{1B}[K"), "\(terminal.stdout)")
        #expect(terminal.stdout.range(of: "%[0-9]", options: .regularExpression) == nil, "\(terminal.stdout)")
        #expect(terminal.stdout.components(separatedBy: "\u{1B}[K").last?.contains("%") == false, "\(terminal.stdout)")
    }
}
