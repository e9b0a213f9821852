import ArgumentParser
import Foundation
import Synchronization
import SottoAudio
import SottoTools

/// Standard output, one line per event: each line is written at once (never held in a buffer when stdout
/// is a pipe), after clearing a progress line on stderr.
///
/// A write that fails ends the program: EPIPE (the reader went away, `sotto decode x | head -1`) quietly
/// with status 0, as Unix tools end there; any other failure (a full disk, `> /dev/full`) with a message
/// on stderr and status 2. Never a crash, never a silent loss.
enum Output {
    static func line(_ text: String) {
        ProgressLine.shared.clear()
        let code = StandardStream.write(text + "\n", to: STDOUT_FILENO)
        if code != 0 { failed(code) }
    }

    /// Writes a line and reports a failure instead of ending the program (for output that must not be lost,
    /// such as a secret shown once: the caller undoes what it did).
    static func lineOrThrow(_ text: String) throws(StandardStreamError) {
        ProgressLine.shared.clear()
        let code = StandardStream.write(text + "\n", to: STDOUT_FILENO)
        if code != 0 { throw StandardStreamError(code: code) }
    }

    /// Ends the program after standard output failed with `code` (errno).
    static func failed(_ code: Int32) -> Never {
        if code == EPIPE { exit(ExitStatus.success.rawValue) }
        printError("Error: \(StandardStreamError(code: code))")
        exit(ExitStatus.failure.rawValue)
    }

    /// A record as one JSON line.
    static func record(_ record: some JSONRecord) { line(JSONLines.line(record)) }
}

/// A progress line on stderr, rewritten in place: only when stderr is a terminal and not `--quiet`,
/// cleared before anything else is printed.
final class ProgressLine: Sendable {
    static let shared = ProgressLine()
    private struct State {
        var enabled = standardErrorIsTerminal
        var shown = false
        var lastWrite = Date.distantPast
    }
    private let state = Mutex(State())

    /// Turns progress off (`--quiet`).
    func silence() { state.withLock { $0.enabled = false } }

    /// Shows `text` (at most ten times a second).
    func update(_ text: String) {
        state.withLock { state in
            guard state.enabled, Date().timeIntervalSince(state.lastWrite) >= 0.1 else { return }
            state.lastWrite = Date()
            state.shown = true
            StandardError.write("\r\u{1B}[K\(text)")
        }
    }

    /// The progress of decoding a recording named `label`, shown once it is longer than a minute (a short
    /// one is done before a line would be worth reading).
    func decoding(_ label: String) -> (RecordingDecoder.Progress) -> Void {
        { [self] progress in
            guard progress.seconds >= 60 else { return }
            update("\(label): " + (progress.fraction.map { "\(Int(100 * $0))%" } ?? "\(fixed(progress.seconds, 0)) s"))
        }
    }

    /// Erases the line, if one is shown.
    func clear() {
        state.withLock { state in
            guard state.shown else { return }
            state.shown = false
            state.lastWrite = .distantPast
            StandardError.write("\r\u{1B}[K")
        }
    }
}

/// `--quiet`: no progress on stderr.
struct ProgressOptions: ParsableArguments {
    @Flag(name: [.short, .long], help: "No progress line on stderr (shown only when stderr is a terminal).")
    var quiet = false

    func apply() { if quiet { ProgressLine.shared.silence() } }
}

/// `--format`: how records are printed.
enum OutputFormat: String, ExpressibleByArgument, CaseIterable {
    /// Lines for people (tables for bench and profiles).
    case text
    /// JSON Lines of the one schema (SottoTools' JSONLines).
    case json
    /// The token only, one per line (frames only).
    case hex
}

/// `--format text|json` (and `hex` for commands that print frames).
struct FormatOption: ParsableArguments {
    @Option(help: "Output: text, json (JSON Lines, one schema for every command) or hex (the token only; decode and listen).")
    var format: OutputFormat = .text

    /// Refuses hex for commands whose records are not frames.
    func refuseHex(_ command: String) throws {
        if format == .hex { throw ValidationError("--format hex prints tokens: \(command) prints no tokens; use text or json") }
    }
}

/// Headerless PCM input (`arecord -t raw`, `sox -t raw`): the layout no header states.
struct RawInputOptions: ParsableArguments {
    @Option(parsing: .unconditional, help: ArgumentHelp("Read the input as headerless PCM at this sample rate (Hz).",
                               discussion: "With --encoding and --channels; without them, the file's header says."))
    var rate: Double?
    @Option(help: "Raw sample encoding (little-endian): \(RawPCMFormat.Encoding.allCases.map(\.rawValue).joined(separator: ", ")).")
    var encoding: RawPCMFormat.Encoding?
    @Option(parsing: .unconditional, help: "Raw input channels.")
    var channels: Int?

    func validate() throws {
        try NumericOption("--rate", AudioFileReader.supportedSampleRates, unit: "Hz").check(rate)
        try NumericOption("--channels", 1...256).check(channels)
        if rate == nil && (encoding != nil || channels != nil) {
            throw ValidationError("raw input needs --rate (with --encoding, default s16, and --channels, default 1)")
        }
    }

    /// The raw layout, or nil for files with a header.
    var format: RawPCMFormat? {
        rate.map { RawPCMFormat(sampleRate: $0, channels: channels ?? 1, encoding: encoding ?? .s16) }
    }
}

extension RawPCMFormat.Encoding: ExpressibleByArgument {}

/// Reads standard input for `--text -`, `--hex -` and a token argument `-`.
enum StandardInput {
    /// All of standard input as text; for hex, surrounding whitespace is dropped, for text one final newline.
    static func read(asHex: Bool) throws -> String {
        let data = FileHandle.standardInput.readDataToEndOfFile()
        guard let text = String(data: data, encoding: .utf8) else {
            throw ValidationError("standard input is not UTF-8 text: give the bytes as hex")
        }
        if asHex { return text.trimmingCharacters(in: .whitespacesAndNewlines) }
        return text.hasSuffix("\r\n") ? String(text.dropLast(2)) : text.hasSuffix("\n") ? String(text.dropLast()) : text
    }

    /// `value`, or standard input when it is `-`.
    static func resolve(_ value: String?, asHex: Bool) throws -> String? {
        value == "-" ? try read(asHex: asHex) : value
    }
}

/// Unbuffered writes of whole strings to a descriptor (standard output and error).
enum StandardStream {
    /// Writes every byte of `text` to `descriptor`, retrying on EINTR; 0, or the errno of the failure.
    static func write(_ text: String, to descriptor: Int32) -> Int32 {
        var text = text
        return text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return errno
                }
                offset += n
            }
            return 0
        }
    }
}

/// Standard output could not be written.
struct StandardStreamError: Error, CustomStringConvertible {
    /// The errno of the failed write.
    let code: Int32
    var description: String { "cannot write to standard output: \(String(cString: strerror(code)))" }
}
