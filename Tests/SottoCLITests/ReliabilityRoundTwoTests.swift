import Foundation
import SottoExchange
import SottoExchangeCore
import Testing

/// Runs `sotto` with its standard output on `stdoutPath` (e.g. /dev/full) or, with `closedPipe`, on a pipe
/// whose reader is gone (SIGPIPE at its default, as under a shell); returns the exit status (or 128 + the
/// signal) and standard error.
private func runRedirected(_ arguments: [String], stdoutPath: String? = nil, closedPipe: Bool = false,
                           timeout: Double = 60) throws -> (status: Int32, stderr: String) {
    let argv = ([Sotto.executable.path] + arguments).map { strdup($0) } + [nil]
    defer { for p in argv { free(p) } }
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    var errorPipe: [Int32] = [0, 0]
    guard pipe(&errorPipe) == 0 else { throw CocoaError(.fileWriteUnknown) }
    var outputPipe: [Int32] = [-1, -1]
    if closedPipe {
        guard pipe(&outputPipe) == 0 else { throw CocoaError(.fileWriteUnknown) }
        close(outputPipe[0])
        posix_spawn_file_actions_adddup2(&actions, outputPipe[1], 1)
    } else {
        posix_spawn_file_actions_addopen(&actions, 1, stdoutPath ?? "/dev/null", O_WRONLY, 0)
    }
    posix_spawn_file_actions_adddup2(&actions, errorPipe[1], 2)
    posix_spawn_file_actions_addclose(&actions, errorPipe[0])
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var defaults = sigset_t()
    sigemptyset(&defaults)
    sigaddset(&defaults, SIGPIPE)
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF))
    var pid: pid_t = 0
    guard posix_spawn(&pid, Sotto.executable.path, &actions, &attributes, argv, environ) == 0 else {
        throw CocoaError(.executableLoad)
    }
    close(errorPipe[1])
    if closedPipe { close(outputPipe[1]) }
    let deadline = DispatchTime.now() + timeout
    let child = pid
    DispatchQueue.global().asyncAfter(deadline: deadline) { kill(child, SIGKILL) }
    let errors = FileHandle(fileDescriptor: errorPipe[0], closeOnDealloc: true).readDataToEndOfFile()
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    return (code, String(decoding: errors, as: UTF8.self))
}

/// The file type bits of `path` itself (a link is a link: FileManager reads it with lstat). Not `lstat` itself:
/// with the D-Bus test bus in this target, which module `struct stat` comes from varies between builds.
private func fileType(_ path: String) -> mode_t? {
    guard let type = (try? FileManager.default.attributesOfItem(atPath: path))?[.type] as? FileAttributeType else { return nil }
    switch type {
    case .typeSymbolicLink: return S_IFLNK
    case .typeCharacterSpecial: return S_IFCHR
    case .typeBlockSpecial: return S_IFBLK
    case .typeDirectory: return S_IFDIR
    case .typeRegular: return S_IFREG
    case .typeSocket: return S_IFSOCK
    default: return 0
    }
}

/// The reproducers of issue 30 (reliability, round two): no file destroyed, no crash on a failed output,
/// no runaway output, no made-up numbers; each test failed before its fix.
@Suite(.serialized) struct ReliabilityRoundTwoTests {
    // MARK: D1: files written by rename

    /// An output that is a symbolic link is written through the link (which stays a link); a device node
    /// is written through, never replaced by a regular file; a link to nothing is refused.
    @Test func outputsFollowSymlinksAndWriteDevicesThrough() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let target = dir.appendingPathComponent("target.wav").path
        let link = dir.appendingPathComponent("link.wav").path
        try Data("keep".utf8).write(to: URL(fileURLWithPath: target))
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: "target.wav")
        let send = try Sotto.run(["send", "0x0102", "--out", link], timeout: 60)
        #expect(send.status == 0, "\(send.stderr)")
        #expect(fileType(link) == S_IFLNK, "the link was replaced")
        let decoded = try Sotto.run(["decode", "--format", "hex", target], timeout: 60)
        #expect(decoded.stdout == "0102\n", "the target holds the sound: \(decoded.stdout) \(decoded.stderr)")

        // A character device (the same as /dev/null) stays a device.
        let device = dir.appendingPathComponent("null.wav").path
        #expect(mknod(device, S_IFCHR | 0o666, dev_t(1 << 8 | 3)) == 0, "mknod needs root")
        #expect(try Sotto.run(["send", "0x0102", "--out", device], timeout: 60).status == 0)
        #expect(fileType(device) == S_IFCHR, "the device node was replaced")

        let dangling = dir.appendingPathComponent("dangling.wav").path
        try FileManager.default.createSymbolicLink(atPath: dangling, withDestinationPath: "missing/nothing.wav")
        let refused = try Sotto.run(["send", "0x0102", "--out", dangling], timeout: 60)
        #expect(refused.status == 2 && refused.stderr.contains("symbolic link to nothing"), "\(refused.status) \(refused.stderr)")
        #expect(fileType(dangling) == S_IFLNK)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).allSatisfy { !$0.hasPrefix(".") })
    }

    /// `sotto tune -o` (the case): through a symlink and onto a device node.
    @Test func tuneWritesWisdomThroughLinksAndDevices() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let target = dir.appendingPathComponent("wisdom").path
        let link = dir.appendingPathComponent("link").path
        try Data("keep".utf8).write(to: URL(fileURLWithPath: target))
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: target)
        let device = dir.appendingPathComponent("fake").path
        #expect(mknod(device, S_IFCHR | 0o666, dev_t(1 << 8 | 3)) == 0, "mknod needs root")
        for path in [link, device] {
            let tune = try Sotto.run(["tune", "--rate", "48000", "-o", path], timeout: 120)
            #expect(tune.status == 0, "\(tune.stderr)")
        }
        #expect(fileType(link) == S_IFLNK && fileType(device) == S_IFCHR)
        #expect(try String(contentsOfFile: target, encoding: .utf8).contains("fftw"))
    }

    /// The consent file, written by rename too, stays a symbolic link.
    @Test func consentIsWrittenThroughASymlink() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let real = dir.appendingPathComponent("real-consent").path
        try Data("denied\n".utf8).write(to: URL(fileURLWithPath: real))
        try FileManager.default.createSymbolicLink(atPath: dir.appendingPathComponent("consent").path, withDestinationPath: real)
        let consent = Consent(directory: dir)
        try consent.set(granted: true)
        #expect(consent.isGranted)
        #expect(fileType(dir.appendingPathComponent("consent").path) == S_IFLNK)
        #expect(try String(contentsOfFile: real, encoding: .utf8) == "granted\n")
    }

    // MARK: D2, S6: the service's socket and store

    /// `serve --unix PATH` and `--listen unix:PATH` remove only a stale socket: a regular file, a directory, the
    /// store itself and a live socket are left alone and refused; an empty path is a usage error.
    @Test(.timeLimit(.minutes(2))) func serveRemovesOnlyAStaleSocket() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("x.db").path
        let victim = dir.appendingPathComponent("victim.txt").path
        try Data("data".utf8).write(to: URL(fileURLWithPath: victim))
        let empty = dir.appendingPathComponent("empty").path
        try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: false)
        for arguments in [["--unix", victim], ["--listen", "unix:" + victim], ["--unix", empty], ["--unix", store]] {
            let result = try Sotto.run(["serve"] + arguments + ["--store", "sqlite:" + store], timeout: 20)
            #expect(result.status == 2 && result.stderr.contains("left as it is"), "\(arguments): \(result.status) \(result.stderr)")
        }
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "data")
        #expect(fileType(empty) == S_IFDIR && fileType(store) == S_IFREG)
        let blank = try Sotto.run(["serve", "--unix", "", "--store", "sqlite:" + store], timeout: 20)
        #expect(blank.status == 64 && blank.stderr.contains("--unix needs a socket path"), "\(blank.status) \(blank.stderr)")

        // A socket nobody answers on (its service died) is replaced; one a service answers on is refused.
        let socketPath = dir.appendingPathComponent("s.sock").path
        let stale = try bindUnixSocket(socketPath, listening: false)
        close(stale)
        #expect(fileType(socketPath) == S_IFSOCK)
        let serve = try BackgroundSotto(["serve", "--unix", socketPath, "--store", "sqlite:" + store])
        defer { serve.process.terminate() }
        let listening = await serve.line(timeout: 30) { $0.hasPrefix("listening on ") }
        #expect(listening != nil, "\(serve.standardError)")
        let second = try Sotto.run(["serve", "--unix", socketPath, "--store", "sqlite:" + dir.appendingPathComponent("y.db").path], timeout: 20)
        #expect(second.status == 2 && second.stderr.contains("a service is listening on it"), "\(second.status) \(second.stderr)")
        #expect(fileType(socketPath) == S_IFSOCK)
        await serve.interrupt()
    }

    /// A second `sotto serve` on the SQLite store of a running one is refused, naming PostgreSQL; admin
    /// commands still work on the store meanwhile.
    @Test(.timeLimit(.minutes(2))) func aSecondServiceOnOneSQLiteStoreIsRefused() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = dir.appendingPathComponent("s6.db").path
        let first = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", "sqlite:" + store])
        defer { first.process.terminate() }
        #expect(await first.line(timeout: 30) { $0.hasPrefix("listening on ") } != nil, "\(first.standardError)")
        let second = try Sotto.run(["serve", "--listen", "127.0.0.1:0", "--store", "sqlite:" + store], timeout: 20)
        #expect(second.status == 2 && second.stderr.contains("in use by another sotto serve") && second.stderr.contains("PostgreSQL"),
                "\(second.status) \(second.stderr)")
        let admin = try Sotto.run(["admin", "project", "create", "p", "--store", "sqlite:" + store], timeout: 20)
        #expect(admin.status == 0, "\(admin.stderr)")
        await first.interrupt()
        // Once the first has stopped, the store is free again.
        let again = try BackgroundSotto(["serve", "--listen", "127.0.0.1:0", "--store", "sqlite:" + store])
        defer { again.process.terminate() }
        #expect(await again.line(timeout: 30) { $0.hasPrefix("listening on ") } != nil, "\(again.standardError)")
        await again.interrupt()
    }

    // MARK: C1: failed writes to stdout and stderr

    /// A full standard output is an error with exit 2 and a message, for every kind of output; a reader that
    /// went away (EPIPE) ends the program quietly.
    @Test func failedWritesToStandardOutputAreErrors() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("t.wav").path
        #expect(try Sotto.run(["send", "0x0102", "--out", wav]).status == 0)
        for arguments in [["decode", wav], ["profiles"], ["--help"], ["help", "send"], ["send", "0x01", "--out", "-"]] {
            let result = try runRedirected(arguments, stdoutPath: "/dev/full")
            #expect(result.status == 2 && result.stderr.contains("No space left on device"), "\(arguments): \(result.status) \(result.stderr)")
        }
        for arguments in [["decode", wav], ["profiles"], ["send", "0x01", "--out", "-"]] {
            let result = try runRedirected(arguments, closedPipe: true)
            #expect(result.status == 0 && result.stderr.isEmpty, "\(arguments): \(result.status) \(result.stderr)")
        }
    }

    /// `admin key create` never keeps a usable key whose only copy of the secret was lost.
    @Test func aKeyWhoseSecretCannotBePrintedIsRevoked() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let store = "sqlite:" + dir.appendingPathComponent("k.db").path
        #expect(try Sotto.run(["admin", "project", "create", "P", "--store", store]).status == 0)
        for closedPipe in [false, true] {
            let result = try runRedirected(["admin", "key", "create", "P", "--store", store], stdoutPath: "/dev/full", closedPipe: closedPipe)
            #expect(result.status == 2 && result.stderr.contains("was revoked"), "\(result.status) \(result.stderr)")
        }
        let keys = try Sotto.run(["admin", "key", "list", "--store", store])
        let lines = keys.stdout.split(separator: "\n")
        #expect(lines.count == 2 && lines.allSatisfy { $0.contains("\trevoked\t") }, "\(keys.stdout)")
    }

    // MARK: H2, S7 and the smaller ones

    /// Generated audio has one length bound for every format and pipes, refused before anything is written;
    /// Ctrl-C during a long write leaves no file, hidden or not.
    @Test func outputLengthIsBoundedAndAnInterruptedWriteLeavesNothing() async throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        for name in ["x.au", "x.raw", "x.flac", "x.ogg", "x.mp3", "x.wav", "-"] {
            let out = name == "-" ? "-" : dir.appendingPathComponent(name).path
            // Under a 100 MiB file-size limit (ulimit -f), so that a regression fails the test instead of filling the disk.
            let result = try Sotto.run(["send", "0x01", "--repeat", "1000000", "--interval", "3600", "--out", out], timeout: 30,
                                       launcher: "/bin/sh", prefix: ["-c", "ulimit -f 204800; exec \"$0\" \"$@\"", Sotto.executable.path])
            #expect(result.status == 64 && result.stderr.contains("at most 86400 s") && result.stdoutData.isEmpty, "\(name): \(result.status) \(result.stderr)")
        }
        let help = try Sotto.run(["send", "--help"])
        #expect(help.stdout.contains("86400 s"))
        let out = dir.appendingPathComponent("long.au").path
        let send = try BackgroundSotto(["-c", "ulimit -f 2048000; exec \"$0\" \"$@\"", Sotto.executable.path,
                                        "send", "0x01", "--repeat", "80000", "--interval", "1", "--jitter", "0", "--out", out], launcher: "/bin/sh")
        // Interrupted once the hidden output has grown past 1 MiB (not after a fixed sleep: a fast disk reached the
        // 1 GB limit within 2 s on CI, and the run ended with "File too large" before Ctrl-C).
        let deadline = Date().addingTimeInterval(20)
        while Date() < deadline, send.process.isRunning, Self.largestFile(in: dir) < 1 << 20 {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(Self.largestFile(in: dir) >= 1 << 20, "the output never grew: \(send.standardError)")
        await send.interrupt()
        // Standard error is read on another thread: its last line may land just after the exit.
        #expect(send.process.terminationStatus == 2, "\(send.standardError)")
        #expect(await send.saidOnStandardError("interrupted"), "\(send.standardError)")
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.path).isEmpty)
    }

    /// The size in bytes of the largest file in `dir`, hidden ones included (0 when there is none).
    private static func largestFile(in dir: URL) -> Int {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir.path)) ?? []
        return names.compactMap { name in
            (try? FileManager.default.attributesOfItem(atPath: dir.appendingPathComponent(name).path))?[.size] as? Int
        }.max() ?? 0
    }

    /// `sotto load` against nothing fails fast with exit 2 and the cause (the probe, as publish and subscribe),
    /// without numbers.
    @Test(.timeLimit(.minutes(1))) func loadAgainstAnUnreachableServerFails() throws {
        let start = Date()
        let result = try Sotto.run(["load", "--server", "127.0.0.1:1", "--api-key", "k", "--sessions", "1", "--duration", "1"], timeout: 50)
        #expect(result.status == 2 && result.stderr.contains("127.0.0.1:1 refused the connection"), "\(result.status) \(result.stderr)")
        #expect(!result.stdout.contains("sightings"), "\(result.stdout)")
        #expect(Date().timeIntervalSince(start) < 30)
    }

    /// Store URLs, output paths checked before the work, empty lists, unknown help topics, names that
    /// would break a listing.
    @Test func smallerMistakesAreErrors() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        for store in ["mysql://x", "postgress://u@h/d", "postgres:x"] {
            let result = try Sotto.run(["admin", "project", "list", "--store", store], timeout: 30)
            #expect(result.status == 64 && result.stderr.contains("--store"), "\(store): \(result.status) \(result.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: "mysql:"))
        let missing = dir.appendingPathComponent("no/such/dir/x.db").path
        let noDirectory = try Sotto.run(["admin", "project", "list", "--store", "sqlite:" + missing], timeout: 30)
        #expect(noDirectory.status == 2 && noDirectory.stderr.contains("no directory"), "\(noDirectory.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.appendingPathComponent("no").path))

        let start = Date()
        let record = try Sotto.run(["listen", "--device", "null", "--duration", "5", "--record", missing.replacingOccurrences(of: ".db", with: ".wav")], timeout: 30)
        #expect(record.status == 2 && record.stderr.contains("no directory") && Date().timeIntervalSince(start) < 4, "\(record.status) \(record.stderr)")
        let wav = dir.appendingPathComponent("t.wav").path
        #expect(try Sotto.run(["send", "0x01", "--out", wav]).status == 0)
        let simulate = try Sotto.run(["simulate", wav, dir.appendingPathComponent("no/o.wav").path], timeout: 30)
        #expect(simulate.status == 2 && simulate.stderr.contains("no directory"), "\(simulate.stderr)")

        for lengths in ["", "8,,12"] {
            let result = try Sotto.run(["bench", "sweep", "reverb", "--trials", "1", "--lengths", lengths], timeout: 30)
            #expect(result.status == 64 && result.stderr.contains("--lengths"), "'\(lengths)': \(result.status) \(result.stderr)")
        }
        let unknown = try Sotto.run(["help", "nonexistent"])
        #expect(unknown.status == 64 && unknown.stderr.contains("nonexistent"), "\(unknown.status) \(unknown.stderr)")
        #expect(try Sotto.run(["help", "admin", "key"]).status == 0)

        let store = "sqlite:" + dir.appendingPathComponent("p.db").path
        for name in ["two\nlines", "tab\there"] {
            let result = try Sotto.run(["admin", "project", "create", name, "--store", store])
            #expect(result.status == 2 && result.stderr.contains("control characters"), "\(result.stderr)")
        }
        #expect(try Sotto.run(["admin", "project", "list", "--store", store]).stdout.isEmpty)
    }
}

extension ReliabilityRoundTwoTests {
    /// The first bytes of the pipe inputs (H1, S5): a 12-byte SDS and a 43-byte 8SVX that spin
    /// libsndfile on a pipe, a CAF and a G.723 AU that yield nothing there.
    static let sds: [UInt8] = [0xf0, 0x7e, 0x00, 0x01, 0x00, 0x00, 0x08, 0x61, 0x22, 0x01, 0x46, 0x07]
    static let eightSVX: [UInt8] = Array("FORM".utf8) + [0x00, 0x01, 0x07, 0xf0] + Array("16SVVHDR".utf8)
        + [0, 0, 0, 0x14, 0, 0, 0x83, 0xc6] + [UInt8](repeating: 0, count: 8) + [0xbb, 0x80, 0x01, 0x00, 0, 0, 0xff, 0xff] + Array("NAM".utf8)
    static let caf: [UInt8] = Array("caff".utf8) + [0, 1, 0, 0] + Array("desc".utf8) + [0, 0, 0, 0, 0, 0, 0, 0x20, 0x40, 0xe7, 0x70, 0, 0, 0, 0, 0]
        + Array("lpcm".utf8) + [UInt8](repeating: 0, count: 4096)
    static let g723: [UInt8] = Array(".snd".utf8) + [0, 0, 0, 0x18, 0, 0, 0x31, 0x92, 0, 0, 0, 0x19, 0, 0, 0xbb, 0x80, 0, 0, 0, 1]
        + [UInt8](repeating: 0xff, count: 4096)

    /// On a pipe, only formats that stream are read; the others, an empty stream and a header without
    /// samples are errors, never a hang or an exit 0 with nothing.
    @Test(.timeLimit(.minutes(1))) func pipesAcceptOnlyStreamingFormatsAndNeverEndSilently() throws {
        for (name, bytes) in [("SDS", Self.sds), ("8SVX", Self.eightSVX), ("CAF", Self.caf), ("G.723 AU", Self.g723)] {
            // Killed (SIGKILL) after 20 s: a regression that spins must fail the test, not hang it.
            let result = try Sotto.run(["decode", "-"], timeout: 30, launcher: "/usr/bin/timeout",
                                       prefix: ["-s", "KILL", "20", Sotto.executable.path], input: Data(bytes))
            #expect(result.status == 2 && (result.stderr.contains("cannot be read from a pipe") || result.stderr.contains("not a format read from a pipe")),
                    "\(name): \(result.status) \(result.stderr)")
        }
        let empty = try Sotto.run(["decode", "-", "--rate", "48000"], timeout: 20, input: Data())
        #expect(empty.status == 2 && empty.stderr.contains("holds no audio"), "\(empty.status) \(empty.stderr)")
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let wav = dir.appendingPathComponent("t.wav").path
        #expect(try Sotto.run(["send", "0x0102", "--out", wav]).status == 0)
        let whole = try Data(contentsOf: URL(fileURLWithPath: wav))
        let headerOnly = try Sotto.run(["decode", "-"], timeout: 20, input: whole.prefix(44))
        // Its header states the data's size: the stream announced frames and held none.
        #expect(headerOnly.status == 2 && headerOnly.stderr.contains("no sample could be read, though the header announces"),
                "\(headerOnly.status) \(headerOnly.stderr)")
        // What streams still decodes from a pipe: WAV, AIFF, AU, and FLAC (S5b: libsndfile lost sync there).
        for ext in ["wav", "aif", "au", "flac"] {
            let file = dir.appendingPathComponent("p.\(ext)").path
            #expect(try Sotto.run(["send", "0x0102", "--out", file]).status == 0)
            let piped = try Sotto.run(["decode", "--format", "hex", "-"], timeout: 30, input: try Data(contentsOf: URL(fileURLWithPath: file)))
            #expect(piped.status == 0 && piped.stdout == "0102\n", "\(ext): \(piped.status) \(piped.stdout) \(piped.stderr)")
        }
        // A FLAC cut on a pipe is an error after what was decoded, as from a file.
        let long = dir.appendingPathComponent("long.flac").path
        #expect(try Sotto.run(["send", "0x0102", "--repeat", "6", "--interval", "1.75", "--jitter", "0", "--out", long]).status == 0)
        let flac = try Data(contentsOf: URL(fileURLWithPath: long))
        let cut = try Sotto.run(["decode", "--format", "hex", "-"], timeout: 30, input: flac.prefix(flac.count / 2))
        #expect(cut.status == 2 && cut.stderr.contains("frames its header announces") && cut.stdout.hasPrefix("0102\n"), "\(cut.status) \(cut.stdout) \(cut.stderr)")
    }

    /// A WAV, AIFF or AU cut short (its header promising more) is decoded up to the cut with a warning.
    @Test func cutFilesAreWarnedOf() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        for ext in ["wav", "aif", "au"] {
            let file = dir.appendingPathComponent("t.\(ext)").path
            #expect(try Sotto.run(["send", "0x0102", "--repeat", "6", "--interval", "1.75", "--jitter", "0", "--out", file]).status == 0)
            let whole = try Data(contentsOf: URL(fileURLWithPath: file))
            let cut = dir.appendingPathComponent("cut.\(ext)").path
            try whole.prefix(whole.count / 4).write(to: URL(fileURLWithPath: cut))
            let result = try Sotto.run(["decode", "--format", "hex", cut], timeout: 60)
            #expect(result.status == 0 && result.stdout == "0102\n0102\n", "\(ext): \(result.stdout)")
            #expect(result.stderr.contains("warning") && result.stderr.contains("cut short") && result.stderr.contains("promises 9.2 s"), "\(ext): \(result.stderr)")
            let intact = try Sotto.run(["decode", "--format", "hex", file], timeout: 60)
            #expect(intact.stderr.isEmpty && intact.stdout.split(separator: "\n").count == 6, "\(ext): \(intact.stderr)")
        }
    }

    /// A FLAC whose STREAMINFO announces 1000 samples (S1): libsndfile stops there; the rest is warned of.
    @Test func flacAnnouncingFewerSamplesIsWarnedOf() throws {
        let dir = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: dir) }
        let flac = dir.appendingPathComponent("t.flac").path
        #expect(try Sotto.run(["send", "0x0102", "--repeat", "6", "--interval", "1.75", "--jitter", "0", "--out", flac]).status == 0)
        let intact = try Sotto.run(["decode", "--format", "hex", flac], timeout: 60)
        #expect(intact.stderr.isEmpty && intact.stdout.split(separator: "\n").count == 6, "\(intact.stderr)")
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: flac)))
        // STREAMINFO's 36-bit total samples: the low 4 bits of byte 21 and bytes 22-25.
        bytes[21] &= 0xF0
        bytes.replaceSubrange(22..<26, with: [0, 0, 0x03, 0xE8])
        let damaged = dir.appendingPathComponent("d.flac").path
        try Data(bytes).write(to: URL(fileURLWithPath: damaged))
        let result = try Sotto.run(["decode", "--format", "hex", damaged], timeout: 60)
        #expect(result.stderr.contains("warning") && result.stderr.contains("announces 1000 samples"), "\(result.status) \(result.stderr)")

        // One metadata length byte: a SEEKTABLE claiming 128 KiB more skips every frame; an error, not exit 0.
        let original = [UInt8](try Data(contentsOf: URL(fileURLWithPath: flac)))
        let seekTable: [UInt8] = [0x03, 0x00, 0x00, 0x12] + [UInt8](repeating: 0xff, count: 8) + [UInt8](repeating: 0, count: 10)
        let withTable = Array(original[0..<42]) + seekTable + Array(original[42...])
        let table = dir.appendingPathComponent("s.flac").path
        try Data(withTable).write(to: URL(fileURLWithPath: table))
        #expect(try Sotto.run(["decode", "--format", "hex", table], timeout: 60).stdout.split(separator: "\n").count == 6)
        var lengthByte = withTable
        lengthByte[43] = 0x02
        let skipped = dir.appendingPathComponent("l.flac").path
        try Data(lengthByte).write(to: URL(fileURLWithPath: skipped))
        let lost = try Sotto.run(["decode", "--format", "hex", skipped], timeout: 60)
        #expect(lost.status == 2 && lost.stderr.contains("no sample could be read"), "\(lost.status) \(lost.stderr)")
    }

    /// A WAV to a pipe is streamed (C3): memory stays flat, and the header states the exact length.
    @Test func wavToAPipeIsStreamed() throws {
        let short = try sendToPipe(seconds: 10)
        let long = try sendToPipe(seconds: 3600)
        #expect(short.status == 0 && long.status == 0)
        let dataBytes = Int(long.head[40]) | Int(long.head[41]) << 8 | Int(long.head[42]) << 16 | Int(long.head[43]) << 24
        #expect(long.bytes > 340_000_000 && dataBytes == long.bytes - 44, "\(long.bytes) bytes, header says \(dataBytes)")
        // An hour at 48 kHz is 346 MB of WAV; built in memory the peak was about twice that above the short one's.
        #expect(long.peak < short.peak + 40_000_000, "peak \(long.peak / 1_000_000) MB for an hour, \(short.peak / 1_000_000) MB for 10 s")
    }

    /// Runs `send` of about `seconds` of audio to a pipe drained here: exit status, bytes, the first 44 of
    /// them, and the peak resident memory (bytes).
    private func sendToPipe(seconds: Int) throws -> (status: Int32, bytes: Int, head: [UInt8], peak: Int) {
        let words: [String] = [Sotto.executable.path, "send", "0x01", "--repeat", "\(seconds)", "--interval", "1", "--jitter", "0", "--out", "-"]
        let argv = words.map { strdup($0) } + [nil]
        defer { for p in argv { free(p) } }
        var output: [Int32] = [0, 0]
        guard pipe(&output) == 0 else { throw CocoaError(.fileWriteUnknown) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, output[1], 1)
        posix_spawn_file_actions_addclose(&actions, output[0])
        posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        var pid: pid_t = 0
        guard posix_spawn(&pid, Sotto.executable.path, &actions, nil, argv, environ) == 0 else { throw CocoaError(.executableLoad) }
        close(output[1])
        var head = [UInt8](repeating: 0, count: 44)
        var total = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(output[0], $0.baseAddress, $0.count) }
            if n <= 0 { break }
            for i in 0..<min(n, max(0, 44 - total)) { head[total + i] = buffer[i] }
            total += n
        }
        close(output[0])
        var status: Int32 = 0
        var usage = rusage()
        while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
        return (status, total, head, usage.ru_maxrss * 1024)
    }
}

/// Binds a Unix-domain socket at `path` (listening or not) and returns its descriptor.
private func bindUnixSocket(_ path: String, listening: Bool) throws -> Int32 {
    let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let bytes = Array(path.utf8)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
    guard bound == 0, !listening || listen(descriptor, 4) == 0 else { throw CocoaError(.fileWriteUnknown) }
    return descriptor
}
