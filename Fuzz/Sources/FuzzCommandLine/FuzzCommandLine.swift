import CFuzzerDriver
import Foundation

// The whole program under libFuzzer: each input is a recipe (a command, an audio format, a cut, flipped bytes,
// standard input or a file, an output target) that is carried out by running the built `sotto` executable
// (SOTTO_FUZZ_BINARY) as a process. What is checked is what a user sees: the exit status is 0, 2 or 64 (never a
// signal, never a hang), a failure says why on standard error, a failed write leaves no file behind, and a
// damaged input never yields exit 0 with fewer frames than the intact one and no warning. libFuzzer's coverage
// is this process's only (the recipe's interpretation); its value here is the driver, the corpus and the
// artifacts: a recipe that fails is written to the artifact directory and replays with the same binary.

/// The `sotto` executable under test.
let binary: String = ProcessInfo.processInfo.environment["SOTTO_FUZZ_BINARY"] ?? ".build/debug/sotto"
/// This process's scratch directory (in memory when /dev/shm exists).
let work: String = {
    let base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NSTemporaryDirectory()
    let path = "\(base)/sotto-fuzz-cli-\(getpid())"
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}()

nonisolated(unsafe) var cleanupRegistered = false

/// The token every intact input holds, and how many times.
let token = "c0ffee42"
let sentFrames = 3
/// Formats the command line writes and reads back (extensions).
let formats = ["wav", "flac", "ogg", "au", "aiff", "mp3"]
/// Formats whose damage the container can detect (checksums): flipped bytes there may not lose frames silently.
let checksummed: Set<String> = ["flac", "ogg"]

/// A finished process: exit status (128 + signal when killed), standard output and error.
struct Run {
    var status: Int32
    var stdout: Data
    var stderr: String
    var timedOut: Bool
}

/// Runs `sotto arguments` with `input` on a pipe as standard input (or /dev/null), stdout and stderr to files;
/// killed after `timeout` seconds.
func sotto(_ arguments: [String], input: Data? = nil, timeout: Double = 20) -> Run {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: binary)
    process.arguments = arguments
    process.currentDirectoryURL = URL(fileURLWithPath: work)
    let outPath = "\(work)/.stdout", errPath = "\(work)/.stderr"
    _ = FileManager.default.createFile(atPath: outPath, contents: nil)
    _ = FileManager.default.createFile(atPath: errPath, contents: nil)
    process.standardOutput = FileHandle(forWritingAtPath: outPath)
    process.standardError = FileHandle(forWritingAtPath: errPath)
    let pipe = Pipe()
    process.standardInput = input == nil ? FileHandle(forReadingAtPath: "/dev/null") : pipe
    do { try process.run() } catch { fatalError("cannot run \(binary): \(error) (set SOTTO_FUZZ_BINARY)") }
    if let input {
        signal(SIGPIPE, SIG_IGN)
        let writer = pipe.fileHandleForWriting
        Thread.detachNewThread {
            try? writer.write(contentsOf: input)
            try? writer.close()
        }
    }
    let deadline = Date().addingTimeInterval(timeout)
    var timedOut = false
    while process.isRunning {
        if Date() > deadline { timedOut = true; kill(process.processIdentifier, SIGKILL); break }
        usleep(2_000)
    }
    process.waitUntilExit()
    let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
    let out = FileManager.default.contents(atPath: outPath) ?? Data()
    let err = String(decoding: FileManager.default.contents(atPath: errPath) ?? Data(), as: UTF8.self)
    return Run(status: status, stdout: out, stderr: err, timedOut: timedOut)
}

/// Stops the fuzzer on a finding: libFuzzer writes the recipe to its artifact directory.
func finding(_ what: String, _ run: Run, _ arguments: [String]) -> Never {
    let text = "FINDING: \(what)\n  sotto \(arguments.joined(separator: " "))\n  status \(run.status)\(run.timedOut ? " (timed out)" : "")\n  stderr: \(run.stderr.prefix(2_000))\n"
    FileHandle.standardError.write(Data(text.utf8))
    abort()
}

/// Every run: a status of the program's (0, 2, 64), no signal or hang, and a reason on failure.
func checkEnding(_ run: Run, _ arguments: [String]) {
    if run.timedOut { finding("hang", run, arguments) }
    if run.status > 128 { finding("killed by signal \(run.status - 128)", run, arguments) }
    if ![0, 2, 64].contains(run.status) { finding("exit status \(run.status)", run, arguments) }
    if run.status != 0 && run.stderr.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
        finding("failed without a message", run, arguments)
    }
}

/// Frames of the token in `decode --format hex` output.
func tokens(_ stdout: Data) -> Int {
    String(decoding: stdout, as: UTF8.self).split(separator: "\n").filter { $0.contains(token) }.count
}

/// The intact recording in each format (made once by `sotto send`), and the frames its decode finds.
let intact: [String: (bytes: [UInt8], frames: Int)] = {
    var result: [String: (bytes: [UInt8], frames: Int)] = [:]
    for format in formats {
        let path = "\(work)/intact.\(format)"
        let arguments = ["send", "0x\(token)", "--repeat", "\(sentFrames)", "--interval", "1.2", "--jitter", "0", "--seed", "1", "--out", path]
        let sent = sotto(arguments, timeout: 120)
        guard sent.status == 0, let bytes = FileManager.default.contents(atPath: path) else { fatalError("cannot make \(path): \(sent.stderr)") }
        let decoded = sotto(["decode", "--format", "hex", path], timeout: 120)
        result[format] = ([UInt8](bytes), tokens(decoded.stdout))
        unlink(path)
    }
    return result
}()

/// Reads the recipe's fields; zeros once the input is used up.
struct Recipe {
    let bytes: [UInt8]
    var index = 0
    mutating func byte() -> Int { defer { index += 1 }; return index < bytes.count ? Int(bytes[index]) : 0 }
    mutating func word() -> Int { (0..<4).reduce(0) { acc, _ in acc << 8 | byte() } }
}

/// The files in the scratch directory other than the intact ones and the runner's own (a write that failed
/// must leave none behind, a hidden partial file included).
func leftovers() -> [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: work)) ?? []).filter { ![".stdout", ".stderr"].contains($0) }
}

func clearScratch() {
    for name in leftovers() { try? FileManager.default.removeItem(atPath: "\(work)/\(name)") }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCommandLine(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    if !cleanupRegistered {
        cleanupRegistered = true
        atexit { try? FileManager.default.removeItem(atPath: work) }
    }
    _ = intact
    var recipe = Recipe(bytes: Array(UnsafeBufferPointer(start: data, count: size)))
    clearScratch()
    let command = recipe.byte() % 4
    let format = formats[recipe.byte() % formats.count]
    switch command {
    case 0, 1:
        // decode, of a file or of standard input: damaged by a cut and flipped bytes.
        var bytes = intact[format]!.bytes
        let cut = recipe.byte() % 2 == 1
        if cut { bytes = Array(bytes[0..<(recipe.word() % (bytes.count + 1))]) }
        let flips = recipe.byte() % 4
        for _ in 0..<flips where !bytes.isEmpty {
            let at = recipe.word() % bytes.count
            bytes[at] ^= UInt8(max(1, recipe.byte()))
        }
        let onStdin = command == 1
        // A pipe is read as "-" or through a path naming it (/dev/stdin): the same checks either way.
        let stdinName = recipe.byte() % 2 == 1 ? "/dev/stdin" : "-"
        let path = "\(work)/in.\(format)"
        if !onStdin { _ = FileManager.default.createFile(atPath: path, contents: Data(bytes)) }
        let arguments = ["decode", "--format", "hex", onStdin ? stdinName : path]
        let run = sotto(arguments, input: onStdin ? Data(bytes) : nil)
        checkEnding(run, arguments)
        // A loss the input shows is never silent: a cut of a file; a cut of a stream whose header states its
        // length (WAV, AU, FLAC) or whose pages end without the last one (Ogg); a checksum that fails (FLAC
        // files, Ogg files and streams).
        let statesLength: Set<String> = ["wav", "au", "flac", "ogg"]
        let detectable = flips == 0 && cut && (!onStdin || statesLength.contains(format))
            || !cut && flips > 0 && (!onStdin || format == "ogg") && checksummed.contains(format)
        if run.status == 0, detectable, tokens(run.stdout) < intact[format]!.frames, !run.stderr.contains("warning") {
            finding("\(tokens(run.stdout)) of \(intact[format]!.frames) frames, exit 0, no warning", run, arguments)
        }
    case 2:
        // simulate: a damaged input through a channel into a format; failure leaves no output.
        var bytes = intact[format]!.bytes
        if recipe.byte() % 2 == 1 { bytes = Array(bytes[0..<(recipe.word() % (bytes.count + 1))]) }
        for _ in 0..<(recipe.byte() % 3) where !bytes.isEmpty { bytes[recipe.word() % bytes.count] ^= UInt8(max(1, recipe.byte())) }
        let onStdin = recipe.byte() % 2 == 1
        let path = "\(work)/in.\(format)"
        if !onStdin { _ = FileManager.default.createFile(atPath: path, contents: Data(bytes)) }
        let output = "out.\(formats[recipe.byte() % formats.count])"
        let options: [[String]] = [["--rt60", "0.3"], ["--snr", "20"], ["--rate", "44100"], ["--ppm", "120"], ["--clip", "0.5"], ["--quantize16"]]
        let chosen = recipe.byte()
        let arguments = ["simulate", onStdin ? "-" : path, "\(work)/\(output)"] + options.indices.filter { chosen & (1 << $0) != 0 }.flatMap { options[$0] }
        let run = sotto(arguments, input: onStdin ? Data(bytes) : nil, timeout: 60)
        checkEnding(run, arguments)
        let produced = FileManager.default.fileExists(atPath: "\(work)/\(output)")
        if run.status == 0 && !produced { finding("exit 0 without the output", run, arguments) }
        if run.status != 0 && leftovers().contains(where: { $0.hasPrefix("out.") || $0.hasPrefix(".out.") }) {
            finding("a failed simulate left \(leftovers())", run, arguments)
        }
    default:
        // send --out: every format, to a file, standard output, a full device or a missing directory.
        let targets = ["\(work)/out.\(format)", "-", "/dev/full", "\(work)/missing/out.\(format)"]
        let target = targets[recipe.byte() % targets.count]
        let repeats = 1 + recipe.byte() % 3
        let arguments = ["send", "0x\(token)", "--repeat", "\(repeats)", "--interval", "1.2", "--jitter", "0", "--out", target]
        let run = sotto(arguments)
        checkEnding(run, arguments)
        if target == "/dev/full" && run.status != 2 { finding("a write to /dev/full ended \(run.status)", run, arguments) }
        if run.status != 0 && !leftovers().isEmpty { finding("a failed send left \(leftovers())", run, arguments) }
        if run.status == 0 && target.hasPrefix(work) {
            // Lossless formats hold every frame; the lossy ones at their highest quality do too.
            let decoded = sotto(["decode", "--format", "hex", target])
            checkEnding(decoded, ["decode", target])
            if tokens(decoded.stdout) != repeats { finding("\(tokens(decoded.stdout)) of \(repeats) frames written", decoded, arguments) }
        }
    }
    return 0
}

/// The executable's entry point (SwiftPM's name for it): libFuzzer's driver with this target's input function.
@_cdecl("FuzzCommandLine_main")
public func fuzzCommandLineMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc, argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, { data, size in fuzzCommandLine(data, size) })
}
