import Foundation
import SottoAudio
import Testing

/// Copies `source` to `target` with `edit` applied to its bytes (the byte edits of issue 11).
private func writeEdited(_ source: String, to target: String, _ edit: (inout [UInt8]) -> Void) throws {
    var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: source)))
    edit(&bytes)
    try Data(bytes).write(to: URL(fileURLWithPath: target))
}

/// Runs `sotto` with its output discarded and returns its exit status and peak resident memory (bytes),
/// measured by the kernel for this one child (wait4).
private func peakMemory(_ arguments: [String]) throws -> (status: Int32, bytes: Int) {
    let argv = ([Sotto.executable.path] + arguments).map { strdup($0) } + [nil]
    defer { for p in argv { free(p) } }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
    var pid: pid_t = 0
    guard posix_spawn(&pid, Sotto.executable.path, &actions, nil, argv, environ) == 0 else {
        throw CocoaError(.executableLoad)
    }
    var status: Int32 = 0
    var usage = rusage()
    while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
    return (status, usage.ru_maxrss * 1024)
}

/// The reproducers of issue 11: bad input gets a clear error and a non-zero exit, never a crash or a hang,
/// and what was decoded before a read error is still printed.
@Suite(.serialized) struct ReliabilityTests {
    /// The exit status of a command-line validation error (ArgumentParser's EX_USAGE).
    static let usageError: Int32 = 64

    /// R1: full-width digits are not hex digits.
    @Test func fullWidthDigitsInHexAreRefused() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let out = dir.appendingPathComponent("x.wav").path
        for arguments in [["send", "０１", "--out", out], ["send", "0xａｂ", "--out", out],
                          ["publish", "--hex", "０１", "--ttl", "3", "--out", out], ["beacon", "０１", "--out", out]] {
            let result = try Sotto.run(arguments, timeout: 60)
            #expect(result.status == Self.usageError && result.stderr.contains("is not a hex token"), "\(arguments): \(result.status) \(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: out))
        }
    }

    /// Invalid UTF-8 in --text reaches the program as U+FFFD: refused instead of sent as "efbfbd".
    @Test func replacementCharacterInTextIsRefused() throws {
        let result = try Sotto.run(["send", "--text", "\u{FFFD}", "--out", "/tmp/sotto-never-written.wav"], timeout: 60)
        #expect(result.status == Self.usageError && result.stderr.contains("--text is not valid UTF-8"), "\(result.stderr)")
    }

    /// R2, R12 and the rest: every numeric option is finite and in range, and the message names it.
    @Test func numericOptionsAreValidatedWithTheirName() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("t.wav").path
        #expect(try Sotto.run(["send", "0x01", "--out", wav]).status == 0)
        let out = dir.appendingPathComponent("o.wav").path
        let cases: [(arguments: [String], option: String)] = [
            (["listen", "--device", "null", "--duration", "1e300"], "--duration"),
            (["listen", "--device", "null", "--duration", "2e14"], "--duration"),
            (["listen", "--device", "null", "--rate", "nan"], "--rate"),
            (["bench", "sweep", "reverb", "--trials", "1", "--directivity", "nan"], "--directivity"),
            (["bench", "sweep", "false", "--seconds", "inf"], "--seconds"),
            (["send", "0x01", "--rate", "nan", "--out", out], "--rate"),
            (["send", "0x01", "--volume", "inf", "--out", out], "--volume"),
            (["send", "0x01", "--padding=-1", "--out", out], "--padding"),
            (["simulate", wav, out, "--directivity", "nan"], "--directivity"),
            (["simulate", wav, out, "--snr", "inf"], "--snr"),
            (["simulate", wav, out, "--rate", "768000"], "--rate"),
            (["publish", "--text", "a", "--interval", "nan", "--out", out], "--interval"),
            (["publish", "--text", "a", "--ttl", "0", "--out", out], "--ttl"),
            (["beacon", "01", "--duration", "nan", "--out", out], "--duration"),
            (["subscribe", "--input", wav, "--lost-timeout", "nan"], "--lost-timeout"),
            (["subscribe", "--input", wav, "--ttl", "0"], "--ttl"),
        ]
        for (arguments, option) in cases {
            let result = try Sotto.run(arguments, timeout: 60)
            #expect(result.status == Self.usageError && result.stderr.contains("\(option) must be"), "\(arguments): \(result.status) \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: out))
    }

    /// R3a, R3b, R3c: a WAV claiming 1 Hz is refused at open time by every command that reads files.
    @Test func absurdSampleRateIsRefusedEverywhere() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let good = dir.appendingPathComponent("t.wav").path
        let bad = dir.appendingPathComponent("h.wav").path
        let out = dir.appendingPathComponent("o.wav").path
        #expect(try Sotto.run(["send", "0x0123456789abcdef", "--out", good]).status == 0)
        // b[24:32] = struct.pack('<II', 1, 2)
        try writeEdited(good, to: bad) { $0.replaceSubrange(24..<32, with: [1, 0, 0, 0, 2, 0, 0, 0]) }
        for arguments in [["simulate", bad, out, "--rate", "384000"], ["simulate", good, out, "--interference", bad],
                          ["bench", "sweep", "speech", "--trials", "1", "--speech", bad], ["decode", bad],
                          ["subscribe", "--input", bad]] {
            let result = try Sotto.run(arguments, timeout: 60)
            #expect(result.status != 0 && result.stderr.contains("sample rate of 1 Hz"), "\(arguments): \(result.status) \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: out))
    }

    /// R4: a FLAC of unknown length (libsndfile says Int64.max frames) is subscribed to its real end.
    @Test func subscribeToAFlacOfUnknownLengthEnds() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let flac = dir.appendingPathComponent("p.flac").path
        let unknown = dir.appendingPathComponent("u.flac").path
        #expect(try Sotto.run(["publish", "--text", "hi", "--ttl", "4", "--out", flac]).status == 0)
        try writeEdited(flac, to: unknown) { bytes in
            bytes[21] &= 0xF0
            bytes.replaceSubrange(22..<26, with: [0, 0, 0, 0])
        }
        let result = try Sotto.run(["subscribe", "--input", unknown], timeout: 60)
        #expect(result.status == 0, "\(result.status) \(result.stderr)")
        #expect(result.stdout.contains("found") && result.stdout.contains("4.000 s  lost"), "\(result.stdout)")
    }

    /// R5: damaged FLAC data (one flipped bit, or cut in the middle) is reported on stderr with a non-zero
    /// exit, and the frames decoded before it are still printed, by decode and subscribe.
    @Test func readErrorsAreReportedAfterWhatWasDecoded() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let single = dir.appendingPathComponent("t.flac").path
        #expect(try Sotto.run(["send", "0x0123456789abcdef", "--out", single]).status == 0)
        let flippedSingle = dir.appendingPathComponent("b.flac").path
        try writeEdited(single, to: flippedSingle) { $0[9184] ^= 0x10 }
        let issueCase = try Sotto.run(["decode", flippedSingle], timeout: 60)
        #expect(issueCase.status != 0 && issueCase.stderr.contains("error reading"), "\(issueCase.status) \(issueCase.stderr)")

        let flac = dir.appendingPathComponent("p.flac").path
        #expect(try Sotto.run(["publish", "--text", "hi", "--ttl", "4", "--out", flac]).status == 0)
        let size = try Data(contentsOf: URL(fileURLWithPath: flac)).count
        let flipped = dir.appendingPathComponent("flipped.flac").path
        try writeEdited(flac, to: flipped) { $0[size * 6 / 10] ^= 0x10 }
        let truncated = dir.appendingPathComponent("truncated.flac").path
        try writeEdited(flac, to: truncated) { $0.removeLast(size * 4 / 10) }
        for path in [flipped, truncated] {
            let decode = try Sotto.run(["decode", "--format", "hex", path], timeout: 60)
            #expect(decode.status != 0 && decode.stderr.contains("error reading"), "\(decode.status) \(decode.stderr)")
            #expect(decode.stdout.split(separator: "\n").count == 2, "frames before the damage: \(decode.stdout)")
            let subscribe = try Sotto.run(["subscribe", "--input", path], timeout: 60)
            #expect(subscribe.status != 0 && subscribe.stderr.contains("error reading"), "\(subscribe.status) \(subscribe.stderr)")
            #expect(subscribe.stdout.contains("found"), "\(subscribe.stdout)")
        }
    }

    /// R6: publish and beacon write their files in a stream: memory does not grow with the duration,
    /// and the file is the same as when it was built in memory (a 4 s file decodes to 4 frames).
    @Test func longPublishFilesAreWrittenWithFlatMemory() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let short = try peakMemory(["publish", "--text", "hi", "--ttl", "10", "--out", dir.appendingPathComponent("s.flac").path])
        let long = try peakMemory(["publish", "--text", "hi", "--ttl", "900", "--out", dir.appendingPathComponent("l.flac").path])
        let beacon = try peakMemory(["beacon", "01", "--duration", "900", "--out", dir.appendingPathComponent("b.flac").path])
        #expect(short.status == 0 && long.status == 0 && beacon.status == 0)
        // 900 s at 48 kHz in memory is 173 MB of Float; streamed, the peak is the short file's within 20 MB.
        #expect(long.bytes < short.bytes + 20_000_000, "publish: \(short.bytes / 1_000_000) MB for 10 s, \(long.bytes / 1_000_000) MB for 900 s")
        #expect(beacon.bytes < short.bytes + 20_000_000, "beacon: \(beacon.bytes / 1_000_000) MB for 900 s")
        let wav = dir.appendingPathComponent("p.wav").path
        #expect(try Sotto.run(["publish", "--text", "hi", "--ttl", "4", "--jitter", "0", "--out", wav]).status == 0)
        #expect(try Sotto.run(["decode", "--format", "hex", wav]).stdout.split(separator: "\n").count == 4)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).allSatisfy { !$0.hasPrefix(".") })
        // A day of 16-bit WAV is 8.3 GB, beyond the 4 GiB its sizes can say: refused at once, not wrapped.
        let day = try Sotto.run(["publish", "--text", "hi", "--ttl", "86400", "--out", dir.appendingPathComponent("day.wav").path], timeout: 60)
        #expect(day.status != 0 && day.stderr.contains("write FLAC"), "\(day.status) \(day.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("day.wav").path))
    }
}

extension ReliabilityTests {
    /// The simulator's room adds no ghost copy of the frame at the end of its response (issue 11:
    /// a second frame at 2.583 s with --rt60 2, only the ghost with --rt60 3 --distance 10).
    @Test func simulatedRoomAddsNoGhostFrame() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let sent = dir.appendingPathComponent("t.wav").path
        let heard = dir.appendingPathComponent("r.wav").path
        #expect(try Sotto.run(["send", "0x0123456789abcdef", "--out", sent]).status == 0)
        #expect(try Sotto.run(["simulate", sent, heard, "--rt60", "2"]).status == 0)
        let near = try Sotto.run(["decode", "--format", "json", heard])
        let starts = near.stdout.split(separator: "\n").compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])?["start"] as? Double
        }
        #expect(starts.count == 1 && abs(starts[0] - 0.103) < 0.01, "\(near.stdout)")
        #expect(try Sotto.run(["simulate", sent, heard, "--rt60", "3", "--distance", "10"]).status == 0)
        let far = try Sotto.run(["decode", "--format", "json", heard])
        #expect(!far.stdout.contains("\"start\":2.") && !far.stdout.contains("\"start\":3."), "\(far.stdout)")
    }
}

extension ReliabilityTests {
    /// A silent (or NaN) --rir, or --snr on a silent input, is an error instead of a file of zeros.
    @Test func simulateRefusesWhatWouldWriteSilence() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let sent = dir.appendingPathComponent("t.wav").path
        let silent = dir.appendingPathComponent("z.wav").path
        let notFinite = dir.appendingPathComponent("nan.wav").path
        let out = dir.appendingPathComponent("o.wav").path
        #expect(try Sotto.run(["send", "0x01", "--out", sent]).status == 0)
        try AudioFile.write([Float](repeating: 0, count: 48_000), sampleRate: 48_000, to: silent)
        try AudioFile.write([Float](repeating: .nan, count: 4_800), sampleRate: 48_000, to: notFinite, format: .wavFloat)
        for (arguments, message) in [(["simulate", sent, out, "--rir", silent], "is silent"), (["simulate", sent, out, "--rir", notFinite], "is silent"),
                                     (["simulate", silent, out, "--snr", "10"], "is silent")] {
            let result = try Sotto.run(arguments, timeout: 60)
            #expect(result.status != 0 && result.stderr.contains(message), "\(arguments): \(result.status) \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: out))
    }
}
