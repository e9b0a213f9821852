import Foundation
import Testing

/// Issue 30, round three: the rules of the reproducers on the paths beside the reported ones (standard input and
/// named pipes as inputs, simulate's other inputs).
@Suite struct ReliabilityRoundThreeTests {
    /// S4 on a pipe: a damaged Ogg piped into `decode -` (and read through /dev/stdin) is checked page by page as
    /// a file is: the same frames at the same times, and the same warning. Before, libogg dropped the page
    /// silently on a pipe and every later frame came 1.8 s early.
    @Test(.timeLimit(.minutes(2))) func damagedOggOnStandardInputIsCheckedAsAFileIs() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let fixture = try DamagedOggFixture(in: dir)
        let reference = fixture.reference, damaged = fixture.damaged, bytes = fixture.damagedBytes
        let intact = decodedFrameTimes(try Sotto.run(["decode", reference], timeout: 50).stdout)
        let asFile = try Sotto.run(["decode", damaged], timeout: 50)
        #expect(intact.count == 6)
        for arguments in [["decode", "-"], ["decode", "/dev/stdin"]] {
            let piped = try Sotto.run(arguments, timeout: 50, input: Data(bytes))
            #expect(piped.status == 0, "\(arguments): \(piped.stderr)")
            let times = decodedFrameTimes(piped.stdout)
            #expect(!times.isEmpty && times.count < intact.count, "\(arguments): \(piped.stdout)")
            #expect(times == decodedFrameTimes(asFile.stdout), "\(arguments): piped \(times), file \(decodedFrameTimes(asFile.stdout))")
            for time in times { #expect(intact.contains { abs($0 - time) < 0.002 }, "\(arguments): frame at \(time) s; intact: \(intact)") }
            #expect(piped.stderr.contains("warning") && piped.stderr.contains("damaged Ogg pages") && piped.stderr.contains("audio lost"),
                    "\(arguments): \(piped.stderr)")
        }
        // Cut inside the stream: an error on a pipe as from a file; the intact stream still decodes whole.
        let cut = try Sotto.run(["decode", "-"], timeout: 50, input: Data(bytes[0..<(bytes.count * 2 / 3)]))
        #expect(cut.status == 2 && cut.stderr.contains("cut short"), "\(cut.status) \(cut.stderr)")
        let whole = try Sotto.run(["decode", "-"], timeout: 50, input: try Data(contentsOf: URL(fileURLWithPath: reference)))
        #expect(whole.status == 0 && decodedFrameTimes(whole.stdout).count == 6 && !whole.stderr.contains("warning"), "\(whole.stderr)")
    }

    /// H1 through a path: a path naming a pipe (/dev/stdin on a pipe, a shell's <(...)) gets standard input's
    /// checks. Before, libsndfile read it as a pipe of its own and a cut SDS header spun there forever.
    @Test(.timeLimit(.minutes(1))) func namedPipesGetStandardInputsChecks() throws {
        for (name, bytes) in [("SDS", ReliabilityRoundTwoTests.sds), ("8SVX", ReliabilityRoundTwoTests.eightSVX)] {
            let result = try Sotto.run(["decode", "/dev/stdin"], timeout: 30, launcher: "/usr/bin/timeout",
                                       prefix: ["-s", "KILL", "20", Sotto.executable.path], input: Data(bytes))
            #expect(result.status == 2 && (result.stderr.contains("cannot be read from a pipe") || result.stderr.contains("not a format read from a pipe")),
                    "\(name): \(result.status) \(result.stderr)")
        }
    }

    /// simulate reads its input in several passes: a named pipe as input is copied once, as standard input is
    /// (before, the second pass opened the pipe again and waited for a writer that was gone).
    @Test(.timeLimit(.minutes(1))) func simulateReadsANamedPipeOnce() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let input = dir.appendingPathComponent("in.wav").path, output = dir.appendingPathComponent("out.wav").path
        #expect(try Sotto.run(["send", "0x0102", "--out", input]).status == 0)
        let result = try Sotto.run(["simulate", "/dev/stdin", output, "--snr", "30"], timeout: 40, launcher: "/usr/bin/timeout",
                                   prefix: ["-s", "KILL", "30", Sotto.executable.path], input: try Data(contentsOf: URL(fileURLWithPath: input)))
        #expect(result.status == 0, "\(result.status) \(result.stderr)")
        let decoded = try Sotto.run(["decode", "--format", "hex", output], timeout: 30)
        #expect(decoded.stdout == "0102\n", "\(decoded.stdout) \(decoded.stderr)")
    }

    /// D1 and C1 on every writer: each output format (AU, raw, FLAC, Ogg, MP3, AIFF; WAV in round two) written
    /// through a symbolic link keeps the link and fills its target; onto a device node keeps the node; onto
    /// /dev/full is exit 2 with the reason and leaves nothing behind. simulate's output the same.
    @Test(.timeLimit(.minutes(3))) func everyWriterFollowsLinksAndWritesDevicesThrough() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let device = dir.appendingPathComponent("null").path
        #expect(mknod(device, S_IFCHR | 0o666, dev_t(1 << 8 | 3)) == 0, "mknod needs root")
        for ext in ["au", "raw", "flac", "ogg", "mp3", "aiff"] {
            let target = dir.appendingPathComponent("target.\(ext)").path, link = dir.appendingPathComponent("link.\(ext)").path
            try Data("keep".utf8).write(to: URL(fileURLWithPath: target))
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "target.\(ext)")
            let sent = try Sotto.run(["send", "0x0102", "--out", link], timeout: 60)
            #expect(sent.status == 0, "\(ext): \(sent.stderr)")
            #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: link)) == "target.\(ext)", "\(ext): the link was replaced")
            let decoded = try Sotto.run(["decode", "--format", "hex", target] + (ext == "raw" ? ["--rate", "48000"] : []), timeout: 60)
            #expect(decoded.stdout == "0102\n", "\(ext): the target holds the sound: \(decoded.stdout) \(decoded.stderr)")
            // A device named with the format's extension: a link to the node, written through.
            let deviceLink = dir.appendingPathComponent("device.\(ext)").path
            try FileManager.default.createSymbolicLink(atPath: deviceLink, withDestinationPath: device)
            let onDevice = try Sotto.run(["send", "0x0102", "--out", deviceLink], timeout: 60)
            #expect(onDevice.status == 0, "\(ext): \(onDevice.stderr)")
            let full = dir.appendingPathComponent("full.\(ext)").path
            try FileManager.default.createSymbolicLink(atPath: full, withDestinationPath: "/dev/full")
            let onFull = try Sotto.run(["send", "0x0102", "--out", full], timeout: 60)
            #expect(onFull.status == 2 && onFull.stderr.contains("No space left"), "\(ext): \(onFull.status) \(onFull.stderr)")
        }
        let type = (try? FileManager.default.attributesOfItem(atPath: device))?[.type] as? FileAttributeType
        #expect(type == .typeCharacterSpecial, "the device node was replaced")
        let simulated = dir.appendingPathComponent("sim-target.wav").path, simulatedLink = dir.appendingPathComponent("sim-link.wav").path
        try Data("keep".utf8).write(to: URL(fileURLWithPath: simulated))
        try FileManager.default.createSymbolicLink(atPath: simulatedLink, withDestinationPath: simulated)
        let simulate = try Sotto.run(["simulate", dir.appendingPathComponent("target.flac").path, simulatedLink, "--snr", "30"], timeout: 60)
        #expect(simulate.status == 0 && (try? Data(contentsOf: URL(fileURLWithPath: simulated)).count) ?? 0 > 1_000, "\(simulate.status) \(simulate.stderr)")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: simulatedLink)) == simulated)
        // Nothing hidden left behind by the failed writes.
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).allSatisfy { !$0.hasPrefix(".") })
    }

    /// C1 on the other commands that write to standard output: a full one is exit 2 with the reason.
    @Test(.timeLimit(.minutes(1))) func otherStandardOutputsFailCleanly() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("t.wav").path
        #expect(try Sotto.run(["send", "0x0102", "--out", wav]).status == 0)
        for arguments in [["simulate", wav, "-", "--snr", "30"], ["decode", "--format", "json", wav], ["decode", "--format", "hex", "-"]] {
            let result = try Sotto.run(arguments, timeout: 30, launcher: "/bin/sh", prefix: ["-c", "exec \"$0\" \"$@\" > /dev/full", Sotto.executable.path],
                                       input: arguments.last == "-" ? try Data(contentsOf: URL(fileURLWithPath: wav)) : nil)
            #expect(result.status == 2 && result.stderr.contains("No space left"), "\(arguments): \(result.status) \(result.stderr)")
        }
    }

    /// The store URL's scheme is case-insensitive, like every URL scheme: SQLITE:PATH is a SQLite store at PATH,
    /// never a file named "SQLITE:PATH" (nor POSTGRES://... a file under a directory "POSTGRES:").
    @Test(.timeLimit(.minutes(1))) func storeSchemesIgnoreCase() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let path = dir.appendingPathComponent("upper.db").path
        let created = try Sotto.run(["admin", "project", "create", "P", "--store", "SQLite:" + path], timeout: 30)
        #expect(created.status == 0, "\(created.status) \(created.stderr)")
        #expect(FileManager.default.fileExists(atPath: path))
        let listed = try Sotto.run(["admin", "project", "list", "--store", "sqlite:" + path], timeout: 30)
        #expect(listed.status == 0 && listed.stdout.contains("P"), "\(listed.stdout) \(listed.stderr)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: FileManager.default.currentDirectoryPath).allSatisfy { !$0.hasPrefix("SQLite:") })
        let typo = try Sotto.run(["admin", "project", "list", "--store", "POSTGRES:x"], timeout: 30)
        #expect(typo.status == 64 && typo.stderr.contains("a PostgreSQL store is a URL"), "\(typo.status) \(typo.stderr)")
    }

    /// C2 beside simulate: the benchmarks and make-fixtures hold their recordings whole (speech, rooms, noise), so
    /// one longer than they hold is refused from its header with the reason, before any work (it was read whole, however long).
    @Test(.timeLimit(.minutes(1))) func benchRefusesARecordingTooLongToHold() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let speech = dir.appendingPathComponent("speech.wav").path
        // A header for 1 300 s at 8 kHz, its samples a sparse file (no disk).
        let frames = 8_000 * 1_300
        func u32(_ v: Int) -> [UInt8] { withUnsafeBytes(of: UInt32(v).littleEndian, Array.init) }
        func u16(_ v: Int) -> [UInt8] { withUnsafeBytes(of: UInt16(v).littleEndian, Array.init) }
        let header = Array("RIFF".utf8) + u32(36 + 2 * frames) + Array("WAVEfmt ".utf8) + u32(16) + u16(1) + u16(1) + u32(8_000)
            + u32(16_000) + u16(2) + u16(16) + Array("data".utf8) + u32(2 * frames)
        try Data(header).write(to: URL(fileURLWithPath: speech))
        #expect(truncate(speech, off_t(44 + 2 * frames)) == 0)
        let result = try Sotto.run(["bench", "sweep", "speech", "--speech", speech, "--trials", "1"], timeout: 30)
        #expect(result.status == 2 && result.stderr.contains("longer than 1200 s") && result.stderr.contains("bench"), "\(result.status) \(result.stderr)")
        let fixtures = dir.appendingPathComponent("fixtures").path
        let made = try Sotto.run(["make-fixtures", "--speech", speech, "--out", fixtures], timeout: 30)
        #expect(made.status == 2 && made.stderr.contains("longer than 1200 s") && made.stderr.contains("make-fixtures"), "\(made.status) \(made.stderr)")
    }

    /// C1 on `listen --record`: a recording whose writes fail (a full device; MP3 as well, whose encoder dropped
    /// the failure) ends the capture with exit 2 and the system's reason, never exit 0.
    @Test(.timeLimit(.minutes(1))) func aRecordingThatCannotBeWrittenIsAnError() throws {
        let rig = try FilePluginRig()
        defer { try? FileManager.default.removeItem(at: rig.directory) }
        try FilePluginRig.raw([Float](repeating: 0.01, count: 96_000)).write(to: rig.input)
        for ext in ["wav", "mp3"] {
            let record = rig.directory.appendingPathComponent("full.\(ext)").path
            try FileManager.default.createSymbolicLink(atPath: record, withDestinationPath: "/dev/full")
            let listen = try Sotto.run(["listen", "--device", "sotto_capture", "--duration", "1", "--record", record],
                                       environment: rig.environment, timeout: 30)
            #expect(listen.status == 2 && listen.stderr.contains("No space left"), "\(ext): \(listen.status) \(listen.stderr)")
        }
    }
}
